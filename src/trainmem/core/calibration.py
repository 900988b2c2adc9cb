"""This machine's measured CUDA runtime, as data.

A calibration (written by `trainmem-tui calibrate` from a probe log, read from disk by
trainmem.sources.calibration) holds what one GPU model showed in a real run: the CUDA context
(the driver's figure for the process minus the allocator's reserved bytes) and the reserve
ratio (peak reserved / peak allocated - 1). Its ``figures`` are an input of the estimate
(``estimate(..., figures=...)``): they set the runtime part of the device peak only.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.core.runtime import RuntimeFigures


@dataclass(frozen=True, slots=True)
class Calibration:
    """One GPU model's measured runtime. ``run``: the log it came from (shown in notes)."""

    gpu: str  # the GPU's name as torch / NVML report it ("NVIDIA H100 80GB HBM3")
    context_bytes: int
    reserve_fraction: float
    run: str
    steps: int = 0  # steps the figures were taken over
    cuda: str | None = None  # torch.version.cuda of the run
    torch: str | None = None

    @property
    def figures(self) -> RuntimeFigures:
        return RuntimeFigures(
            self.context_bytes, self.reserve_fraction, f"calibrated from {self.run}", True
        )
