"""Does a plan fit a device? Verdicts with headroom, judged on usable memory.

Usable memory is a discrete GPU's own memory, or three quarters of unified memory (the guide:
the OS and other apps need their share). ``tight`` means it fits with under 10% headroom.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.core.runtime import TYPICAL, RuntimeFigures
from trainmem.core.target import TargetKind

TIGHT_FRACTION = 0.10
UNIFIED_USABLE = 0.75
LOW_FREE_FRACTION = 0.05  # free memory under 5% of a device's total is warned of


@dataclass(frozen=True)
class FitResult:
    device: str
    usable_bytes: int
    verdict: str  # "fits" | "tight" | "too big"
    headroom_bytes: int  # negative when too big

    @property
    def required_bytes(self) -> int:
        """The figure judged (headroom is measured from it, so the two always agree)."""
        return self.usable_bytes - self.headroom_bytes

    @property
    def fits(self) -> bool:
        return self.verdict != "too big"


def usable_bytes(total_bytes: int, unified: bool) -> int:
    return int(total_bytes * UNIFIED_USABLE) if unified else total_bytes


def low_free(free_bytes: int | None, total_bytes: int | None) -> bool:
    """Under LOW_FREE_FRACTION of the device free: the next allocation there may fail."""
    return bool(
        total_bytes and free_bytes is not None and free_bytes < LOW_FREE_FRACTION * total_bytes
    )


def judge_fit(required_bytes: int, device: str, usable: int, retried: bool = False) -> FitResult:
    """``retried``: the step runs within ``usable`` only because the caching allocator, short
    of new memory, freed its cached segments and retried (trainmem.core.estimator.OnDevice):
    it fits, but at the device's limit, so never better than tight."""
    headroom = usable - required_bytes
    if headroom < 0:
        verdict = "too big"
    elif retried or headroom < TIGHT_FRACTION * usable:
        verdict = "tight"
    else:
        verdict = "fits"
    return FitResult(device, usable, verdict, headroom)


@dataclass(frozen=True, slots=True)
class Budget:
    """One device as a plan's searches see it: the bytes a run may use, the kind of device
    whose runtime the device peak adds, and that runtime's figures (built-in or this
    machine's calibration of that GPU)."""

    usable_bytes: int
    kind: TargetKind = "gpu"
    figures: RuntimeFigures = TYPICAL
