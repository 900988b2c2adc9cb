"""Calibration, measured and applied: a probe log's CUDA context and reserve ratio for its GPU
model, and a report whose GPU verdicts use the calibration of the GPU they judge.

Measured from a run log (CUDA only):
- context = the process's memory as NVML sees it minus the allocator's reserved bytes, both
  read at the same moment (each step's end); the largest over the steps after the first (the
  first loads kernels as they are first used), so the figure is never below what the run held;
  without NVML figures (a container whose PIDs NVML does not show), the device's used memory
  (total - free) stands in for the process's, which assumes the run was alone on the GPU;
- reserve = the run's peak reserved / its peak allocated - 1 (used as a fraction of the
  allocated peak when nothing better is known);
- reserve correction = the run's peak reserved / the simulated allocator's peak reserved for
  the run's own plan (rebuilt from the log, with the GPU's built-in figures): estimates on
  that GPU then scale their simulated reserve by it, so the calibration corrects the
  simulation instead of replacing it. None when the log's plan cannot be rebuilt.
- NCCL: in a multi-GPU run the driver's figure also holds NCCL's buffers (cuMem, outside the
  allocator), which estimates add for multi-GPU plans on their own (trainmem.core.nccl); the
  context stored is the run's less NCCL's buffers for its rebuilt plan, so a plan of one GPU
  gets the context alone and a plan of many does not count NCCL twice. Where the plan cannot
  be rebuilt, or the remainder would be below any CUDA context measured (BARE_CONTEXT_BYTES),
  the whole figure is kept (both counts then err on the high side) and ``measure`` says so.
Applied: only the runtime part of the device peak changes: ``figures_for`` gives a target's
figures to ``build_report`` (trainmem.planner.report), which estimates with them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainmem.core.calibration import Calibration
from trainmem.core.runtime import BARE_CONTEXT_BYTES, RuntimeFigures, built_in_figures
from trainmem.core.target import DeviceTarget
from trainmem.core.text import visible
from trainmem.devices.presets import resolve_preset

if TYPE_CHECKING:  # every report imports figures_for: the log and file readers load on use
    from trainmem.core.estimator import Estimate
    from trainmem.sources.run_logs import RunLog


class CalibrationError(ValueError):
    """A log that cannot calibrate; ``str()`` is one line."""


@dataclass(frozen=True)
class Measured:
    """A log's calibration, how its context was read ("nvml" or "device free memory") and
    the NCCL buffers taken out of it: ``nccl_bytes`` for a multi-GPU run (0 on one GPU),
    None where they could not be (``nccl_kept`` says why; the context then holds them)."""

    calibration: Calibration
    via: str
    nccl_bytes: int | None = 0
    nccl_kept: str = ""


def measure(log: RunLog) -> Measured:
    """This log's calibration; CalibrationError when it cannot be right
    (trainmem.sources.calibration.implausible: the physical bounds, checked against this
    run's device size)."""
    from trainmem.sources.calibration import implausible
    from trainmem.sources.files import show

    where = f"run log {visible(show(log.path))}"
    if log.device_type != "cuda" or not log.gpu_name:
        if log.device_type == "cuda":
            raise CalibrationError(f"{where} names no GPU: calibration is per GPU model")
        kind = log.device.get("type")  # as the log says it (device_type reads others as cpu)
        ran = f"a {visible(kind[:20])} run" if isinstance(kind, str) and kind else "no device type"
        raise CalibrationError(f"{where} is from {ran}: calibration is for CUDA")
    steps = log.steps[1:] or log.steps
    via = "nvml"
    contexts = [
        s.driver_bytes - s.reserved_bytes
        for s in steps
        if s.driver_bytes is not None and s.reserved_bytes is not None
    ]
    if not contexts:
        via = "device free memory"
        contexts = [
            s.total_bytes - s.free_bytes - s.reserved_bytes
            for s in steps
            if s.total_bytes is not None
            and s.free_bytes is not None
            and s.reserved_bytes is not None
        ]
    peaks = [
        (s.max_allocated_bytes, s.max_reserved_bytes)
        for s in log.steps
        if s.max_allocated_bytes and s.max_reserved_bytes is not None
    ]
    if not contexts or not peaks:
        raise CalibrationError(f"{where} holds no step with CUDA memory figures yet")
    allocated = max(a for a, _ in peaks)
    reserved = max(r for _, r in peaks)
    # Readings no CUDA run can give are refused, not clamped into a calibration: every block
    # allocated is reserved, and the device shows the reserve plus the context.
    if reserved < allocated:
        raise CalibrationError(
            f"{where}: its peak reserved is below its peak allocated, which PyTorch's "
            "allocator cannot report; nothing stored"
        )
    if max(contexts) < 0:
        raise CalibrationError(
            f"{where}: the device shows less in use than PyTorch reserved ({via}), so its "
            "context cannot be read; nothing stored"
        )
    context = max(contexts)
    fraction = reserved / allocated - 1  # figures of at most 2^64 (run_logs)
    why = implausible(log.gpu_name, context, fraction, log.total_bytes, reserved)
    if why is not None:
        raise CalibrationError(f"{where}: {why}; nothing stored")
    run = _run_estimate(log)
    correction = _reserve_correction(run, reserved)
    nccl, kept = _nccl_in_context(log, run, context)
    context -= nccl or 0
    versions = log.run.get("versions")
    torch = versions.get("torch") if isinstance(versions, dict) else None
    cal = Calibration(
        gpu=log.gpu_name,
        context_bytes=context,
        reserve_fraction=fraction,
        run=visible(log.path.name),
        steps=len(log.steps),
        cuda=visible(log.cuda) if log.cuda else None,
        torch=visible(torch[:40]) if isinstance(torch, str) and torch else None,
        reserve_correction=correction,
    )
    return Measured(cal, via, nccl, kept)


# A correction outside this range says the rebuilt plan is not the run (another model, an
# unlogged setting), not that the allocator behaves so differently: it is not stored.
CORRECTION_RANGE = (0.5, 2.0)


def _run_estimate(log: RunLog) -> Estimate | None:
    """The estimate of the run's own plan, rebuilt from its log, with the GPU's built-in
    figures; None when the log does not say enough to rebuild it."""
    from trainmem.core.errors import PlanError
    from trainmem.core.estimator import estimate
    from trainmem.sources.run_logs import RunLogError, rebuild_plan

    try:
        rebuilt = rebuild_plan(log)
        figures = built_in_figures(log.gpu_name, log.cuda)
        return estimate(rebuilt.plan, rebuilt.spec, runtime="gpu", figures=figures)
    except (PlanError, RunLogError, ValueError):
        return None


def _nccl_in_context(log: RunLog, run: Estimate | None, context: int) -> tuple[int | None, str]:
    """NCCL's buffers to take out of a measured ``context`` (see the module), or None and
    why they stay in it."""
    if log.world_size <= 1:
        return 0, ""
    if run is None:
        return None, f"its plan ({log.world_size} processes) could not be rebuilt"
    nccl = run.component("NCCL buffers")  # the run's estimate on its GPU counts them
    if context - nccl < BARE_CONTEXT_BYTES:
        return None, (
            f"the {nccl / 2**20:,.0f} MiB of NCCL buffers modelled for its plan would leave "
            f"{max(0, context - nccl) / 2**20:,.0f} MiB, less than any CUDA context measured"
        )
    return nccl, ""


def _reserve_correction(run: Estimate | None, reserved: int) -> float | None:
    """The run's peak reserved over the simulated one for its own plan (see the module)."""
    peak = run.device_peak if run is not None else None
    if peak is None or peak.reserved <= 0:
        return None
    ratio = reserved / peak.reserved
    low, high = CORRECTION_RANGE
    return round(ratio, 6) if low <= ratio <= high else None


def _key(name: str) -> str:
    return re.sub(r"[\s_\-]+", "", name.lower()).removeprefix("nvidia")


def calibration_for(name: str, calibrations: Mapping[str, Calibration]) -> Calibration | None:
    """The calibration of the GPU called ``name`` (NVML's name or a preset's: "H100-80GB"
    finds "NVIDIA H100 80GB HBM3"); None when this GPU model was never calibrated."""
    if not calibrations:  # the usual case, on every keystroke: no preset lookup
        return None
    for gpu, cal in calibrations.items():
        if _key(gpu) == _key(name):
            return cal
    preset = resolve_preset(name)
    if preset is None:
        return None
    for gpu, cal in calibrations.items():
        other = resolve_preset(gpu)
        if other is not None and other.name == preset.name:
            return cal
    return None


def figures_for(target: DeviceTarget, calibrations: Mapping[str, Calibration]) -> RuntimeFigures:
    """The CUDA runtime figures a target is judged with: this machine's calibration of that
    GPU model when there is one, else the built-in figures for its name."""
    cal = calibration_for(target.name, calibrations) if target.kind == "gpu" else None
    return cal.figures if cal is not None else built_in_figures(target.name)


def machine_calibrations() -> tuple[dict[str, Calibration], str | None]:
    """This machine's calibrations (`trainmem-tui calibrate`), and a one-line warning when
    some cannot be used: a broken file counts as absent and a broken or implausible entry as
    missing for its GPU alone (the built-in figures), so a bad file never stops a plan; it is
    left as it is for the user to fix."""
    from trainmem.sources.calibration import load_calibrations_or_warn

    return load_calibrations_or_warn()
