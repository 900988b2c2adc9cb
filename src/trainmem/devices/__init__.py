"""Live devices: NVIDIA GPUs (NVML), system RAM and unified memory. No UI imports here.

For the dashboard (the callback runs on the sampler's thread; post a message from it)::

    sampler = Sampler(lambda snap: app.post_message(DevicesSampled(snap)), interval=1.0)
    sampler.start()            # and sampler.stop() on exit
    sampler.history("gpu0")    # [HistoryPoint(timestamp, used_bytes, utilization_pct), ...]
    sampler.peaks()            # Peaks(devices={"gpu0": ...}, processes={("gpu0", pid): ...})

Each source (NVML, system RAM, Apple unified memory; ``DeviceSource`` for more) is read on
its own thread: one that hangs is marked ``stale_s``, one that raises becomes ``unavailable``.

For the planner::

    parse_device_spec("RTX-4090,unified:36GB")  # -> [DeviceTarget, ...]; "auto" reads the machine
    resolve_preset("h100 80gb"), list_presets()

Everything that can fail on a real machine (no driver, a lost GPU, a field a GPU does not
support, processes we may not inspect) becomes ``unavailable`` with a short reason.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

# Submodules load on first use, so `plan` (which needs only `target`) never imports NVML or
# psutil code.
_WHERE = {
    "NvmlReader": "nvml",
    "default_reader": "nvml",
    "list_presets": "presets",
    "resolve_preset": "presets",
    "HistoryPoint": "sampler",
    "Peaks": "sampler",
    "Sampler": "sampler",
    "SnapshotCallback": "sampler",
    "read_devices": "sampler",
    "DeviceSource": "source",
    "DeviceKind": "snapshot",
    "DeviceReading": "snapshot",
    "MigReading": "snapshot",
    "NvmlStatus": "snapshot",
    "ProcessReading": "snapshot",
    "Snapshot": "snapshot",
    "SystemReader": "system",
    "DeviceTarget": "target",  # re-exported from trainmem.core.target
    "detect_targets": "target",
    "parse_device_spec": "target",
    "is_apple_silicon": "unified",
    "usable_unified": "unified",
}

if TYPE_CHECKING:
    from trainmem.core.target import DeviceTarget
    from trainmem.devices.nvml import NvmlReader, default_reader
    from trainmem.devices.presets import list_presets, resolve_preset
    from trainmem.devices.sampler import (
        HistoryPoint,
        Peaks,
        Sampler,
        SnapshotCallback,
        read_devices,
    )
    from trainmem.devices.snapshot import (
        DeviceKind,
        DeviceReading,
        MigReading,
        NvmlStatus,
        ProcessReading,
        Snapshot,
    )
    from trainmem.devices.source import DeviceSource
    from trainmem.devices.system import SystemReader
    from trainmem.devices.target import detect_targets, parse_device_spec
    from trainmem.devices.unified import is_apple_silicon, usable_unified


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"trainmem.devices.{_WHERE[name]}"), name)


__all__ = [
    "DeviceKind",
    "DeviceReading",
    "DeviceSource",
    "DeviceTarget",
    "HistoryPoint",
    "MigReading",
    "NvmlReader",
    "NvmlStatus",
    "Peaks",
    "ProcessReading",
    "Sampler",
    "Snapshot",
    "SnapshotCallback",
    "SystemReader",
    "default_reader",
    "detect_targets",
    "is_apple_silicon",
    "list_presets",
    "parse_device_spec",
    "read_devices",
    "resolve_preset",
    "usable_unified",
]
