"""Test doubles at the pynvml and psutil boundaries, for tests, the bench and UI snapshots.

``FakeNvml`` behaves like the `pynvml` module for the calls ``NvmlReader`` makes, and raises
the real ``pynvml.NVMLError`` subclasses (importing pynvml needs no driver), so the reader's
error handling is exercised exactly as on a real machine. Every call is counted in ``calls``.

    nvml = NvmlReader(module=FakeNvml([FakeGpu(name="NVIDIA H100 80GB HBM3")]))
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

MiB = 2**20


@dataclass
class FakeProcess:
    pid: int
    used_bytes: int | None
    gpu_instance_id: int | None = None


@dataclass
class FakeMig:
    name: str = "NVIDIA H100 80GB HBM3 MIG 1g.10gb"
    uuid: str = "MIG-00000000-0000-0000-0000-000000000000"
    total: int = 9984 * MiB
    used: int = 0
    fail: dict[str, int] = field(default_factory=dict)
    lost: bool = False


@dataclass
class FakeGpu:
    """One GPU. ``fail`` maps an NVML function name to the error code it raises; ``lost``
    makes every call raise GpuIsLost (set it mid-test to lose the GPU mid-run)."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    total: int = 81559 * MiB  # what NVML reports for an H100 80GB
    used: int = 0
    reserved: int = 0
    utilization: tuple[int, int] = (0, 0)
    temperature: int = 35
    power_mw: int = 70_000
    processes: list[FakeProcess] = field(default_factory=list)
    mig: list[FakeMig | None] | None = None  # slots; None = empty slot. None: MIG off
    fail: dict[str, int] = field(default_factory=dict)
    lost: bool = False


class FakeNvml:
    """A stand-in for the `pynvml` module.

    ``init_error``: the NVML error code nvmlInit raises (12 library missing, 9 driver not
    loaded, 18 driver/library mismatch). ``process_api``: the newest compute-processes call the
    "driver" has ("v3", "v2" or "v1"). ``missing``: optional attributes this "binding" lacks;
    they are set to None, which the reader treats as absent.
    """

    NVML_TEMPERATURE_GPU = 0

    def __init__(
        self,
        gpus: Iterable[FakeGpu] = (),
        *,
        init_error: int | None = None,
        count_error: int | None = None,
        driver_version: str = "550.54.15",
        nvml_version: str = "12.550.54.15",
        process_api: str = "v3",
        missing: Iterable[str] = (),
    ) -> None:
        pynvml = importlib.import_module("pynvml")
        self.NVMLError: type[Exception] = pynvml.NVMLError
        self.NVMLLibraryMismatchError: type[Exception] = pynvml.NVMLLibraryMismatchError
        self.nvmlMemory_v2: int = pynvml.nvmlMemory_v2
        self.gpus = list(gpus)
        self.init_error = init_error
        self.count_error = count_error
        self.driver_version = driver_version
        self.nvml_version = nvml_version
        self.process_api = process_api
        self.calls: Counter[str] = Counter()
        for name in missing:  # looked up with getattr(module, name, None) by the reader
            setattr(self, name, None)
        self.initialised = 0

    def _raise(self, code: int) -> None:
        raise self.NVMLError(code)

    def _call(self, fn: str, handle: Any = None) -> None:
        self.calls[fn] += 1
        if not self.initialised:
            self._raise(1)  # NVML_ERROR_UNINITIALIZED
        if handle is not None:
            if handle.lost:
                self._raise(15)  # NVML_ERROR_GPU_IS_LOST
            if fn in handle.fail:
                self._raise(handle.fail[fn])

    # -- system ------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            self._raise(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._call("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._call("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetNVMLVersion(self) -> str:
        self._call("nvmlSystemGetNVMLVersion")
        return self.nvml_version

    def nvmlDeviceGetCount(self) -> int:
        self._call("nvmlDeviceGetCount")
        if self.count_error is not None:
            self._raise(self.count_error)
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        gpu = self.gpus[index]
        self._call("nvmlDeviceGetHandleByIndex", gpu)
        return gpu

    # -- per device --------------------------------------------------------------------------

    def nvmlDeviceGetName(self, h: FakeGpu | FakeMig) -> str:
        self._call("nvmlDeviceGetName", h)
        return h.name

    def nvmlDeviceGetUUID(self, h: FakeGpu | FakeMig) -> str:
        self._call("nvmlDeviceGetUUID", h)
        return h.uuid

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu | FakeMig, version: int | None = None) -> Any:
        if version:
            self._call("nvmlDeviceGetMemoryInfo_v2", h)
        else:
            self._call("nvmlDeviceGetMemoryInfo", h)
        reserved = h.reserved if isinstance(h, FakeGpu) else 0
        free = h.total - h.used - reserved
        if version:
            return SimpleNamespace(
                version=version, total=h.total, reserved=reserved, used=h.used, free=free
            )
        return SimpleNamespace(total=h.total, used=h.used + reserved, free=free)

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:
        self._call("nvmlDeviceGetUtilizationRates", h)
        return SimpleNamespace(gpu=h.utilization[0], memory=h.utilization[1])

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        self._call("nvmlDeviceGetTemperature", h)
        return h.temperature

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        self._call("nvmlDeviceGetPowerUsage", h)
        return h.power_mw

    def nvmlDeviceGetMigMode(self, h: FakeGpu) -> list[int]:
        self._call("nvmlDeviceGetMigMode", h)
        if h.mig is None:
            self._raise(3)  # consumer GPUs: NVML_ERROR_NOT_SUPPORTED
        return [1, 1]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeGpu) -> int:
        self._call("nvmlDeviceGetMaxMigDeviceCount", h)
        return len(h.mig or [])

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeGpu, index: int) -> FakeMig:
        self._call("nvmlDeviceGetMigDeviceHandleByIndex", h)
        mig = (h.mig or [])[index]
        if mig is None:
            self._raise(6)  # NVML_ERROR_NOT_FOUND: an empty slot
        assert mig is not None
        return mig

    def _procs(self, fn: str, h: FakeGpu, newest: int) -> list[Any]:
        self._call(fn, h)
        have = {"v1": 1, "v2": 2, "v3": 3}[self.process_api]
        if newest > have:
            self._raise(13)  # NVML_ERROR_FUNCTION_NOT_FOUND
        return [
            SimpleNamespace(
                pid=p.pid,
                usedGpuMemory=p.used_bytes,
                gpuInstanceId=0xFFFFFFFF if p.gpu_instance_id is None else p.gpu_instance_id,
                computeInstanceId=0xFFFFFFFF,
            )
            for p in h.processes
        ]

    def nvmlDeviceGetComputeRunningProcesses_v3(self, h: FakeGpu) -> list[Any]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v3", h, 3)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, h: FakeGpu) -> list[Any]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v2", h, 2)

    def nvmlDeviceGetComputeRunningProcesses(self, h: FakeGpu) -> list[Any]:
        # As in an older binding, the unversioned call uses the driver's plain symbol. A newer
        # binding turns a missing symbol here into NVMLLibraryMismatchError, as this does.
        try:
            return self._procs("nvmlDeviceGetComputeRunningProcesses", h, 1)
        except self.NVMLError as err:
            if getattr(err, "value", None) == 13:
                raise self.NVMLLibraryMismatchError("unversioned call") from err
            raise


