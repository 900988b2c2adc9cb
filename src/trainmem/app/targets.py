"""The devices a plan is judged on, read from the latest sample rather than from the hardware.

``parse_device_spec("auto")`` reads NVML itself, which the UI thread must never wait on; the
dashboard already has a fresh snapshot, so ``auto`` is answered from it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.core.target import DeviceTarget
from trainmem.devices.target import parse_device_spec, targets_from_readings

if TYPE_CHECKING:
    from trainmem.devices.snapshot import Snapshot


def snapshot_targets(snapshot: Snapshot | None) -> list[DeviceTarget]:
    """``auto`` answered from the latest sample, as ``detect_targets`` would from hardware."""
    return targets_from_readings(snapshot.devices) if snapshot else []


def plan_targets(spec: str, snapshot: Snapshot | None) -> list[DeviceTarget]:
    """Targets for the plan's device field; raises ValueError with the parser's message."""
    return parse_device_spec(spec, auto=lambda: snapshot_targets(snapshot))
