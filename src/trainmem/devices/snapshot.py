"""What one sample of the machine's memory looks like: frozen values, safe to pass between threads.

``Snapshot.to_json()`` is the stable contract of ``trainmem-tui devices --json``: the keys
``id, kind, name, total_bytes, used_bytes, free_bytes, usable_bytes, processes, unavailable`` per
device and ``available, reason, driver_version`` for NVML never change meaning; the other keys
are extras a script may use but should not require.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

DeviceKind = Literal["gpu", "system", "unified"]
Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class ProcessReading:
    """A process holding GPU memory, joined with what the OS says about it.

    ``name``/``user``/``cmdline`` are None when the OS would not tell (another user's process,
    or a PID from the host's namespace that this container cannot see); ``unavailable`` says why.
    """

    pid: int
    used_bytes: int | None
    name: str | None = None
    user: str | None = None
    cmdline: str | None = None
    unavailable: str | None = None
    gpu_instance_id: int | None = None  # the MIG instance the process runs in, if any
    peak_used_bytes: int | None = None  # filled in by the Sampler

    def to_json(self) -> Json:
        return {
            "pid": self.pid,
            "name": self.name,
            "user": self.user,
            "cmdline": self.cmdline,
            "used_bytes": self.used_bytes,
            "peak_used_bytes": self.peak_used_bytes,
            "gpu_instance_id": self.gpu_instance_id,
            "unavailable": self.unavailable,
        }


@dataclass(frozen=True, slots=True)
class MigReading:
    """One MIG instance of a GPU in MIG mode: a slice with its own memory."""

    index: int
    uuid: str | None
    name: str | None
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    unavailable: str | None = None

    def to_json(self) -> Json:
        return {
            "index": self.index,
            "uuid": self.uuid,
            "name": self.name,
            "total_bytes": self.total_bytes,
            "used_bytes": self.used_bytes,
            "free_bytes": self.free_bytes,
            "unavailable": self.unavailable,
        }


@dataclass(frozen=True, slots=True)
class DeviceReading:
    """One device at one instant. Memory fields are None when not available.

    ``usable_bytes`` is what a training run may plan against: the total for a GPU and for
    system RAM, three quarters of the total for unified memory.
    ``field_errors`` lists (field, reason) for readings this device could not give, e.g.
    ``("power", "not supported")``; ``unavailable`` is set when the whole device is.
    ``stale_s`` is set when the device's source has not answered for that many seconds (more
    than a couple of sampling intervals): the other figures are its last answer.
    """

    id: str
    kind: DeviceKind
    name: str
    total_bytes: int | None
    used_bytes: int | None
    free_bytes: int | None
    usable_bytes: int | None
    processes: tuple[ProcessReading, ...] = ()
    unavailable: str | None = None
    index: int | None = None
    uuid: str | None = None
    reserved_bytes: int | None = None
    utilization_pct: int | None = None
    memory_utilization_pct: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    mig: tuple[MigReading, ...] | None = None  # None: not in MIG mode (or unknown)
    swap_total_bytes: int | None = None
    swap_used_bytes: int | None = None
    field_errors: tuple[tuple[str, str], ...] = ()
    # Unified memory on a Mac: the GPU working set macOS lets Metal wire (None: not read).
    wired_limit_bytes: int | None = None
    peak_used_bytes: int | None = None  # filled in by the Sampler
    stale_s: float | None = None  # filled in by the Sampler

    def field_error(self, name: str) -> str | None:
        """The reason a field is not available, or None."""
        return next((reason for f, reason in self.field_errors if f == name), None)

    def to_json(self) -> Json:
        return {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "total_bytes": self.total_bytes,
            "used_bytes": self.used_bytes,
            "free_bytes": self.free_bytes,
            "usable_bytes": self.usable_bytes,
            "processes": [p.to_json() for p in self.processes],
            "unavailable": self.unavailable,
            "index": self.index,
            "uuid": self.uuid,
            "reserved_bytes": self.reserved_bytes,
            "peak_used_bytes": self.peak_used_bytes,
            "utilization_pct": self.utilization_pct,
            "memory_utilization_pct": self.memory_utilization_pct,
            "temperature_c": self.temperature_c,
            "power_w": self.power_w,
            "mig": None if self.mig is None else [m.to_json() for m in self.mig],
            "swap_total_bytes": self.swap_total_bytes,
            "swap_used_bytes": self.swap_used_bytes,
            "wired_limit_bytes": self.wired_limit_bytes,
            "unavailable_fields": dict(self.field_errors),
            "stale_s": self.stale_s,
        }


@dataclass(frozen=True, slots=True)
class NvmlStatus:
    """Whether NVML could be used, and if not, a short reason a person can act on."""

    available: bool
    reason: str | None = None
    driver_version: str | None = None
    nvml_version: str | None = None
    binding: str | None = None  # the distribution that provides `pynvml`, e.g. nvidia-ml-py 13.x

    def to_json(self) -> Json:
        return {
            "available": self.available,
            "reason": self.reason,
            "driver_version": self.driver_version,
            "nvml_version": self.nvml_version,
            "binding": self.binding,
        }


@dataclass(frozen=True, slots=True)
class Snapshot:
    """All devices read together at ``timestamp`` (seconds since the epoch)."""

    timestamp: float
    devices: tuple[DeviceReading, ...]
    nvml: NvmlStatus
    seq: int = 0  # 1, 2, 3... per Sampler; 0 for a one-off read
    sample_cpu_s: float | None = None  # CPU time the sample cost, for the curious

    def device(self, device_id: str) -> DeviceReading | None:
        return next((d for d in self.devices if d.id == device_id), None)

    def to_json(self) -> Json:
        return {
            "timestamp": self.timestamp,
            "seq": self.seq,
            "devices": [d.to_json() for d in self.devices],
            "nvml": self.nvml.to_json(),
        }


def without_figures(d: DeviceReading, reason: str) -> DeviceReading:
    """The device, same id and name, with no figures and the reason."""
    return DeviceReading(
        id=d.id,
        kind=d.kind,
        name=d.name,
        total_bytes=None,
        used_bytes=None,
        free_bytes=None,
        usable_bytes=None,
        unavailable=reason,
        index=d.index,
        uuid=d.uuid,
    )
