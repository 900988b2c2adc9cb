"""Every use of NVML goes through here, via the `pynvml` module of NVIDIA's nvidia-ml-py.

Robustness rules:
- NVML is initialised once, lazily, on the first status() or read(); nvmlShutdown runs at exit.
- Any NVML failure becomes "not available" with a short reason, for that field or device only.
- A field a device does not support (or that we may not read) is not asked for again.
- A lost GPU is shown as unavailable from then on; the other GPUs keep reporting.

The module is injectable (``NvmlReader(module=fake)``) so every failure can be tested without
a GPU; see ``trainmem.devices.fakes``.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import importlib.metadata
import importlib.util
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from trainmem.devices.snapshot import DeviceReading, MigReading, NvmlStatus, ProcessReading

# NVML return codes. They are part of the C ABI, so they never change between versions.
NOT_SUPPORTED = 3
NO_PERMISSION = 4
NOT_FOUND = 6
DRIVER_NOT_LOADED = 9
LIBRARY_NOT_FOUND = 12
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15
RESET_REQUIRED = 16
LIB_RM_VERSION_MISMATCH = 18
ARGUMENT_VERSION_MISMATCH = 25

Category = Literal["permanent", "lost", "transient"]

_REASONS: dict[int, tuple[str, Category]] = {
    NOT_SUPPORTED: ("not supported", "permanent"),
    NO_PERMISSION: ("no permission", "permanent"),
    FUNCTION_NOT_FOUND: ("not in this driver's NVML", "permanent"),
    ARGUMENT_VERSION_MISMATCH: ("not in this driver's NVML", "permanent"),
    GPU_IS_LOST: ("GPU is lost (fell off the bus; needs a reset or reboot)", "lost"),
    RESET_REQUIRED: ("GPU needs a reset", "lost"),
    LIB_RM_VERSION_MISMATCH: ("driver/NVML version mismatch", "lost"),
}

_INIT_REASONS: dict[int, str] = {
    LIBRARY_NOT_FOUND: "NVML library not found (no NVIDIA driver installed)",
    DRIVER_NOT_LOADED: "NVIDIA driver not loaded",
    LIB_RM_VERSION_MISMATCH: (
        "NVIDIA driver and NVML library versions differ (usually after a driver update; reboot)"
    ),
    NO_PERMISSION: "no permission to use NVML",
}

_MIG_ENABLED = 1
_NOT_AVAILABLE_ID = 0xFFFFFFFF  # NVML's "no value" for instance ids
# Newest first: _v3 reports MIG instance ids; older drivers only have _v2 or the plain call.
_PROCESS_FUNCTIONS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)


def _text(value: Any) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


@dataclass
class _Gpu:
    """What does not change about a GPU, read once."""

    index: int
    handle: Any
    name: str
    uuid: str | None
    lost: str | None = None  # sticky: a lost GPU does not come back without a reset


def _whole(value: Any) -> int | None:
    """An NVML figure as an int; None for what a broken binding or driver hands back
    instead of a count (inf, NaN, not a number), so one bad field never stops a sample."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        return None


def _counts(q: _Query, *values: Any) -> tuple[int | None, ...]:
    """Memory figures as ints, the field marked as an error if one is not a count."""
    out = tuple(_whole(v) for v in values)
    if None in out:
        q.errors["memory"] = "NVML returned a value that is not a byte count"
    return out


@dataclass
class _Query:
    """Calls for one device in one sample. Failures become reasons, kept per field."""

    reader: NvmlReader
    index: int
    errors: dict[str, str] = field(default_factory=dict)
    codes: dict[str, int] = field(default_factory=dict)
    lost: str | None = None

    def get(self, name: str, fn: Callable[..., Any], *args: Any, quiet: bool = False) -> Any:
        if self.lost is not None or self.known(name, quiet=quiet):
            return None
        try:
            return fn(*args)
        except self.reader._errors as err:
            self.fail(name, err, quiet=quiet)
            return None

    def known(self, name: str, *, quiet: bool = False) -> bool:
        """True (and the reason recorded) if this field failed for good on an earlier call."""
        known = self.reader._unsupported.get((self.index, name))
        if known is not None and not quiet:
            self.errors[name], self.codes[name] = known
        return known is not None

    def fail(self, name: str, err: BaseException, *, quiet: bool = False) -> None:
        code, reason, category = self.reader.classify(err)
        if category == "permanent":
            self.reader._unsupported[(self.index, name)] = (reason, code)
        elif category == "lost":
            self.lost = reason
        if not quiet:
            self.errors[name], self.codes[name] = reason, code


