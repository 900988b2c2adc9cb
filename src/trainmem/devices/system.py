"""System RAM and swap, and who a PID belongs to, through psutil.

Every lookup tolerates being refused: another user's process (AccessDenied), one that exited
(NoSuchProcess), a zombie, or a PID that NVML reports from the host's PID namespace while we
run in a container that cannot see it. Those become a reason, never an exception.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from trainmem.devices.snapshot import DeviceReading

SYSTEM_ID = "system"


@dataclass(frozen=True, slots=True)
class ProcessInfo:
    name: str | None = None
    user: str | None = None
    cmdline: str | None = None
    unavailable: str | None = None


@dataclass(frozen=True, slots=True)
class RamReading:
    total_bytes: int
    available_bytes: int
    swap_total_bytes: int | None
    swap_used_bytes: int | None


class SystemReader:
    """Reads RAM/swap and looks up processes. ``psutil_module`` is injectable for tests."""

    def __init__(self, psutil_module: Any = None) -> None:
        self._ps: Any = psutil_module or importlib.import_module("psutil")
        # PIDs are looked up once while they hold GPU memory, not every sample.
        self._proc_cache: dict[int, ProcessInfo] = {}

    def ram(self) -> RamReading:
        vm = self._ps.virtual_memory()
        swap_total: int | None
        swap_used: int | None
        try:
            sw = self._ps.swap_memory()
            swap_total, swap_used = int(sw.total), int(sw.used)
        except (OSError, RuntimeError, self._ps.Error):
            swap_total = swap_used = None  # some containers expose no swap accounting
        return RamReading(int(vm.total), int(vm.available), swap_total, swap_used)

    def read(self) -> DeviceReading:
        """System RAM as a device. Used is what is not available, so caches count as free;
        usable is the total, since a CPU run can use it all (with the OS's share counted in
        used)."""
        try:
            ram = self.ram()
        except (OSError, RuntimeError, self._ps.Error) as err:
            return DeviceReading(
                id=SYSTEM_ID,
                kind="system",
                name="System RAM",
                total_bytes=None,
                used_bytes=None,
                free_bytes=None,
                usable_bytes=None,
                unavailable=f"cannot read system memory: {err}",
            )
        return DeviceReading(
            id=SYSTEM_ID,
            kind="system",
            name="System RAM",
            total_bytes=ram.total_bytes,
            used_bytes=ram.total_bytes - ram.available_bytes,
            free_bytes=ram.available_bytes,
            usable_bytes=ram.total_bytes,
            swap_total_bytes=ram.swap_total_bytes,
            swap_used_bytes=ram.swap_used_bytes,
        )

    def process(self, pid: int) -> ProcessInfo:
        cached = self._proc_cache.get(pid)
        if cached is None:
            cached = self._proc_cache[pid] = self._lookup(pid)
        return cached

    def forget_except(self, pids: set[int]) -> None:
        """Drop cached lookups for PIDs no longer on any GPU, so a reused PID is looked up anew."""
        for pid in [p for p in self._proc_cache if p not in pids]:
            del self._proc_cache[pid]

    def _lookup(self, pid: int) -> ProcessInfo:
        ps = self._ps
        try:
            proc = ps.Process(pid)
        except ps.NoSuchProcess:
            return ProcessInfo(unavailable=_NOT_VISIBLE)
        except (ps.Error, OSError) as err:
            return ProcessInfo(unavailable=_reason(ps, err))
        values: dict[str, str | None] = {}
        reasons: list[str] = []
        for attr in ("name", "username", "cmdline"):
            try:
                value = getattr(proc, attr)()
            except (ps.Error, OSError) as err:
                if isinstance(err, ps.NoSuchProcess) and not isinstance(err, ps.ZombieProcess):
                    return ProcessInfo(unavailable=_NOT_VISIBLE)
                values[attr] = None
                reasons.append(_reason(ps, err))
                continue
            if attr == "cmdline":
                value = " ".join(value) if value else None
            values[attr] = value or None
        return ProcessInfo(
            name=values["name"],
            user=values["username"],
            cmdline=values["cmdline"],
            unavailable=reasons[0] if reasons else None,
        )


_NOT_VISIBLE = (
    "process not visible here (exited, or in another PID namespace such as a container's)"
)


def _reason(ps: Any, err: BaseException) -> str:
    if isinstance(err, ps.ZombieProcess):
        return "zombie process"
    if isinstance(err, ps.AccessDenied | PermissionError):
        return "no permission to read process details"
    if isinstance(err, ps.NoSuchProcess):
        return _NOT_VISIBLE
    return f"process details unavailable: {type(err).__name__}"
