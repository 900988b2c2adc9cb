"""A calibration corrects the simulated reserve instead of replacing it: `calibrate` stores the
run's peak reserved over what the allocator's simulation of the run's own plan reserves, and
estimates on that GPU scale their simulated reserve by it."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "probe"))
from fake_run_logs import H100, MiB, run_record, step_record, write_log

from trainmem.core.calibration import Calibration
from trainmem.core.estimator import estimate
from trainmem.core.runtime import built_in_figures
from trainmem.planner.calibration import measure
from trainmem.sources.calibration import load_calibrations_or_warn, save_calibration
from trainmem.sources.run_logs import read_run_log, rebuild_plan

PLAN = {"seq_len": 2048, "batch": 8}  # big enough that reserved < 2 x allocated (plausible)


def _simulated(tmp_path: Path):
    """The rebuilt plan of the fake run and its simulated device peak on an H100."""
    log = read_run_log(write_log(tmp_path / "probe.jsonl", run_record(**PLAN), [step_record(1)]))
    rebuilt = rebuild_plan(log)
    est = estimate(rebuilt.plan, rebuilt.spec, figures=built_in_figures(H100, "12.8"))
    assert est.device_peak is not None
    return rebuilt, est


def _run(tmp_path: Path, allocated: int, reserved: int):
    steps = [step_record(n, allocated=allocated, reserved=reserved) for n in (1, 2)]
    return read_run_log(write_log(tmp_path / "r.jsonl", run_record(**PLAN), steps))


def test_calibrate_measures_the_run_against_the_simulation_of_its_own_plan(tmp_path: Path):
    _, est = _simulated(tmp_path)
    reserved = round(1.2 * est.device_peak.reserved)  # type: ignore[union-attr]
    cal = measure(_run(tmp_path, est.allocated_bytes, reserved)).calibration
    assert cal.reserve_correction == pytest.approx(1.2, abs=1e-5)


def test_a_run_unlike_its_plan_stores_no_correction(tmp_path: Path):
    _, est = _simulated(tmp_path)
    peak = est.device_peak
    assert peak is not None
    cal = measure(_run(tmp_path, 2 * peak.reserved, 3 * peak.reserved)).calibration
    assert cal.reserve_correction is None  # 3x: the rebuilt plan is not what ran


def test_estimates_scale_their_simulated_reserve_by_the_correction(tmp_path: Path):
    rebuilt, plain = _simulated(tmp_path)
    peak = plain.device_peak
    assert peak is not None
    cal = Calibration(H100, 300 * MiB, 0.5, "r.jsonl", reserve_correction=1.25)
    est = estimate(rebuilt.plan, rebuilt.spec, figures=cal.figures)
    reserve = round(peak.reserved * 1.25) - plain.allocated_bytes
    assert est.component("allocator reserve") == reserve
    assert est.device_bytes == plain.allocated_bytes + 300 * MiB + reserve
    # without a correction the measured fraction of the allocated peak stands, as before
    old = estimate(rebuilt.plan, rebuilt.spec, figures=Calibration(H100, 0, 0.5, "r").figures)
    assert old.component("allocator reserve") == round(0.5 * plain.allocated_bytes)


def test_the_correction_is_stored_and_checked_when_read(tmp_path: Path):
    path = tmp_path / "calibration.json"
    save_calibration(Calibration(H100, 300 * MiB, 0.1, "r", reserve_correction=1.07), path)
    found, warning = load_calibrations_or_warn(path)
    assert warning is None and found[H100].reserve_correction == 1.07
    for bad in (5, "1.1", float("nan"), True):
        doc = json.loads(path.read_text())
        doc["gpus"][H100]["reserve_correction"] = bad
        path.write_text(json.dumps(doc))
        found, warning = load_calibrations_or_warn(path)
        assert H100 not in found and warning is not None and "reserve_correction" in warning


@pytest.mark.parametrize(
    ("step", "why"),
    [
        ({"allocated": 200 * MiB, "reserved": 100 * MiB}, "reserved is below its peak allocated"),
        ({"context": -50 * MiB}, "less in use than PyTorch reserved"),
    ],
)
def test_readings_no_cuda_run_gives_are_refused_not_clamped(tmp_path: Path, step, why):
    """Clamped, they were stored as a 0 MiB context or a 0% reserve that later plans used."""
    from trainmem.planner.calibration import CalibrationError

    steps = [step_record(n, **step) for n in (1, 2)]
    log = read_run_log(write_log(tmp_path / "r.jsonl", run_record(**PLAN), steps))
    with pytest.raises(CalibrationError, match=why):
        measure(log)


@pytest.mark.parametrize(("kind", "said"), [("tpu", "is from a tpu run"), (None, "no device type")])
def test_a_log_not_from_cuda_says_what_it_is_from(tmp_path: Path, kind, said):
    """Every type but cuda and mps reads as cpu for the estimate; the refusal names the log's."""
    from trainmem.planner.calibration import CalibrationError

    record = run_record(**PLAN)
    record["device"]["type"] = kind
    log = read_run_log(write_log(tmp_path / "r.jsonl", record, [step_record(1)]))
    with pytest.raises(CalibrationError, match=said):
        measure(log)


# -- NCCL's buffers in a multi-GPU run's context --------------------------------------------
def _world_log(tmp_path: Path, world: int, context: int, **plan):
    steps = [step_record(n, context=context) for n in (1, 2)]
    record = run_record(world=world, **PLAN, **plan)
    return read_run_log(write_log(tmp_path / "w.jsonl", record, steps))


def test_a_multi_gpu_runs_context_is_stored_without_nccls_buffers(tmp_path: Path):
    """The driver's figure holds NCCL's buffers, which a multi-GPU estimate adds again: the
    calibration keeps the context alone, so the run's own plan gets back what it measured."""
    log = _world_log(tmp_path, 8, 1500 * MiB, strategy="fsdp")
    rebuilt = rebuild_plan(log)
    run = estimate(rebuilt.plan, rebuilt.spec, figures=built_in_figures(H100, "12.8"))
    nccl = run.component("NCCL buffers")
    assert nccl > 100 * MiB  # 8 NVSwitch GPUs: hundreds of MiB
    m = measure(log)
    assert m.nccl_bytes == nccl
    assert m.calibration.context_bytes == 1500 * MiB - nccl
    again = estimate(rebuilt.plan, rebuilt.spec, figures=m.calibration.figures)
    assert again.component("CUDA context") + again.component("NCCL buffers") == 1500 * MiB
    one_gpu = estimate(replace(rebuilt.plan, gpus=1), rebuilt.spec, figures=m.calibration.figures)
    assert one_gpu.component("CUDA context") == 1500 * MiB - nccl


def test_a_one_gpu_runs_context_is_kept_whole(tmp_path: Path):
    m = measure(_world_log(tmp_path, 1, 700 * MiB))
    assert (m.nccl_bytes, m.calibration.context_bytes) == (0, 700 * MiB)


def test_nccl_stays_in_a_context_it_would_leave_too_small(tmp_path: Path):
    """A model of NCCL larger than what the run showed beside its reserve does not fit the
    run: the whole figure is kept (counted twice for multi-GPU plans, on the safe side)."""
    m = measure(_world_log(tmp_path, 8, 200 * MiB, strategy="fsdp"))
    assert m.nccl_bytes is None and "less than any CUDA context" in m.nccl_kept
    assert m.calibration.context_bytes == 200 * MiB