def _library_loads() -> bool:
    """Whether the driver's NVML library loads, tried as pynvml's _LoadNvmlLibrary does
    (nvidia-ml-py 13.615 pynvml.py: ``CDLL("libnvidia-ml.so.1")`` off Windows). A machine
    without the driver (a laptop, a Mac, a CPU box) then never imports pynvml, whose module
    alone holds ~2.4 MiB of a dashboard's memory. On Windows pynvml searches two folders
    for nvml.dll: that search is left to it."""
    if sys.platform.startswith("win"):
        return True
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


class NvmlReader:
    """Reads every NVIDIA GPU. Thread-safe; meant to be called by one sampler thread."""

    def __init__(self, module: Any = None, *, register_atexit: bool = True) -> None:
        self._module = module
        self._register_atexit = register_atexit
        self._lock = threading.RLock()
        self._status: NvmlStatus | None = None
        self._initialised = False
        self._nv: Any = None
        self._gpus: list[_Gpu] = []
        self._unsupported: dict[tuple[int, str], tuple[str, int]] = {}
        self._errors: tuple[type[BaseException], ...] = ()
        self._process_functions = list(_PROCESS_FUNCTIONS)

    # -- lifecycle ---------------------------------------------------------------------------

    def status(self) -> NvmlStatus:
        """Initialises NVML on first use; afterwards returns at once, without the lock, so a
        UI thread asking never waits behind a slow sample."""
        status = self._status
        if status is not None:
            return status
        with self._lock:
            if self._status is None:
                self._status = self._init()
            return self._status

    def close(self) -> None:
        """Shut NVML down (also registered with atexit). Safe to call twice."""
        with self._lock:
            if self._initialised:
                self._initialised = False
                with contextlib.suppress(Exception):  # exiting: nothing useful to do with it
                    self._nv.nvmlShutdown()
                atexit.unregister(self.close)

    def _init(self) -> NvmlStatus:
        nv = self._module
        binding: str | None = "injected module" if nv is not None else None
        if nv is None:
            if importlib.util.find_spec("pynvml") is None:
                return NvmlStatus(False, "pynvml missing (pip install nvidia-ml-py)")
            binding = binding_name()
            if not _library_loads():  # what nvmlInit would say, without pynvml's 2.4 MiB
                return NvmlStatus(False, _INIT_REASONS[LIBRARY_NOT_FOUND], binding=binding)
            try:
                nv = importlib.import_module("pynvml")
            except ImportError:
                return NvmlStatus(False, "pynvml missing (pip install nvidia-ml-py)")
        self._nv = nv
        mismatch = getattr(nv, "NVMLLibraryMismatchError", None)
        self._errors = (nv.NVMLError, OSError, ctypes.ArgumentError) + (
            (mismatch,) if isinstance(mismatch, type) else ()
        )
        try:
            nv.nvmlInit()
        except Exception as err:  # any failure here means "no NVML", never a crash
            return NvmlStatus(False, self._init_reason(err), binding=binding)
        self._initialised = True
        if self._register_atexit:
            atexit.register(self.close)
        driver = self._version(nv.nvmlSystemGetDriverVersion)
        version = self._version(nv.nvmlSystemGetNVMLVersion)
        try:
            count = int(nv.nvmlDeviceGetCount())
        except self._errors as err:
            why = f"cannot count GPUs: {self.classify(err)[1]}"
            return NvmlStatus(False, why, driver, version, binding)
        self._gpus = [self._open(i) for i in range(count)]
        reason = None if count else "NVML found no NVIDIA GPUs"
        return NvmlStatus(True, reason, driver, version, binding)

    def _init_reason(self, err: BaseException) -> str:
        code = getattr(err, "value", None)
        if isinstance(code, int) and code in _INIT_REASONS:
            return _INIT_REASONS[code]
        return f"NVML failed to start: {err or type(err).__name__}"

    def _version(self, fn: Callable[[], Any]) -> str | None:
        try:
            return _text(fn())
        except self._errors:
            return None

    def _open(self, index: int) -> _Gpu:
        nv = self._nv
        q = _Query(self, index)
        handle = q.get("handle", nv.nvmlDeviceGetHandleByIndex, index)
        if handle is None:
            reason = q.lost or q.errors.get("handle", "unavailable")
            return _Gpu(index, None, f"GPU {index}", None, lost=f"cannot open GPU: {reason}")
        name = q.get("name", nv.nvmlDeviceGetName, handle)
        uuid = q.get("uuid", nv.nvmlDeviceGetUUID, handle)
        gpu = _Gpu(index, handle, _text(name) if name else f"GPU {index}", uuid and _text(uuid))
        gpu.lost = q.lost
        return gpu

    # -- errors ------------------------------------------------------------------------------

    def classify(self, err: BaseException) -> tuple[int, str, Category]:
        """(code, short reason, whether to ask again) for any error an NVML call raised."""
        code = getattr(err, "value", None)
        if not isinstance(code, int):  # NVMLLibraryMismatchError, OSError, ctypes errors
            mismatch = getattr(self._nv, "NVMLLibraryMismatchError", None)
            if isinstance(mismatch, type) and isinstance(err, mismatch):
                return FUNCTION_NOT_FOUND, "not in this driver's NVML", "permanent"
            return -1, f"{type(err).__name__}: {err}", "transient"
        if code in _REASONS:
            reason, category = _REASONS[code]
            return code, reason, category
        return code, str(err) or f"NVML error {code}", "transient"

    # -- reading -----------------------------------------------------------------------------

    def read(self) -> list[DeviceReading]:
        """One reading per GPU. GPUs with no memory of their own come back with kind "unified"
        and no memory figures; ``unified.as_unified`` fills those in from system RAM."""
        with self._lock:
            if not self.status().available or not self._initialised:
                return []
            return [self._read_gpu(gpu) for gpu in self._gpus]

    def _read_gpu(self, gpu: _Gpu) -> DeviceReading:
        if gpu.lost is not None:
            return self._unavailable(gpu, gpu.lost)
        nv, h = self._nv, gpu.handle
        q = _Query(self, gpu.index)
        memory = self._memory(q, h)
        util = q.get("utilization", nv.nvmlDeviceGetUtilizationRates, h)
        temp = q.get("temperature", nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        power_mw = q.get("power", nv.nvmlDeviceGetPowerUsage, h)
        mig = self._mig(q, h)
        processes = self._processes(q, h)
        if q.lost is not None:
            gpu.lost = q.lost
            return self._unavailable(gpu, q.lost)
        unified = (memory is None and q.codes.get("memory") == NOT_SUPPORTED) or (
            memory is not None and memory[0] == 0
        )
        total, used, free, reserved = memory or (None, None, None, None)
        return DeviceReading(
            id=f"gpu{gpu.index}",
            kind="unified" if unified else "gpu",
            name=gpu.name,
            total_bytes=None if unified else total,
            used_bytes=None if unified else used,
            free_bytes=None if unified else free,
            usable_bytes=None if unified else total,
            processes=processes,
            index=gpu.index,
            uuid=gpu.uuid,
            reserved_bytes=reserved,
            utilization_pct=None if util is None else _whole(util.gpu),
            memory_utilization_pct=None if util is None else _whole(util.memory),
            temperature_c=_whole(temp),
            power_w=None if _whole(power_mw) is None else power_mw / 1000.0,
            mig=mig,
            field_errors=tuple(q.errors.items()),
        )

    @staticmethod
    def _unavailable(gpu: _Gpu, reason: str) -> DeviceReading:
        return DeviceReading(
            id=f"gpu{gpu.index}",
            kind="gpu",
            name=gpu.name,
            total_bytes=None,
            used_bytes=None,
            free_bytes=None,
            usable_bytes=None,
            unavailable=reason,
            index=gpu.index,
            uuid=gpu.uuid,
        )

    def _memory(self, q: _Query, h: Any) -> tuple[int, int, int, int | None] | None:
        """(total, used, free, reserved). The v2 API counts driver-reserved memory apart from
        used; we add it back so that used + free = total, as the v1 API reports it."""
        nv = self._nv
        v2 = getattr(nv, "nvmlMemory_v2", None)
        if v2 is not None:
            m = q.get("memory_v2", nv.nvmlDeviceGetMemoryInfo, h, v2, quiet=True)
            if m is not None:
                total, used, free, reserved = _counts(q, m.total, m.used, m.free, m.reserved)
                if total is None or used is None or free is None or reserved is None:
                    return None
                return total, used + reserved, free, reserved
        m = q.get("memory", nv.nvmlDeviceGetMemoryInfo, h)
        if m is None:
            return None
        total, used, free = _counts(q, m.total, m.used, m.free)
        if total is None or used is None or free is None:
            return None
        return total, used, free, None

    def _mig(self, q: _Query, h: Any) -> tuple[MigReading, ...] | None:
        nv = self._nv
        mode = q.get("mig_mode", nv.nvmlDeviceGetMigMode, h, quiet=True)
        if not mode or mode[0] != _MIG_ENABLED:
            return None
        count = q.get("mig_count", nv.nvmlDeviceGetMaxMigDeviceCount, h) or 0
        instances: list[MigReading] = []
        for j in range(int(count)):
            # Empty slots answer NotFound; they are listed each sample because MIG layouts
            # can be changed while we run.
            try:
                mh = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except self._errors as err:
                if self.classify(err)[2] == "lost":
                    q.fail("mig", err)
                    return None
                continue
            instances.append(self._mig_instance(q, j, mh))
        return tuple(instances)

    def _mig_instance(self, q: _Query, j: int, mh: Any) -> MigReading:
        nv = self._nv
        sub = _Query(self, q.index)  # MIG failures stay on the instance, not the parent
        m = sub.get(f"mig{j}_memory", nv.nvmlDeviceGetMemoryInfo, mh)
        uuid = sub.get(f"mig{j}_uuid", nv.nvmlDeviceGetUUID, mh, quiet=True)
        name = sub.get(f"mig{j}_name", nv.nvmlDeviceGetName, mh, quiet=True)
        q.lost = q.lost or sub.lost
        return MigReading(
            index=j,
            uuid=uuid and _text(uuid),
            name=name and _text(name),
            total_bytes=None if m is None else int(m.total),
            used_bytes=None if m is None else int(m.used),
            free_bytes=None if m is None else int(m.free),
            unavailable=next(iter(sub.errors.values()), None),
        )

    def _processes(self, q: _Query, h: Any) -> tuple[ProcessReading, ...]:
        if q.lost is not None or q.known("processes"):
            return ()
        while self._process_functions:
            fn = getattr(self._nv, self._process_functions[0], None)
            if fn is not None:
                try:
                    raw = fn(h)
                    break
                except self._errors as err:
                    if self.classify(err)[0] != FUNCTION_NOT_FOUND:
                        q.fail("processes", err)
                        return ()
            # This binding or driver lacks this version of the call: use an older one from now
            # on, for every GPU.
            self._process_functions.pop(0)
        else:
            q.errors["processes"] = "not in this driver's NVML"
            return ()
        by_pid: dict[int, ProcessReading] = {}
        for p in raw:
            pid = int(p.pid)
            used = p.usedGpuMemory
            gi = getattr(p, "gpuInstanceId", None)
            prev = by_pid.get(pid)
            if prev is not None and prev.used_bytes is not None and used is not None:
                used = prev.used_bytes + int(used)  # one process, several MIG slices
            by_pid[pid] = ProcessReading(
                pid=pid,
                used_bytes=None if used is None else int(used),
                gpu_instance_id=None if gi in (None, _NOT_AVAILABLE_ID) else int(gi),
            )
        return tuple(by_pid.values())


def binding_name() -> str:
    """Which distribution provides `pynvml`. Only NVIDIA's nvidia-ml-py is supported: the old
    third-party `pynvml` (before 12.0) shipped its own copy of the module, missing the v2 memory
    and v3 process calls. Newer `pynvml` releases just depend on nvidia-ml-py. Each candidate's
    RECORD is read for the module: importlib.metadata.packages_distributions() would read
    every installed distribution's (0.16 s and 5 MiB in a venv with torch)."""
    for name in ("nvidia-ml-py", "pynvml"):
        try:
            dist = importlib.metadata.distribution(name)
            files = dist.files or []
        except importlib.metadata.PackageNotFoundError:
            continue
        except Exception:  # metadata is a nicety
            break
        if any(f.name == "pynvml.py" and len(f.parts) == 1 for f in files):
            if name == "nvidia-ml-py":
                return f"nvidia-ml-py {dist.version}"
            return f"{name} {dist.version} (not NVIDIA's nvidia-ml-py; install nvidia-ml-py)"
    return "unknown pynvml"


_default: NvmlReader | None = None
_default_lock = threading.Lock()


def default_reader() -> NvmlReader:
    """The process-wide reader, so NVML is initialised once however many users it has."""
    global _default
    with _default_lock:
        if _default is None:
            _default = NvmlReader()
        return _default
