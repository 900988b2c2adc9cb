"""A device a plan is judged against: its name, its kind, and how many bytes a run may use.

A value only; the devices layer builds these from presets, sizes and the machine's readings.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from trainmem.core.units import fmt_bytes

TargetKind = Literal["gpu", "unified", "system"]


@dataclass(frozen=True, slots=True)
class DeviceTarget:
    """A device to plan for. ``usable_bytes``: the total for a GPU or CPU RAM, 3/4 of it for
    unified memory (see ``trainmem.devices.unified``)."""

    name: str
    kind: TargetKind
    total_bytes: int
    usable_bytes: int
    # Unified memory on a Mac: macOS's GPU working-set limit (Metal's
    # recommendedMaxWorkingSetSize, raised by ``sysctl iogpu.wired_limit_mb``), read on the Mac
    # or stated (``wired:SIZE``); None where unknown.
    wired_bytes: int | None = None
    # Why ``usable_bytes`` is what it is, where it is not the device's own memory or 3/4 rule.
    basis: str = ""

    @classmethod
    def gpu(cls, name: str, total_bytes: int) -> DeviceTarget:
        return cls(name, "gpu", total_bytes, total_bytes)

    @classmethod
    def unified(cls, name: str, total_bytes: int) -> DeviceTarget:
        return cls(name, "unified", total_bytes, total_bytes * 3 // 4)

    @classmethod
    def system(cls, name: str, total_bytes: int) -> DeviceTarget:
        return cls(name, "system", total_bytes, total_bytes)

    def for_engine(self, engine: str) -> DeviceTarget:
        """The target as a run on ``engine`` (a stack's, trainmem.core.stacks) may use it.
        An MLX run on a Mac is bounded by the GPU working set macOS lets Metal wire: mlx-lm
        wires exactly that (mlx_lm/utils.py maybe_set_recommended_wired_limit, mlx-lm 0.32.2)
        and MLX trims its cache against it (mlx/backend/metal/allocator.cpp, MLX 0.32). Where
        it is unknown the guide's 3/4 stays, and says so."""
        if engine != "mlx" or self.kind != "unified":
            return self
        if self.wired_bytes:
            basis = f"macOS's GPU working set; the guide's 3/4 is {fmt_bytes(self.usable_bytes)}"
            return replace(self, usable_bytes=self.wired_bytes, basis=basis)
        return replace(
            self,
            basis="the guide's 3/4; macOS's GPU working set is read on the Mac (mlx installed) "
            "or stated as wired:SIZE",
        )
