"""This machine's measured CUDA runtime, as data.

A calibration (written by `trainmem-tui calibrate` from a probe log, read from disk by
trainmem.sources.calibration) holds what one GPU model showed in a real run: the CUDA context
(the driver's figure for the process minus the allocator's reserved bytes), the reserve
ratio (peak reserved / peak allocated - 1) and, where the run's plan could be rebuilt, the
reserve correction: the run's peak reserved over what the allocator's simulation of that plan
reserves, which then scales the simulated reserve of every plan on that GPU. Its ``figures``
are an input of the estimate (``estimate(..., figures=...)``): they set the runtime part of
the device peak only.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.core.runtime import RuntimeFigures, gpu_family, gpu_nvswitch


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
    reserve_correction: float | None = None  # measured / simulated peak reserved

    @property
    def figures(self) -> RuntimeFigures:
        return RuntimeFigures(
            self.context_bytes,
            self.reserve_fraction,
            f"calibrated from {self.run}",
            True,
            gpu_family=gpu_family(self.gpu),
            nvswitch=gpu_nvswitch(self.gpu),
            reserve_correction=self.reserve_correction,
        )
