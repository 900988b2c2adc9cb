"""Predicted against observed: a run log's steps beside the estimate for the plan the log
describes, per rank. The data behind `run-report --json` and the dashboard's run view.

Observed, per step:
- allocated peak: ``max_allocated_bytes`` (CUDA, exact; MPS, read at phase boundaries);
  none on CPU, where no tensor count exists;
- device peak: on CUDA the peak reserved plus the context (the driver's figure for the
  process minus reserved, at the step's end; without NVML the context is not known and the
  device peak is the reserved peak, said in the notes); on MPS and CPU the largest driver
  figure read (Metal's allocation for the process; the process's RSS).
Differences (:func:`difference`, the one place they are computed, for `run-report` and the
dashboard's monitor alike) are observed minus predicted, in bytes and as a share of what was
observed: +10% means the run held more than predicted, and the estimate was short by 10% of
what it held; -10% means the estimate was high by 10% of it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from trainmem.core.calibration import Calibration
from trainmem.core.estimator import Estimate, estimate
from trainmem.core.fit import LOW_FREE_FRACTION
from trainmem.core.runtime import TYPICAL, built_in_figures, runtime_note
from trainmem.core.target import DeviceTarget, TargetKind
from trainmem.core.units import fmt_bytes
from trainmem.planner.calibration import calibration_for
from trainmem.sources.run_logs import RebuiltPlan, RunLog, StepSeen, rebuild_plan

KINDS: dict[str, TargetKind] = {"cuda": "gpu", "mps": "unified", "cpu": "system"}


@dataclass(frozen=True, slots=True)
class Difference:
    """Observed minus predicted: ``bytes``, and ``pct`` of observed (None when nothing was
    observed: no share of zero)."""

    bytes: int
    pct: float | None

    @property
    def over(self) -> bool:
        """The run held more than predicted."""
        return self.bytes > 0

    def shown(self, unit: Callable[[int], str] | None = None) -> tuple[str, str]:
        """The difference and its share as written everywhere: ``+375.7 MiB``, ``+94.4%``
        (``unit``: how a byte figure is written where it stands, :func:`size` by default)."""
        sign = "+" if self.bytes >= 0 else "-"
        pct = f"{self.pct:+.1f}%" if self.pct is not None else "n/a"
        return f"{sign}{(unit or size)(abs(self.bytes))}", pct


def difference(observed: int, predicted: int) -> Difference:
    """Observed minus predicted, in bytes and as a share of observed."""
    diff = observed - predicted
    return Difference(diff, 100 * diff / observed if observed else None)


def size(n: int | None) -> str:
    """A byte figure of a run report: MiB under a GiB, GiB above (n/a: not observed)."""
    if n is None:
        return "n/a"
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.1f} MiB"


def _diff(peak: PeakCompared) -> dict[str, Any]:
    d = peak.difference
    out: dict[str, Any] = {"predicted_bytes": peak.predicted, "observed_bytes": peak.observed}
    if d is not None:
        out["difference_bytes"] = d.bytes  # observed - predicted
        out["difference_pct"] = round(d.pct, 2) if d.pct is not None else None  # of observed
    return {**out, "step": peak.step, "phase": peak.phase}


@dataclass(frozen=True, slots=True)
class PeakCompared:
    """One peak (``label``: "allocated" or "device") predicted beside observed."""

    label: str
    predicted: int
    observed: int | None  # None: the log holds no such figure
    step: int | None
    phase: str | None

    @property
    def difference(self) -> Difference | None:
        return difference(self.observed, self.predicted) if self.observed is not None else None

    def where(self) -> str:
        """``step 2, backward``: where the observed peak was (n/a: none observed)."""
        if self.step is None:
            return "n/a"
        return f"step {self.step}" + (f", {self.phase}" if self.phase else "")


@dataclass(frozen=True)
class RankReport:
    log: RunLog
    rebuilt: RebuiltPlan
    estimate: Estimate
    steps: tuple[StepSeen, ...]  # each step the log kept (the monitor's tail keeps none)
    notes: tuple[str, ...]
    warnings: tuple[str, ...]

    @property
    def step_count(self) -> int:
        return self.log.step_count

    @property
    def allocated_peak(self) -> StepSeen | None:
        return self.log.observed.allocated_peak

    @property
    def device_peak(self) -> StepSeen | None:
        return self.log.observed.device_peak

    def compared(self) -> tuple[PeakCompared, PeakCompared]:
        """The allocated and the device peak, each predicted beside observed."""
        alloc, device = self.allocated_peak, self.device_peak
        return (
            PeakCompared(
                "allocated",
                self.estimate.allocated_bytes,
                alloc.allocated_peak if alloc else None,
                alloc.step if alloc else None,
                alloc.peak_phase if alloc else None,
            ),
            PeakCompared(
                "device",
                self.estimate.device_bytes,
                device.device_peak if device else None,
                device.step if device else None,
                device.peak_phase if device else None,
            ),
        )

    def to_json(self) -> dict[str, Any]:
        alloc, device = self.compared()
        est = self.estimate
        return {
            "path": str(self.log.path),
            "rank": self.log.rank,
            "world_size": self.log.world_size,
            "device": self.log.device,
            "peaks": self.log.run.get("peaks"),
            "steps": self.step_count,
            "ended": self.log.ended,
            "plan": est.plan.to_dict(),
            "model": est.model.name,
            "allocated": {
                **_diff(alloc),
                "predicted_phase": est.peak_phase,
            },
            "device_peak": {
                **_diff(device),
                "device_kind": est.runtime_kind,
            },
            "runtime": {c.name: c.bytes for c in est.components if c.kind == "runtime"},
            "per_step": [s.to_json() for s in self.steps],
            "warnings": list(self.warnings),
            "notes": list(self.notes),
            "problems": list(self.log.problems),
        }


@dataclass(frozen=True)
class RunReport:
    ranks: tuple[RankReport, ...]

    def to_json(self) -> dict[str, Any]:
        # Format 2: differences are observed - predicted (format 1: predicted - observed).
        return {"format": 2, "ranks": [r.to_json() for r in self.ranks]}


def target_of(log: RunLog) -> DeviceTarget | None:
    """The device the run used, as a plan target (None when the log does not give its size)."""
    total = log.total_bytes
    if total is None:
        return None
    name = str(log.device.get("name") or log.device_type)
    if log.device_type == "cuda":
        return DeviceTarget.gpu(name, total)
    if log.device_type == "mps":
        return DeviceTarget.unified(name, total)
    return DeviceTarget.system(name, total)


def rank_report(log: RunLog, calibrations: dict[str, Calibration] | None = None) -> RankReport:
    """One log against its plan's estimate, the runtime part from this machine's calibration
    of that GPU when there is one (``calibrations``), else the built-in figures for its
    family and CUDA version."""
    rebuilt = rebuild_plan(log)
    kind = KINDS[log.device_type]
    figures = TYPICAL
    if kind == "gpu":
        cal = calibration_for(log.gpu_name or "", calibrations or {})
        figures = cal.figures if cal else built_in_figures(log.gpu_name, log.cuda)
    est = estimate(
        rebuilt.plan,
        rebuilt.spec,
        kernels="cpu" if kind == "system" else "cuda",
        runtime=kind,
        figures=figures,
    )
    notes = [*rebuilt.notes, runtime_note(kind, figures)]
    steps = tuple(StepSeen.of(s, log.device_type) for s in log.steps)
    seen = log.observed
    warnings: list[str] = []
    worst, low = seen.lowest_free, seen.low_free
    if worst is not None:
        warnings.append(
            f"low free memory: {fmt_bytes(worst.free_bytes or 0)} of "
            f"{fmt_bytes(worst.total_bytes or 0)} free at step {worst.step} "
            f"({low} step{'s' if low > 1 else ''} under {LOW_FREE_FRACTION:.0%})"
        )
    if seen.failed is not None:
        warnings.append(f"step {seen.failed.step} raised {seen.failed.error}")
    if kind == "gpu" and seen.steps and not seen.context_known:
        notes.append(
            "no NVML figure for the process: the observed device peak leaves out the context"
        )
    if kind == "system":
        notes.append("CPU: no tensor count exists; the observed device peak is the process's RSS")
    if not log.exact_peaks and kind != "system":
        notes.append("peaks read at phase boundaries (this device counts none): a lower bound")
    return RankReport(log, rebuilt, est, steps, tuple(notes), tuple(warnings))


def build_run_report(
    logs: Sequence[RunLog], calibrations: dict[str, Calibration] | None = None
) -> RunReport:
    """Every rank's log side by side, in rank order."""
    return RunReport(
        tuple(sorted((rank_report(log, calibrations) for log in logs), key=lambda r: r.log.rank))
    )
