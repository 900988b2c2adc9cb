"""This machine's measured CUDA runtime, as data, and an estimate re-costed with it.

A calibration (written by `trainmem-tui calibrate` from a probe log, read from disk by
trainmem.sources.calibration) holds what one GPU model showed in a real run: the CUDA context
(the driver's figure for the process minus the allocator's reserved bytes) and the reserve
ratio (peak reserved / peak allocated - 1). It replaces the runtime part of the device peak
only: the allocated estimate, every tensor component and the peak phase stay as they are.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainmem.core.estimator import Component, Estimate
from trainmem.core.runtime import RUNTIME_COMPONENTS, RuntimeFigures, runtime_note, runtime_overhead


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


def recalibrated(est: Estimate, figures: RuntimeFigures) -> Estimate:
    """``est`` with its runtime components (GPU only) from ``figures``; the allocated peak and
    the tensor components are unchanged. An estimate for unified memory or CPU is returned as
    it is: calibration is for CUDA."""
    if est.runtime_kind != "gpu":
        return est
    overhead = runtime_overhead("gpu", est.allocated_bytes, figures)
    components = tuple(
        Component(c.name, overhead[c.name], c.kind) if c.name in RUNTIME_COMPONENTS else c
        for c in est.components
    )
    old_note = runtime_note("gpu")
    notes = tuple(runtime_note("gpu", figures) if n == old_note else n for n in est.notes)
    return replace(
        est,
        components=components,
        device_bytes=est.allocated_bytes + sum(overhead.values()),
        notes=notes,
    )
