"""Unified memory: Apple silicon, and NVIDIA GPUs with no memory of their own (GB10-class).

CPU and GPU share one pool of RAM, and the OS, the desktop and the data loader live in it too,
so a run cannot plan on all of it: the guide's rule is that three quarters of the total is
usable. Used and free are the system's, since GPU allocations are ordinary RAM.
"""

from __future__ import annotations

import dataclasses
import platform

from trainmem.devices.snapshot import DeviceReading

UNIFIED_ID = "unified"


def usable_unified(total_bytes: int) -> int:
    """The guide's rule: plan against 3/4 of unified memory (integer bytes, rounded down)."""
    return total_bytes * 3 // 4


def is_apple_silicon(system: str | None = None, machine: str | None = None) -> bool:
    """macOS on arm64. A Python running under Rosetta reports x86_64 and is missed, which only
    costs the unified label (RAM is still listed as system memory)."""
    system = platform.system() if system is None else system
    machine = platform.machine() if machine is None else machine
    return system == "Darwin" and machine == "arm64"


def working_set_bytes(total_bytes: int | None) -> int | None:
    """macOS's GPU working-set limit (Metal's recommendedMaxWorkingSetSize, which follows
    ``sysctl iogpu.wired_limit_mb`` as set when the process starts), read through MLX where
    it is installed
    (``mx.device_info()["max_recommended_working_set_size"]``, MLX 0.32). None without MLX,
    off a Mac's GPU, or outside (0, total]. Imports MLX: call it off the UI thread."""
    try:
        import mlx.core as mx  # optional: the mlx extra

        info = mx.device_info()
    except (ImportError, RuntimeError, AttributeError):
        return None
    value = info.get("max_recommended_working_set_size") if isinstance(info, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        return None
    return value if total_bytes is None or value <= total_bytes else None


def apple_device(
    ram: DeviceReading,
    name: str = "Apple silicon (unified memory)",
    wired_limit_bytes: int | None = None,
) -> DeviceReading:
    """The unified pool of a Mac, from the system RAM reading."""
    return DeviceReading(
        id=UNIFIED_ID,
        kind="unified",
        name=name,
        total_bytes=ram.total_bytes,
        used_bytes=ram.used_bytes,
        free_bytes=ram.free_bytes,
        usable_bytes=None if ram.total_bytes is None else usable_unified(ram.total_bytes),
        unavailable=ram.unavailable,
        wired_limit_bytes=wired_limit_bytes,
    )


def as_unified(gpu: DeviceReading, ram: DeviceReading) -> DeviceReading:
    """A GPU whose NVML memory is NotSupported or 0 bytes takes the system RAM figures."""
    return dataclasses.replace(
        gpu,
        kind="unified",
        total_bytes=ram.total_bytes,
        used_bytes=ram.used_bytes,
        free_bytes=ram.free_bytes,
        usable_bytes=None if ram.total_bytes is None else usable_unified(ram.total_bytes),
        unavailable=gpu.unavailable or ram.unavailable,
        # NVML's "memory not supported" is the expected state of such a GPU, not a fault.
        field_errors=tuple((f, r) for f, r in gpu.field_errors if f != "memory"),
        # The memory figures are RAM's: as stale as the staler of the two readings.
        stale_s=max(gpu.stale_s or 0.0, ram.stale_s or 0.0) or None,
    )
