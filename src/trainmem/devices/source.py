"""Where device readings come from: a ``DeviceSource`` is anything with a name and a read().

NVML (local NVIDIA GPUs), system RAM and Apple unified memory implement it here; a remote node
read from Prometheus can later. The Sampler reads each source on its own thread, so a source
that hangs or raises holds back or breaks only its own readings.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from trainmem.devices.nvml import NvmlReader
from trainmem.devices.snapshot import DeviceKind, DeviceReading, NvmlStatus, ProcessReading
from trainmem.devices.system import SYSTEM_ID, SystemReader
from trainmem.devices.unified import UNIFIED_ID, apple_device, as_unified, working_set_bytes


class SourceUnavailable(Exception):
    """Raised by a source's read() for an outage it has explained (a server down, a refused
    login): the sampler shows the message as the reason, with no traceback in the log."""


@runtime_checkable
class DeviceSource(Protocol):
    """One thing that reports devices.

    ``name`` is unique within a sampler; it is also the device id shown (with ``kind``) while
    the source has not answered yet. ``read()`` may block for long and may raise: the sampler
    turns that into readings marked stale, or unavailable with the reason.
    """

    name: str
    kind: DeviceKind

    def read(self) -> tuple[DeviceReading, ...]: ...


class NvmlSource:
    """Local NVIDIA GPUs, each GPU process joined with what the OS says about it.

    GPUs with no memory of their own (GB10-class) come back as kind "unified" without memory
    figures; ``merge`` fills them in from the system RAM reading.
    """

    kind: DeviceKind = "gpu"

    def __init__(self, nvml: NvmlReader, system: SystemReader, name: str = "nvml") -> None:
        self.name = name
        self.nvml = nvml
        self.system = system
        # Kept from the last read, so that a sampler can report it without calling into NVML
        # (whose first status() may block in nvmlInit).
        self.last_status: NvmlStatus | None = None

    def read(self) -> tuple[DeviceReading, ...]:
        self.last_status = self.nvml.status()
        devices: list[DeviceReading] = []
        seen: set[int] = set()
        for gpu in self.nvml.read():
            if gpu.processes:
                procs = []
                for p in gpu.processes:
                    seen.add(p.pid)
                    info = self.system.process(p.pid)
                    procs.append(
                        ProcessReading(
                            pid=p.pid,
                            used_bytes=p.used_bytes,
                            name=info.name,
                            user=info.user,
                            cmdline=info.cmdline,
                            unavailable=info.unavailable,
                            gpu_instance_id=p.gpu_instance_id,
                        )
                    )
                gpu = dataclasses.replace(gpu, processes=tuple(procs))
            devices.append(gpu)
        self.system.forget_except(seen)
        return tuple(devices)


class SystemSource:
    """System RAM and swap."""

    name: str = SYSTEM_ID
    kind: DeviceKind = "system"

    def __init__(self, system: SystemReader) -> None:
        self.system = system

    def read(self) -> tuple[DeviceReading, ...]:
        return (self.system.read(),)


class AppleSource:
    """The unified memory pool of Apple silicon (from system RAM), with macOS's GPU working
    set read once, at the first sample: it changes only with a sysctl, and the sampler runs
    every second (a missing MLX would be searched for on every one)."""

    name: str = UNIFIED_ID
    kind: DeviceKind = "unified"

    def __init__(self, system: SystemReader) -> None:
        self.system = system
        self._wired: tuple[int | None] | None = None  # (bytes or None) once read

    def read(self) -> tuple[DeviceReading, ...]:
        ram = self.system.read()
        if self._wired is None:
            self._wired = (working_set_bytes(ram.total_bytes),)
        return (apple_device(ram, wired_limit_bytes=self._wired[0]),)


def merge(
    groups: Sequence[tuple[DeviceSource, tuple[DeviceReading, ...]]],
) -> tuple[DeviceReading, ...]:
    """The readings of each source, in source order, NVML's unified GPUs filled in from the
    system RAM reading (whatever state that is in: stale or unavailable carries over)."""
    ram = next((rs[0] for s, rs in groups if isinstance(s, SystemSource) and rs), None)
    out: list[DeviceReading] = []
    for source, readings in groups:
        if isinstance(source, NvmlSource) and ram is not None:
            readings = tuple(as_unified(d, ram) if d.kind == "unified" else d for d in readings)
        out.extend(readings)
    return tuple(out)
