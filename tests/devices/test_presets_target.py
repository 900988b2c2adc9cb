"""Presets for --device and parse_device_spec, including its errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from trainmem.core.units import parse_size
from trainmem.devices import (
    DeviceTarget,
    NvmlReader,
    SystemReader,
    list_presets,
    parse_device_spec,
    resolve_preset,
)
from trainmem.devices.fakes import FakeGpu, FakeNvml, FakePsutil, eight_gpu_machine

MiB, GiB, GB = 2**20, 2**30, 10**9

# What NVML reports as memory.total for these cards (MiB).
NVML_TOTALS = {
    "A100-80GB": 81920,
    "H100-80GB": 81559,
    "H100-PCIe-80GB": 81559,  # "NVIDIA H100 PCIe, 81559 MiB" in many nvidia-smi outputs
    "H200-141GB": 143771,
    "RTX-4090": 24564,
    "T4": 15360,
    "L4": 23034,
    "RTX-5090": 32607,
    "B200-180GB": 183359,
}
BRIEF = [
    "T4",
    "L4",
    "A10G",
    "RTX-3060",
    "RTX-3090",
    "RTX-4060-Ti-16GB",
    "RTX-4070",
    "RTX-4080",
    "RTX-4090",
    "RTX-5090",
    "A100-40GB",
    "A100-40GB-PCIe",
    "A100-80GB",
    "A100-80GB-PCIe",
    "H100-80GB",
    "H100-PCIe-80GB",
    "H100-NVL-94GB",
    "H200-141GB",
    "B200-180GB",
    "L40S",
    "RTX-A6000",
    "RTX-6000-Ada",
    "mac-16GB",
    "mac-18GB",
    "mac-24GB",
    "mac-32GB",
    "mac-36GB",
    "mac-48GB",
    "mac-64GB",
    "mac-96GB",
    "mac-128GB",
    "mac-192GB",
]


@pytest.mark.parametrize(
    ("name", "preset", "nvswitch"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-80GB", True),
        ("NVIDIA H100 PCIe", "H100-PCIe-80GB", False),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB", True),
        ("NVIDIA A100 80GB PCIe", "A100-80GB-PCIe", False),
        ("NVIDIA A100-PCIE-40GB", "A100-40GB-PCIe", False),
        ("H100 NVL", "H100-NVL-94GB", False),
    ],
)
def test_pcie_cards_are_not_taken_for_sxm_boards(name: str, preset: str, nvswitch: bool) -> None:
    # the preset's name is what NCCL's figures read: a PCIe card shares no NVSwitch
    from trainmem.core.runtime import gpu_nvswitch

    target = resolve_preset(name)
    assert target is not None and target.name == preset
    assert gpu_nvswitch(target.name) is nvswitch


@pytest.mark.parametrize(("name", "mib"), NVML_TOTALS.items())
def test_gpu_totals_are_what_nvml_reports(name: str, mib: int) -> None:
    target = resolve_preset(name)
    assert target == DeviceTarget(name, "gpu", mib * MiB, mib * MiB)


def test_every_preset_from_the_brief_exists() -> None:
    names = [t.name for t in list_presets()]
    assert names == BRIEF
    assert all(resolve_preset(n) is not None for n in names)


@pytest.mark.parametrize(
    "spelling",
    ["RTX-4090", "rtx 4090", "RTX_4090", "rtx4090", "NVIDIA GeForce RTX 4090", " Rtx-4090-24GB "],
)
def test_matching_ignores_case_spaces_dashes(spelling: str) -> None:
    target = resolve_preset(spelling)
    assert target is not None and target.name == "RTX-4090"


@pytest.mark.parametrize(
    ("nvml_name", "preset"),
    [
        ("NVIDIA H100 80GB HBM3", "H100-80GB"),
        ("NVIDIA A100-SXM4-80GB", "A100-80GB"),
        ("Tesla T4", "T4"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX-6000-Ada"),
        ("NVIDIA H100 NVL", "H100-NVL-94GB"),
    ],
)
def test_nvml_names_resolve(nvml_name: str, preset: str) -> None:
    target = resolve_preset(nvml_name)
    assert target is not None and target.name == preset


def test_mac_sizes_are_gib_and_unified() -> None:
    mac = resolve_preset("mac-36GB")
    assert mac == DeviceTarget("mac-36GB", "unified", 36 * GiB, 27 * GiB)


@pytest.mark.parametrize("name", ["A100", "RTX 4060 Ti", "mac-20GB", "", "H100-40GB"])
def test_unknown_or_ambiguous_names(name: str) -> None:
    assert resolve_preset(name) is None


def test_presets_module_is_pure() -> None:
    code = (
        "import sys, trainmem.devices.presets as p; p.list_presets(); "
        "bad = {'pynvml', 'psutil', 'textual', 'rich'} & set(sys.modules); "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_devices_package_imports_no_ui() -> None:
    code = (
        "import sys, trainmem.devices; "
        "bad = {'pynvml', 'textual', 'rich'} & set(sys.modules); assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# -- sizes -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("24GiB", 24 * GiB),
        ("80GB", 80 * GB),
        ("80 gb", 80 * GB),
        ("1.5TB", 1500 * GB),
        ("0.5GiB", GiB // 2),
        ("16384MiB", 16 * GiB),
    ],
)
def test_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["16G", "16g", "2T", "512M"])
def test_bare_g_is_ambiguous(text: str) -> None:
    with pytest.raises(ValueError, match=r"ambiguous: write .*B \(10\^\d+ bytes\) or .*iB"):
        parse_size(text)


@pytest.mark.parametrize("text", ["16", "GB", "-3GB", "0GB", "16 bytes", "1e3GB"])
def test_bad_sizes(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


# -- device specs ------------------------------------------------------------------------------


def test_spec_forms() -> None:
    targets = parse_device_spec("rtx 4090, 24GiB, 80GB, unified:36GB, gpu:16GiB, mac-36GB")
    assert targets == [
        resolve_preset("RTX-4090"),
        DeviceTarget("GPU 24GiB", "gpu", 24 * GiB, 24 * GiB),
        DeviceTarget("GPU 80GB", "gpu", 80 * GB, 80 * GB),
        DeviceTarget("unified 36GB", "unified", 36 * GB, 27 * GB),
        DeviceTarget("GPU 16GiB", "gpu", 16 * GiB, 16 * GiB),
        DeviceTarget("mac-36GB", "unified", 36 * GiB, 27 * GiB),
    ]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("16G", "16GB (10^9 bytes) or 16GiB (2^30 bytes)"),
        ("unified:16G", "ambiguous"),
        ("banana", "unknown device 'banana'; use a preset"),
        ("", "empty device"),
        ("RTX-4090,,24GiB", "empty device"),
        ("tpu:16GB", "unknown device kind 'tpu'"),
        ("unified:lots", "not a size"),
        ("0GB", "larger than zero"),
        # the second used to be dropped without a word: the plan judged the first
        ("h100-80gb,ram:1GB,ram:200GB", "ram: given twice"),
        ("mac-36GB,wired:27GB,wired:30GB", "wired: given twice"),
    ],
)
def test_spec_errors_are_one_line(spec: str, words: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_device_spec(spec)
    assert words in str(err.value) and "\n" not in str(err.value)


def _auto(fake: FakeNvml) -> list[DeviceTarget]:
    nvml = NvmlReader(module=fake, register_atexit=False)
    system = SystemReader(FakePsutil(total=64 * GiB))
    return parse_device_spec("auto", nvml=nvml, system=system, apple=False)


def test_auto_lists_every_gpu_and_mig_slices() -> None:
    targets = _auto(eight_gpu_machine())
    assert [t.name for t in targets[:3]] == [
        "gpu0 NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        "gpu0 NVIDIA H100 80GB HBM3 MIG 3g.40gb",
        "gpu1 NVIDIA H100 80GB HBM3",
    ]
    assert len(targets) == 9 and all(t.kind == "gpu" for t in targets)
    assert targets[0].total_bytes == 40192 * MiB and targets[2].total_bytes == 81559 * MiB


def test_auto_unified_gpu() -> None:
    gpu = FakeGpu(name="NVIDIA GB10", fail={"nvmlDeviceGetMemoryInfo_v2": 3})
    gpu.fail["nvmlDeviceGetMemoryInfo"] = 3
    assert _auto(FakeNvml([gpu])) == [DeviceTarget("NVIDIA GB10", "unified", 64 * GiB, 48 * GiB)]


def test_auto_without_gpu_is_cpu_ram() -> None:
    (target,) = _auto(FakeNvml(init_error=12))
    assert target == DeviceTarget("CPU RAM (no GPU found)", "system", 64 * GiB, 64 * GiB)


def test_auto_skips_lost_gpus() -> None:
    targets = _auto(FakeNvml([FakeGpu(lost=True), FakeGpu(name="ok")]))
    assert [t.name for t in targets] == ["gpu1 ok"]


def test_auto_mixed_with_presets() -> None:
    nvml = NvmlReader(module=FakeNvml([FakeGpu(name="x")]), register_atexit=False)
    targets = parse_device_spec(
        "auto,T4", nvml=nvml, system=SystemReader(FakePsutil()), apple=False
    )
    assert [t.name for t in targets] == ["gpu0 x", "T4"]


# -- bare model numbers, "did you mean", --presets ----------------------------------------------


@pytest.mark.parametrize(
    ("number", "preset"),
    [("4090", "RTX-4090"), ("3090", "RTX-3090"), ("5090", "RTX-5090"), ("3060", "RTX-3060")],
)
def test_bare_model_numbers_are_presets(number: str, preset: str) -> None:
    (target,) = parse_device_spec(number)
    assert target == resolve_preset(preset)


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (
            "a100",
            "unknown device 'a100'; did you mean A100-40GB, A100-40GB-PCIe, A100-80GB or "
            "A100-80GB-PCIe?",
        ),
        (
            "4060",
            "'4060' is no preset and needs a unit to be a size (e.g. 4060GB or 4060GiB); "
            "did you mean RTX-4060-Ti-16GB?",
        ),
        ("rtx4900", "did you mean RTX-4090, RTX-4080 or RTX-4070?"),
        ("h100 40gb", "did you mean H100-80GB"),
        ("24", "'24' is no preset and needs a unit to be a size (e.g. 24GB or 24GiB)"),
        ("1" * 500, "is no preset and needs a unit to be a size (e.g. 24GB or 24GiB)"),
    ],
)
def test_a_miss_says_what_was_meant(spec: str, words: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_device_spec(spec)
    text = str(err.value)
    assert words in text and "\n" not in text and len(text) < 300
    if "did you mean" in text:
        assert text.endswith("(trainmem-tui devices --presets lists them)")


def test_suggestions_are_presets_and_bounded() -> None:
    from trainmem.devices.presets import suggest_presets

    names = {t.name for t in list_presets()}
    for typed in ("a100", "4060", "rtx4900", "mac-20GB", "l4o", "h20"):
        found = suggest_presets(typed)
        assert found and set(found) <= names and len(found) <= 4, typed
    assert suggest_presets("banana") == [] and suggest_presets("x" * 10_000) == []


def test_too_many_devices_in_one_spec() -> None:
    with pytest.raises(ValueError, match="more than 64 devices"):
        parse_device_spec(",".join(["T4"] * 100_000))


def test_hostile_device_text_is_shown_escaped() -> None:
    with pytest.raises(ValueError) as err:
        parse_device_spec("\x1b]0;title\x07")
    assert "\x1b" not in str(err.value) and "\\x1b" in str(err.value)


def test_plan_reads_a_bare_model_number_through_the_same_parser() -> None:
    code = (
        "import sys; from trainmem.cli.main import main; "
        "sys.exit(main(['plan', '--model', '1.5B', '--method', 'qlora', '--device', '4090', "
        "'--json']))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert "RTX-4090" in out.stdout


def test_presets_are_listed_with_sizes() -> None:
    code = "import sys; from trainmem.cli.main import main; sys.exit(main(sys.argv[1:]))"
    out = subprocess.run(
        [sys.executable, "-c", code, "devices", "--presets"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[1:] if line}
    assert rows["RTX-4090"][1:5] == ["gpu", "25.8", "GB", "24.0"]
    assert "4090" in rows["RTX-4090"][-1]
    assert rows["mac-36GB"][1:7] == ["unified", "38.7", "GB", "36.0", "29.0", "GB"]
    assert set(rows) >= {t.name for t in list_presets()}
    js = subprocess.run(
        [sys.executable, "-c", code, "devices", "--presets", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    listed = {p["name"]: p for p in json.loads(js.stdout)["presets"]}
    assert [p for p in listed] == [t.name for t in list_presets()]
    assert listed["H100-80GB"]["total_bytes"] == 81559 * MiB
    assert listed["mac-36GB"]["usable_bytes"] == 27 * GiB
