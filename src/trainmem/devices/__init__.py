"""Live devices: NVIDIA GPUs (NVML), system RAM and unified memory. No UI imports here.

For the dashboard (the callback runs on the sampler's thread; post a message from it)::

    sampler = Sampler(lambda snap: app.post_message(DevicesSampled(snap)), interval=1.0)
    sampler.start()            # and sampler.stop() on exit
    sampler.history("gpu0")    # [HistoryPoint(timestamp, used_bytes, utilization_pct), ...]
    sampler.peaks()            # Peaks(devices={"gpu0": ...}, processes={("gpu0", pid): ...})

For the planner::

    parse_device_spec("RTX-4090,unified:36GB")  # -> [DeviceTarget, ...]; "auto" reads the machine
    resolve_preset("h100 80gb"), list_presets()

Everything that can fail on a real machine (no driver, a lost GPU, a field a GPU does not
support, processes we may not inspect) becomes ``unavailable`` with a short reason.
"""

from trainmem.devices.nvml import NvmlReader, default_reader
from trainmem.devices.presets import list_presets, resolve_preset
from trainmem.devices.sampler import HistoryPoint, Peaks, Sampler, SnapshotCallback, read_devices
from trainmem.devices.snapshot import (
    DeviceKind,
    DeviceReading,
    MigReading,
    NvmlStatus,
    ProcessReading,
    Snapshot,
)
from trainmem.devices.system import SystemReader
from trainmem.devices.target import DeviceTarget, detect_targets, parse_device_spec, parse_size
from trainmem.devices.unified import is_apple_silicon, usable_unified

__all__ = [
    "DeviceKind",
    "DeviceReading",
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
    "parse_size",
    "read_devices",
    "resolve_preset",
    "usable_unified",
]
