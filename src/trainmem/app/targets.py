"""The devices a plan is judged on, read from the latest sample rather than from the hardware.

``parse_device_spec("auto")`` reads NVML itself, which the UI thread must never wait on; the
dashboard already has a fresh snapshot, so ``auto`` is answered from it.
"""

from __future__ import annotations

from trainmem.devices.snapshot import Snapshot
from trainmem.devices.target import DeviceTarget, parse_device_spec


def snapshot_targets(snapshot: Snapshot | None) -> list[DeviceTarget]:
    """GPUs (each MIG slice), else unified memory, else CPU RAM: as ``detect_targets``."""
    if snapshot is None:
        return []
    targets: list[DeviceTarget] = []
    for d in snapshot.devices:
        if d.kind == "system" or d.unavailable is not None or not d.total_bytes:
            continue
        if d.kind == "unified":
            targets.append(DeviceTarget.unified(d.name, d.total_bytes))
        elif d.mig:
            targets.extend(
                DeviceTarget.gpu(f"{d.id} {m.name or f'MIG {m.index}'}", m.total_bytes)
                for m in d.mig
                if m.total_bytes
            )
        else:
            targets.append(DeviceTarget.gpu(f"{d.id} {d.name}", d.total_bytes))
    if targets:
        return targets
    ram = next((d for d in snapshot.devices if d.kind == "system" and d.total_bytes), None)
    if ram is None or ram.total_bytes is None:
        return []
    return [DeviceTarget.system("CPU RAM (no GPU found)", ram.total_bytes)]


def plan_targets(spec: str, snapshot: Snapshot | None) -> list[DeviceTarget]:
    """Targets for the plan's device field; raises ValueError with the parser's message."""
    targets: list[DeviceTarget] = []
    for item in spec.split(","):
        if item.strip().lower() == "auto":
            targets.extend(snapshot_targets(snapshot))
        else:
            targets.extend(parse_device_spec(item))
    return targets
