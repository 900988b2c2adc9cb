"""macOS's GPU working set (the wired limit): read through MLX on a Mac, or stated as
``wired:SIZE`` beside unified memory; an MLX plan is judged against it (issue 23)."""

from __future__ import annotations

import sys
import types

import pytest

from trainmem.core.plan import Plan
from trainmem.devices import SystemReader, parse_device_spec, read_devices
from trainmem.devices.fakes import FakeNvml, FakePsutil
from trainmem.devices.nvml import NvmlReader
from trainmem.devices.target import targets_from_readings
from trainmem.devices.unified import working_set_bytes
from trainmem.planner.report import build_report

GiB, GB = 2**30, 10**9


def fake_mlx(monkeypatch: pytest.MonkeyPatch, info: object) -> None:
    """An ``mlx.core`` whose device_info() answers ``info`` (MLX on a Mac's GPU answers
    max_recommended_working_set_size; its CPU build does not)."""
    core = types.ModuleType("mlx.core")
    core.device_info = lambda: info  # type: ignore[attr-defined]
    package = types.ModuleType("mlx")
    package.core = core  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mlx", package)
    monkeypatch.setitem(sys.modules, "mlx.core", core)


def test_the_working_set_is_read_through_mlx_and_range_checked(monkeypatch) -> None:
    fake_mlx(monkeypatch, {"max_recommended_working_set_size": 28 * GiB})
    assert working_set_bytes(36 * GiB) == 28 * GiB
    for bad in (0, -1, True, "28", 40 * GiB, 2.5e10):
        fake_mlx(monkeypatch, {"max_recommended_working_set_size": bad})
        assert working_set_bytes(36 * GiB) is None, bad
    fake_mlx(monkeypatch, {"architecture": "x86_64"})  # the CPU build: no such key
    assert working_set_bytes(36 * GiB) is None
    fake_mlx(monkeypatch, None)
    assert working_set_bytes(36 * GiB) is None


def test_a_mac_reading_carries_it_to_the_auto_target(monkeypatch) -> None:
    fake_mlx(monkeypatch, {"max_recommended_working_set_size": 28 * GiB})
    nvml = NvmlReader(module=FakeNvml(init_error=12), register_atexit=False)
    devices, _ = read_devices(nvml, SystemReader(FakePsutil(total=36 * GiB)), apple=True)
    assert devices[0].wired_limit_bytes == 28 * GiB
    assert devices[0].to_json()["wired_limit_bytes"] == 28 * GiB  # devices --json
    (target,) = targets_from_readings(devices)
    assert (target.kind, target.usable_bytes, target.wired_bytes) == ("unified", 27 * GiB, 28 * GiB)


def test_stated_beside_unified_memory_and_refused_elsewhere() -> None:
    (mac,) = parse_device_spec("mac-36GB,wired:30GB")
    assert (mac.wired_bytes, mac.usable_bytes) == (30 * GB, 27 * GiB)
    with pytest.raises(ValueError, match="beside it"):
        parse_device_spec("rtx-4090,wired:30GB")
    with pytest.raises(ValueError, match="more than the unified memory"):
        parse_device_spec("unified:16GB,wired:20GB")


def test_an_mlx_plan_is_judged_on_the_working_set_a_torch_plan_on_three_quarters() -> None:
    targets = parse_device_spec("mac-36GB,wired:30GB")
    mlx = Plan(model="Qwen/Qwen2.5-7B", method="qlora", stack="mlx")
    report = build_report(mlx, targets=targets, solve=False, simulate=False)
    assert report.fit[0].usable_bytes == 30 * GB
    assert report.targets[0].basis.startswith("macOS's GPU working set; the guide's 3/4 is 29.0")
    fit = report.to_json()["fit"][0]
    assert (fit["usable_bytes"], fit["wired_bytes"]) == (30 * GB, 30 * GB)
    torch = Plan(model="Qwen/Qwen2.5-7B", method="qlora", stack="trainer")
    assert build_report(torch, targets=targets, solve=False).fit[0].usable_bytes == 27 * GiB
    # unknown: the 3/4 rule stays, and the report says how to give the real figure
    unknown = build_report(mlx, targets=parse_device_spec("mac-36GB"), solve=False)
    assert unknown.fit[0].usable_bytes == 27 * GiB
    assert "wired:SIZE" in unknown.targets[0].basis


def test_the_sampler_reads_the_working_set_once(monkeypatch) -> None:
    """AppleSource runs every second: MLX is asked (or looked for) at the first sample only."""
    from trainmem.devices.source import AppleSource

    calls: list[int] = []
    fake_mlx(monkeypatch, {"max_recommended_working_set_size": 28 * GiB})
    sys.modules["mlx.core"].device_info = lambda: (
        calls.append(1)
        or {  # type: ignore[attr-defined]
            "max_recommended_working_set_size": 28 * GiB
        }
    )
    source = AppleSource(SystemReader(FakePsutil(total=36 * GiB)))
    readings = [source.read()[0] for _ in range(3)]
    assert [r.wired_limit_bytes for r in readings] == [28 * GiB] * 3 and len(calls) == 1
