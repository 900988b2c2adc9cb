"""Training processes found without the probe, for unified memory and CPU runs (where NVML has
no per-process figure): Python processes that have PyTorch loaded, with their memory.

What counts as a training process (kept simple, so it stays cheap at one look a second):
1. a Python process: its name or its argv[0] starts with "python", or is a launcher that runs
   Python (torchrun, accelerate, deepspeed, axolotl, llamafactory-cli);
2. with torch loaded: a ``libtorch`` library in its memory maps (Linux: /proc/<pid>/maps, read
   once per process; elsewhere psutil's ``memory_maps``). When the maps cannot be read
   (another user's process), a Python process of at least ``min_rss_bytes`` counts, marked
   ``torch=None`` ("python with large RSS").
Memory: RSS (psutil ``memory_info().rss``), and on request the USS (``memory_full_info``:
slower, and often refused for other users' processes). On Apple silicon the Metal buffers an
MPS run allocates are not all in RSS; the probe's ``driver_allocated_memory()`` is the exact
figure there.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

MiB = 2**20
LAUNCHERS = ("torchrun", "accelerate", "deepspeed", "axolotl", "llamafactory-cli")
ATTRS = ["pid", "name", "cmdline", "memory_info", "create_time"]


@dataclass(frozen=True, slots=True)
class TrainingProcess:
    pid: int
    name: str
    cmdline: str
    rss_bytes: int
    torch: bool | None  # torch's library is mapped; None: the maps could not be read
    uss_bytes: int | None = None  # memory only this process holds (with ``uss=True``)

    @property
    def why(self) -> str:
        return "has torch loaded" if self.torch else "python with large RSS"


def _is_python(name: str, argv: list[str]) -> bool:
    names = [name.lower(), os.path.basename(argv[0]).lower() if argv else ""]
    return any(n.startswith("python") or n in LAUNCHERS for n in names)


def read_proc_maps(pid: int) -> str | None:
    """/proc/<pid>/maps (Linux), or None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


class ProcessFinder:
    """Finds training processes; each process's maps are read once (cached by PID and start
    time, so a reused PID is looked at again). ``psutil_module`` and ``read_maps`` are
    injectable for tests (see ``FakeProcessTable``)."""

    def __init__(
        self,
        psutil_module: Any = None,
        read_maps: Callable[[int], str | None] | None = None,
        *,
        min_rss_bytes: int = 1024 * MiB,
    ) -> None:
        self._ps: Any = psutil_module or importlib.import_module("psutil")
        self._read_maps = read_maps or (read_proc_maps if os.path.isdir("/proc") else None)
        self.min_rss_bytes = min_rss_bytes
        self._torch: dict[tuple[int, float], bool | None] = {}

    def find(
        self, *, limit: int = 8, uss: bool = False, exclude: Iterable[int] = ()
    ) -> list[TrainingProcess]:
        """Training processes, largest RSS first (this process excluded)."""
        skip = {os.getpid(), *exclude}
        found: list[TrainingProcess] = []
        seen: set[tuple[int, float]] = set()
        for proc in self._ps.process_iter(ATTRS, ad_value=None):
            info = proc.info
            pid, argv = info.get("pid"), info.get("cmdline") or []
            mem = info.get("memory_info")
            if pid in skip or mem is None or not _is_python(info.get("name") or "", argv):
                continue
            key = (pid, info.get("create_time") or 0.0)
            seen.add(key)
            if key not in self._torch:
                self._torch[key] = self._has_torch(proc, pid)
            has_torch = self._torch[key]
            rss = int(mem.rss)
            if has_torch is False or (has_torch is None and rss < self.min_rss_bytes):
                continue
            found.append(
                TrainingProcess(
                    pid,
                    info.get("name") or "",
                    " ".join(argv),
                    rss,
                    has_torch,
                    self._uss(proc) if uss else None,
                )
            )
        self._torch = {k: v for k, v in self._torch.items() if k in seen}
        found.sort(key=lambda p: p.rss_bytes, reverse=True)
        return found[:limit]

    def _has_torch(self, proc: Any, pid: int) -> bool | None:
        if self._read_maps is not None:
            text = self._read_maps(pid)
            return None if text is None else "libtorch" in text
        try:
            return any("libtorch" in m.path for m in proc.memory_maps(grouped=True))
        except (self._ps.Error, OSError, NotImplementedError):
            return None

    def _uss(self, proc: Any) -> int | None:
        try:
            return int(proc.memory_full_info().uss)
        except (self._ps.Error, OSError, AttributeError):
            return None


def find_training_processes(**kw: Any) -> list[TrainingProcess]:
    """One look (see ProcessFinder.find); for repeated looks keep a ProcessFinder."""
    return ProcessFinder().find(**kw)


# -- a fake process table for tests and demos ---------------------------------------------
@dataclass
class FakeProc:
    pid: int
    name: str = "python3"
    cmdline: tuple[str, ...] = ("python3", "train.py")
    rss_bytes: int = 4096 * MiB
    maps: str | None = "7f00 r-xp /venv/lib/torch/lib/libtorch_cpu.so\n"  # None: refused
    uss_bytes: int | None = 3072 * MiB
    create_time: float = 1.0


@dataclass
class FakeProcessTable:
    """psutil's ``process_iter`` over ``procs``, and a ``read_maps`` for the finder."""

    procs: list[FakeProc] = field(default_factory=list)

    def __post_init__(self) -> None:
        psutil = importlib.import_module("psutil")
        self.Error = psutil.Error
        self.maps_read: list[int] = []

    def process_iter(self, attrs: list[str], ad_value: Any = None) -> list[Any]:
        return [_FakeHandle(p) for p in self.procs]

    def read_maps(self, pid: int) -> str | None:
        self.maps_read.append(pid)
        return next(p.maps for p in self.procs if p.pid == pid)

    def finder(self, **kw: Any) -> ProcessFinder:
        return ProcessFinder(self, self.read_maps, **kw)


class _FakeHandle:
    def __init__(self, p: FakeProc) -> None:
        self._p = p
        self.info = {
            "pid": p.pid,
            "name": p.name,
            "cmdline": list(p.cmdline),
            "memory_info": _Mem(p.rss_bytes, None),
            "create_time": p.create_time,
        }

    def memory_full_info(self) -> Any:
        if self._p.uss_bytes is None:
            raise importlib.import_module("psutil").AccessDenied(self._p.pid)
        return _Mem(self._p.rss_bytes, self._p.uss_bytes)


@dataclass(frozen=True)
class _Mem:
    rss: int
    uss: int | None
