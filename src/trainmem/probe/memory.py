"""The device memory one training process uses, read the cheapest way each device allows.

- CUDA (torch 2.x ``torch.cuda.memory_stats``): allocated and reserved bytes now, and their
  peaks since the last reset (``reset_peak_memory_stats``); the process's memory as the driver
  sees it from NVML (``nvmlDeviceGetComputeRunningProcesses``, this PID's ``usedGpuMemory``),
  so the CUDA context is that minus reserved; free and total from ``torch.cuda.mem_get_info``.
- MPS (torch.mps): ``current_allocated_memory()`` (live tensors) and
  ``driver_allocated_memory()`` (what Metal holds for the process); no peak counters, so peaks
  are the largest of the values read at phase boundaries. Free is the system's available RAM.
- CPU: the process's resident set (psutil); no tensor count exists.

Readers never raise: a figure that cannot be read is None. ``now(full=False)`` skips the
device-wide reads (free memory, NVML's process list: tens of microseconds to milliseconds):
the probe asks for them at most once a second, and leaves them null in between.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from typing import Any

Figures = dict[str, int | None]


def _psutil() -> Any:
    try:  # through importlib, as trainmem.devices does: psutil ships no type information
        return importlib.import_module("psutil")
    except ImportError:  # the probe runs in training environments without our dependencies
        return None


class CpuMemory:
    type = "cpu"
    peaks = "sampled"

    def __init__(self) -> None:
        ps = _psutil()
        self._proc = ps.Process() if ps is not None else None
        self._ps = ps
        self._statm = _open_statm()

    def device(self) -> dict[str, Any]:
        total = self.now().get("total_bytes")
        return {"type": "cpu", "index": None, "name": "CPU", "total_bytes": total}

    def peak(self) -> Figures:
        """Figures for the phase just ended, and the counters reset for the next one."""
        return {"max_allocated_bytes": None, "max_reserved_bytes": None, **self._rss()}

    def _rss(self) -> Figures:
        try:
            if self._statm is not None:  # Linux: one pread, a few microseconds
                return {"driver_bytes": int(os.pread(self._statm, 64, 0).split()[1]) * _PAGE}
            rss = int(self._proc.memory_info().rss) if self._proc is not None else None
            return {"driver_bytes": rss}
        except Exception:
            return {"driver_bytes": None}

    def now(self, full: bool = True) -> Figures:
        out: Figures = {"allocated_bytes": None, "reserved_bytes": None, **self._rss()}
        if not full:
            return {**out, "free_bytes": None, "total_bytes": None}
        try:
            vm = self._ps.virtual_memory() if self._ps else None
        except Exception:
            vm = None
        out["free_bytes"] = int(vm.available) if vm is not None else None
        out["total_bytes"] = int(vm.total) if vm is not None else None
        return out

    def reset(self) -> None:
        pass


class MpsMemory(CpuMemory):
    type = "mps"

    def __init__(self, torch: Any) -> None:
        super().__init__()
        self._mps = torch.mps

    def device(self) -> dict[str, Any]:
        try:
            total = int(self._mps.recommended_max_memory())  # torch >= 2.5
        except Exception:
            total = None
        return {"type": "mps", "index": 0, "name": "Apple MPS", "total_bytes": total}

    def _mps_figures(self) -> Figures:
        try:
            return {
                "allocated_bytes": int(self._mps.current_allocated_memory()),
                "driver_bytes": int(self._mps.driver_allocated_memory()),
            }
        except Exception:
            return {"allocated_bytes": None, "driver_bytes": None}

    def peak(self) -> Figures:
        f = self._mps_figures()
        return {"max_allocated_bytes": f["allocated_bytes"], "max_reserved_bytes": None, **f}

    def now(self, full: bool = True) -> Figures:
        out = super().now(full)
        out.update(self._mps_figures())
        return out


class CudaMemory:
    type = "cuda"
    peaks = "exact"

    def __init__(self, torch: Any, index: int) -> None:
        self._cuda = torch.cuda
        self.index = index
        self._pid = os.getpid()
        self._nvml, self._handle, self.driver_source = _nvml_handle(torch, index)

    def device(self) -> dict[str, Any]:
        try:
            name = str(self._cuda.get_device_name(self.index))
        except Exception:
            name = None
        try:
            _, total = self._cuda.mem_get_info(self.index)
        except Exception:
            total = None
        return {
            "type": "cuda",
            "index": self.index,
            "name": name,
            "total_bytes": int(total) if total is not None else None,
            "driver_source": self.driver_source,
        }

    def peak(self) -> Figures:
        try:
            stats = self._cuda.memory_stats(self.index)
            out: Figures = {
                "max_allocated_bytes": int(stats.get("allocated_bytes.all.peak", 0)),
                "max_reserved_bytes": int(stats.get("reserved_bytes.all.peak", 0)),
            }
        except Exception:
            out = {"max_allocated_bytes": None, "max_reserved_bytes": None}
        self.reset()
        return out

    def reset(self) -> None:
        with contextlib.suppress(Exception):
            self._cuda.reset_peak_memory_stats(self.index)

    def now(self, full: bool = True) -> Figures:
        out: Figures = {}
        try:
            stats = self._cuda.memory_stats(self.index)
            out["allocated_bytes"] = int(stats.get("allocated_bytes.all.current", 0))
            out["reserved_bytes"] = int(stats.get("reserved_bytes.all.current", 0))
        except Exception:
            out["allocated_bytes"] = out["reserved_bytes"] = None
        if not full:
            return {**out, "driver_bytes": None, "free_bytes": None, "total_bytes": None}
        out["driver_bytes"] = self._driver_bytes()
        try:
            free, total = self._cuda.mem_get_info(self.index)
            out["free_bytes"], out["total_bytes"] = int(free), int(total)
        except Exception:
            out["free_bytes"] = out["total_bytes"] = None
        return out

    def _driver_bytes(self) -> int | None:
        if self._handle is None:
            return None
        try:
            for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
                if p.pid == self._pid and isinstance(p.usedGpuMemory, int):
                    return int(p.usedGpuMemory)
        except Exception:
            return None
        return None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _open_statm() -> int | None:
    """/proc/self/statm held open (its second field is the resident pages), or None."""
    try:
        return os.open("/proc/self/statm", os.O_RDONLY)
    except (OSError, AttributeError):
        return None


def _nvml_handle(torch: Any, index: int) -> tuple[Any, Any, str]:
    """NVML's handle for torch's CUDA device ``index``, found by UUID: CUDA_VISIBLE_DEVICES
    renumbers torch's devices, NVML's are the machine's. (None, None, why) when unusable."""
    try:
        pynvml = importlib.import_module("pynvml")
        pynvml.nvmlInit()
        uuid = str(torch.cuda.get_device_properties(index).uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(
            uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"
        )
    except Exception as exc:
        return None, None, f"unavailable: NVML ({type(exc).__name__})"
    return pynvml, handle, "nvml"


def memory_for(device: Any = None) -> CpuMemory | MpsMemory | CudaMemory:
    """The reader for ``device`` (a torch.device, "cuda:1", or None: CUDA when torch has it,
    then MPS, then CPU). torch is imported here, on first use, never at import."""
    try:
        import torch
    except ImportError:
        return CpuMemory()
    text = str(device) if device is not None else ""
    if text.startswith("cuda") or (not text and torch.cuda.is_available()):
        index = int(text.split(":")[1]) if ":" in text else torch.cuda.current_device()
        return CudaMemory(torch, index)
    mps = getattr(torch.backends, "mps", None)
    if text.startswith("mps") or (not text and mps is not None and mps.is_available()):
        return MpsMemory(torch)
    return CpuMemory()