def eight_gpu_machine() -> FakeNvml:
    """An 8x H100 node: GPU 0 in MIG mode (two 3g.40gb slices, rest empty), training processes
    on GPUs 1-7, one process from another container's PID namespace on GPU 7."""
    gpus = []
    for i in range(8):
        gpu = FakeGpu(
            uuid=f"GPU-{i:08d}-0000-0000-0000-000000000000",
            used=(20_000 + 1000 * i) * MiB,
            reserved=512 * MiB,
            utilization=(90 + i, 40),
            temperature=50 + i,
            power_mw=500_000 + 1000 * i,
            processes=[FakeProcess(pid=1000 + i, used_bytes=(19_000 + 1000 * i) * MiB)],
        )
        gpus.append(gpu)
    gpus[0].mig = [
        FakeMig(name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", uuid="MIG-a", total=40192 * MiB),
        FakeMig(name="NVIDIA H100 80GB HBM3 MIG 3g.40gb", uuid="MIG-b", total=40192 * MiB),
        None,
        None,
        None,
        None,
        None,
    ]
    gpus[0].processes = [
        FakeProcess(pid=1000, used_bytes=8000 * MiB, gpu_instance_id=1),
        FakeProcess(pid=2000, used_bytes=4000 * MiB, gpu_instance_id=2),
    ]
    gpus[7].processes.append(FakeProcess(pid=999_999, used_bytes=1024 * MiB))
    return FakeNvml(gpus)


# -- psutil ---------------------------------------------------------------------------------


@dataclass
class FakeProc:
    """A process as psutil would see it; an exception class in a field makes that call raise."""

    name: Any = "python"
    username: Any = "alice"
    cmdline: Any = ("python", "train.py")


class FakePsutil:
    """A stand-in for psutil: RAM, swap and a process table, with psutil's real exceptions."""

    def __init__(
        self,
        total: int = 64 * 2**30,
        available: int = 48 * 2**30,
        swap: tuple[int, int] | None = (8 * 2**30, 2**30),
        processes: dict[int, FakeProc] | None = None,
    ) -> None:
        psutil = importlib.import_module("psutil")
        self.Error = psutil.Error
        self.NoSuchProcess = psutil.NoSuchProcess
        self.ZombieProcess = psutil.ZombieProcess
        self.AccessDenied = psutil.AccessDenied
        self.total, self.available, self.swap = total, available, swap
        self.processes = processes or {}
        self.calls: Counter[str] = Counter()

    def virtual_memory(self) -> Any:
        self.calls["virtual_memory"] += 1
        return SimpleNamespace(total=self.total, available=self.available)

    def swap_memory(self) -> Any:
        self.calls["swap_memory"] += 1
        if self.swap is None:
            raise RuntimeError("no swap accounting")
        return SimpleNamespace(total=self.swap[0], used=self.swap[1])

    def Process(self, pid: int) -> Any:  # psutil's name
        self.calls["Process"] += 1
        proc = self.processes.get(pid)
        if proc is None:
            raise self.NoSuchProcess(pid)
        return _FakeProcHandle(self, pid, proc)


class _FakeProcHandle:
    def __init__(self, ps: FakePsutil, pid: int, proc: FakeProc) -> None:
        self._ps, self._pid, self._proc = ps, pid, proc

    def _get(self, attr: str) -> Any:
        self._ps.calls[attr] += 1
        value = getattr(self._proc, attr)
        if isinstance(value, type) and issubclass(value, BaseException):
            raise value(self._pid)
        return value

    def name(self) -> Any:
        return self._get("name")

    def username(self) -> Any:
        return self._get("username")

    def cmdline(self) -> Any:
        return list(self._get("cmdline"))
