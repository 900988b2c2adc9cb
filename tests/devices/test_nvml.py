"""NvmlReader against a fake pynvml: every failure becomes a reason, never an exception."""

from __future__ import annotations

import sys
from collections.abc import Callable

import pytest

from trainmem.devices import NvmlReader, read_devices
from trainmem.devices.fakes import FakeGpu, FakeMig, FakeNvml, FakeProcess, eight_gpu_machine
from trainmem.devices.nvml import binding_name

MiB = 2**20
Make = Callable[[FakeNvml], NvmlReader]

# NVML error codes, as in the C API
NOT_SUPPORTED, NO_PERMISSION, NOT_FOUND, DRIVER_NOT_LOADED = 3, 4, 6, 9
TIMEOUT, LIBRARY_NOT_FOUND, FUNCTION_NOT_FOUND, RM_MISMATCH, UNKNOWN = 10, 12, 13, 18, 999


# -- initialisation ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "words"),
    [
        (LIBRARY_NOT_FOUND, "library not found"),
        (DRIVER_NOT_LOADED, "driver not loaded"),
        (RM_MISMATCH, "versions differ"),
        (NO_PERMISSION, "no permission"),
        (UNKNOWN, "failed to start"),
    ],
)
def test_init_failure_is_a_reason(make_reader: Make, code: int, words: str) -> None:
    fake = FakeNvml([FakeGpu()], init_error=code)
    reader = make_reader(fake)
    status = reader.status()
    assert not status.available
    assert words in (status.reason or "")
    assert reader.read() == []
    reader.read()
    assert fake.calls["nvmlInit"] == 1  # a failed init is not retried every sample


