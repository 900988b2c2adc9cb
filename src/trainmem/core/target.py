"""A device a plan is judged against: its name, its kind, and how many bytes a run may use.

A value only; the devices layer builds these from presets, sizes and the machine's readings.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

TargetKind = Literal["gpu", "unified", "system"]


@dataclass(frozen=True, slots=True)
class DeviceTarget:
    """A device to plan for. ``usable_bytes``: the total for a GPU or CPU RAM, 3/4 of it for
    unified memory (see ``trainmem.devices.unified``)."""

    name: str
    kind: TargetKind
    total_bytes: int
    usable_bytes: int

    @classmethod
    def gpu(cls, name: str, total_bytes: int) -> DeviceTarget:
        return cls(name, "gpu", total_bytes, total_bytes)

    @classmethod
    def unified(cls, name: str, total_bytes: int) -> DeviceTarget:
        return cls(name, "unified", total_bytes, total_bytes * 3 // 4)

    @classmethod
    def system(cls, name: str, total_bytes: int) -> DeviceTarget:
        return cls(name, "system", total_bytes, total_bytes)