def test_pynvml_module_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` fail
    status = NvmlReader(register_atexit=False).status()
    assert not status.available
    assert "nvidia-ml-py" in (status.reason or "")


def test_no_nvml_still_lists_system_memory(make_reader: Make, system: object) -> None:
    reader = make_reader(FakeNvml(init_error=LIBRARY_NOT_FOUND))
    devices, status = read_devices(reader, system, apple=False)  # type: ignore[arg-type]
    assert [d.kind for d in devices] == ["system"]
    assert devices[0].total_bytes and not status.available


def test_init_is_lazy_once_and_shutdown_at_exit(
    make_reader: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    registered: list[object] = []
    monkeypatch.setattr("atexit.register", registered.append)
    monkeypatch.setattr("atexit.unregister", lambda fn: None)
    fake = FakeNvml([FakeGpu()])
    reader = NvmlReader(module=fake)
    assert fake.calls["nvmlInit"] == 0  # nothing happens until asked
    for _ in range(3):
        reader.read()
    reader.status()
    assert fake.calls["nvmlInit"] == 1
    assert registered == [reader.close]
    reader.close()
    reader.close()
    assert fake.calls["nvmlShutdown"] == 1
    assert fake.initialised == 0


def test_device_count_failure(make_reader: Make) -> None:
    status = make_reader(FakeNvml([FakeGpu()], count_error=UNKNOWN)).status()
    assert not status.available and "cannot count GPUs" in (status.reason or "")


def test_versions_reported(make_reader: Make) -> None:
    status = make_reader(FakeNvml([FakeGpu()], driver_version="560.35.03")).status()
    assert status.available and status.reason is None
    assert status.driver_version == "560.35.03"
    assert status.nvml_version == "12.550.54.15"


def test_zero_gpus_is_available_with_a_note(make_reader: Make) -> None:
    status = make_reader(FakeNvml([])).status()
    assert status.available and status.reason == "NVML found no NVIDIA GPUs"


def test_binding_is_nvidias() -> None:
    assert binding_name().startswith("nvidia-ml-py ")


def test_without_the_driver_s_library_pynvml_is_never_imported(monkeypatch) -> None:
    import ctypes
    import importlib

    from trainmem.devices import nvml

    def no_library(name: str, *args: object, **kwargs: object) -> object:
        raise OSError(f"{name}: cannot open shared object file")

    imported: list[str] = []
    real_import = importlib.import_module
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(ctypes, "CDLL", no_library)
    monkeypatch.setattr(
        nvml.importlib, "import_module", lambda name: imported.append(name) or real_import(name)
    )
    status = NvmlReader(register_atexit=False).status()
    assert not status.available
    assert status.reason == "NVML library not found (no NVIDIA driver installed)"
    assert status.binding is not None and status.binding.startswith("nvidia-ml-py ")
    assert "pynvml" not in imported


def test_the_old_third_party_pynvml_is_named(monkeypatch) -> None:
    import importlib.metadata as md

    class OldPynvml:
        version = "11.5.0"
        files = (md.PackagePath("pynvml.py"), md.PackagePath("pynvml-11.5.0.dist-info/RECORD"))

    def distribution(name: str) -> object:
        if name == "pynvml":
            return OldPynvml()
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(md, "distribution", distribution)
    assert binding_name() == "pynvml 11.5.0 (not NVIDIA's nvidia-ml-py; install nvidia-ml-py)"


# -- memory ------------------------------------------------------------------------------------


def test_v2_memory_counts_reserved_as_used(make_reader: Make) -> None:
    gpu = FakeGpu(total=81559 * MiB, used=1000 * MiB, reserved=500 * MiB)
    (d,) = make_reader(FakeNvml([gpu])).read()
    assert d.kind == "gpu" and d.id == "gpu0"
    assert d.total_bytes == d.usable_bytes == 81559 * MiB
    assert d.used_bytes == 1500 * MiB
    assert d.reserved_bytes == 500 * MiB
    assert d.used_bytes + (d.free_bytes or 0) == d.total_bytes


def test_v1_fallback_when_driver_lacks_v2(make_reader: Make) -> None:
    gpu = FakeGpu(used=1000 * MiB, reserved=500 * MiB)
    gpu.fail["nvmlDeviceGetMemoryInfo_v2"] = FUNCTION_NOT_FOUND
    fake = FakeNvml([gpu])
    reader = make_reader(fake)
    (d,) = reader.read()
    reader.read()
    assert d.used_bytes == 1500 * MiB and d.reserved_bytes is None
    assert d.field_errors == ()  # the v1 answer is complete: no noise about v2
    assert fake.calls["nvmlDeviceGetMemoryInfo_v2"] == 1  # not asked again


def test_v1_when_binding_has_no_v2(make_reader: Make) -> None:
    (d,) = make_reader(FakeNvml([FakeGpu(used=MiB)], missing={"nvmlMemory_v2"})).read()
    assert d.used_bytes == MiB


# -- per-field and per-device failures ---------------------------------------------------------


def test_not_supported_field_on_one_device_is_not_asked_again(make_reader: Make) -> None:
    gpus = [FakeGpu(), FakeGpu()]
    gpus[0].fail["nvmlDeviceGetPowerUsage"] = NOT_SUPPORTED
    fake = FakeNvml(gpus)
    reader = make_reader(fake)
    first = reader.read()
    second = reader.read()
    for a in (first, second):
        assert a[0].power_w is None and a[0].field_error("power") == "not supported"
        assert a[1].power_w == 70.0 and a[1].field_errors == ()
        assert a[0].total_bytes  # the rest of the device still reads
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 3  # gpu0 once, gpu1 twice


def test_transient_error_is_retried(make_reader: Make) -> None:
    gpu = FakeGpu(temperature=61)
    gpu.fail["nvmlDeviceGetTemperature"] = TIMEOUT
    reader = make_reader(FakeNvml([gpu]))
    (d,) = reader.read()
    assert d.temperature_c is None and d.field_error("temperature")
    del gpu.fail["nvmlDeviceGetTemperature"]
    (d,) = reader.read()
    assert d.temperature_c == 61 and d.field_errors == ()


def test_gpu_lost_mid_run_others_keep_working(make_reader: Make) -> None:
    gpus = [FakeGpu(name="A"), FakeGpu(name="B", used=5 * MiB)]
    fake = FakeNvml(gpus)
    reader = make_reader(fake)
    assert all(d.unavailable is None for d in reader.read())
    gpus[0].lost = True
    lost, ok = reader.read()
    assert lost.unavailable and "lost" in lost.unavailable
    assert lost.name == "A" and lost.total_bytes is None
    assert ok.unavailable is None and ok.used_bytes == 5 * MiB
    calls = sum(fake.calls.values())
    lost, ok = reader.read()
    assert "lost" in (lost.unavailable or "")
    # The lost GPU is not queried again: only gpu1's memory, utilization, temperature, power
    # and processes (its MIG mode is known to be unsupported).
    assert sum(fake.calls.values()) - calls == 5


def test_gpu_unopenable_at_start(make_reader: Make) -> None:
    gpus = [FakeGpu(), FakeGpu()]
    gpus[1].fail["nvmlDeviceGetHandleByIndex"] = NO_PERMISSION
    a, b = make_reader(FakeNvml(gpus)).read()
    assert a.unavailable is None
    assert b.unavailable == "cannot open GPU: no permission" and b.id == "gpu1"


def test_driver_library_mismatch_mid_run_marks_device(make_reader: Make) -> None:
    gpu = FakeGpu()
    reader = make_reader(FakeNvml([gpu]))
    reader.read()
    gpu.fail["nvmlDeviceGetMemoryInfo_v2"] = RM_MISMATCH
    (d,) = reader.read()
    assert d.unavailable == "driver/NVML version mismatch"


# -- processes ---------------------------------------------------------------------------------


def test_no_permission_for_processes(make_reader: Make) -> None:
    gpu = FakeGpu(processes=[FakeProcess(1, MiB)])
    gpu.fail["nvmlDeviceGetComputeRunningProcesses_v3"] = NO_PERMISSION
    fake = FakeNvml([gpu])
    reader = make_reader(fake)
    for _ in range(3):
        (d,) = reader.read()
        assert d.processes == () and d.field_error("processes") == "no permission"
        assert d.total_bytes  # memory still reads
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1


@pytest.mark.parametrize("api", ["v3", "v2", "v1"])
def test_process_api_falls_back_to_what_the_driver_has(make_reader: Make, api: str) -> None:
    gpus = [FakeGpu(processes=[FakeProcess(7, 3 * MiB)]), FakeGpu()]
    fake = FakeNvml(gpus, process_api=api)
    reader = make_reader(fake)
    for _ in range(2):
        a, b = reader.read()
        assert [(p.pid, p.used_bytes) for p in a.processes] == [(7, 3 * MiB)]
        assert a.field_errors == () and b.processes == ()
    if api != "v3":  # the missing version is tried once for the whole machine
        assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v3"] == 1


def test_unversioned_process_call_mismatch(make_reader: Make) -> None:
    # A new binding on a driver with none of the calls: v3/v2 are missing and the unversioned
    # call raises NVMLLibraryMismatchError (not an NVMLError).
    gpu = FakeGpu(processes=[FakeProcess(7, MiB)])
    gpu.fail["nvmlDeviceGetComputeRunningProcesses"] = FUNCTION_NOT_FOUND
    fake = FakeNvml([gpu], process_api="v1")
    reader = make_reader(fake)
    for _ in range(2):
        (d,) = reader.read()
        assert d.processes == () and d.field_error("processes") == "not in this driver's NVML"
        assert d.total_bytes
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 1


def test_process_functions_missing_from_binding(make_reader: Make) -> None:
    names = {
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
        "nvmlDeviceGetComputeRunningProcesses",
    }
    (d,) = make_reader(FakeNvml([FakeGpu()], missing=names)).read()
    assert d.processes == () and d.field_error("processes")


def test_process_memory_not_reported(make_reader: Make) -> None:
    gpu = FakeGpu(processes=[FakeProcess(7, None)])
    (d,) = make_reader(FakeNvml([gpu])).read()
    assert d.processes[0].used_bytes is None


# -- 8 GPUs, MIG -------------------------------------------------------------------------------


def test_eight_gpu_machine_with_mig_and_processes(make_reader: Make) -> None:
    devices = make_reader(eight_gpu_machine()).read()
    assert [d.id for d in devices] == [f"gpu{i}" for i in range(8)]
    assert all(d.kind == "gpu" and d.unavailable is None for d in devices)
    assert all(d.field_errors == () for d in devices)  # MIG NotSupported is not a fault
    mig = devices[0].mig
    assert mig is not None and [m.index for m in mig] == [0, 1]  # empty slots skipped
    assert mig[0].total_bytes == 40192 * MiB and mig[0].uuid == "MIG-a"
    assert [(p.pid, p.gpu_instance_id) for p in devices[0].processes] == [(1000, 1), (2000, 2)]
    assert all(d.mig is None for d in devices[1:])
    assert [p.pid for p in devices[7].processes] == [1007, 999_999]
    assert devices[3].utilization_pct == 93 and devices[3].temperature_c == 53
    assert devices[3].power_w == 503.0


def test_mig_instance_failure_stays_on_the_instance(make_reader: Make) -> None:
    bad = FakeMig(uuid="MIG-bad")
    bad.fail["nvmlDeviceGetMemoryInfo"] = NO_PERMISSION
    gpu = FakeGpu(mig=[FakeMig(), bad])
    (d,) = make_reader(FakeNvml([gpu])).read()
    assert d.unavailable is None and d.mig is not None
    assert d.mig[0].unavailable is None
    assert d.mig[1].unavailable == "no permission" and d.mig[1].total_bytes is None


def test_one_process_on_two_mig_slices_is_summed(make_reader: Make) -> None:
    gpu = FakeGpu(
        mig=[FakeMig(), FakeMig()],
        processes=[FakeProcess(5, MiB, gpu_instance_id=1), FakeProcess(5, 2 * MiB, 2)],
    )
    (d,) = make_reader(FakeNvml([gpu])).read()
    assert [(p.pid, p.used_bytes) for p in d.processes] == [(5, 3 * MiB)]


# -- unified-memory GPUs (GB10-class) ----------------------------------------------------------


@pytest.mark.parametrize("how", ["not supported", "zero total"])
def test_gpu_without_own_memory_is_unified(make_reader: Make, system: object, how: str) -> None:
    gpu = FakeGpu(name="NVIDIA GB10", processes=[FakeProcess(1000, 10**9)])
    if how == "zero total":
        gpu.total = gpu.used = 0
    else:
        gpu.fail["nvmlDeviceGetMemoryInfo_v2"] = NOT_SUPPORTED
        gpu.fail["nvmlDeviceGetMemoryInfo"] = NOT_SUPPORTED
    reader = make_reader(FakeNvml([gpu]))
    (raw,) = reader.read()
    assert raw.kind == "unified" and raw.total_bytes is None
    for _ in range(2):  # the second read uses the remembered NotSupported
        devices, _ = read_devices(reader, system, apple=False)  # type: ignore[arg-type]
        gb10, ram = devices
        assert gb10.kind == "unified" and ram.kind == "system"
        assert gb10.total_bytes == ram.total_bytes == 64 * 2**30
        assert gb10.usable_bytes == 48 * 2**30  # three quarters
        assert gb10.free_bytes == ram.free_bytes
        assert gb10.field_errors == ()
        assert gb10.processes[0].used_bytes == 10**9


def test_memory_failing_otherwise_is_not_unified(make_reader: Make) -> None:
    gpu = FakeGpu()
    gpu.fail["nvmlDeviceGetMemoryInfo_v2"] = TIMEOUT
    gpu.fail["nvmlDeviceGetMemoryInfo"] = TIMEOUT
    (d,) = make_reader(FakeNvml([gpu])).read()
    assert d.kind == "gpu" and d.total_bytes is None and d.field_error("memory")


def test_a_figure_that_is_not_a_number_is_dropped_not_fatal(make_reader: Make) -> None:
    """A broken binding or driver handing back inf / NaN must not stop the sample."""
    gpu = FakeGpu(temperature=float("inf"))  # type: ignore[arg-type]
    bad_memory = FakeGpu(name="B", used=float("nan"))  # type: ignore[arg-type]
    a, b = make_reader(FakeNvml([gpu, bad_memory])).read()
    assert a.temperature_c is None and a.total_bytes  # the rest of the device still reads
    assert b.total_bytes is None and "not a byte count" in (b.field_error("memory") or "")
    assert b.temperature_c == 35
