"""Predicted against observed, calibration measured from a log and applied to the runtime part
only, and the built-in runtime figures by GPU family and CUDA version."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "probe"))
from fake_run_logs import GiB, MiB, run_record, step_record, write_log

from trainmem.core.calibration import Calibration
from trainmem.core.estimator import estimate
from trainmem.core.runtime import (
    ALLOCATOR_RESERVE_FRACTION,
    CUDA_CONTEXT_BYTES,
    TYPICAL,
    built_in_figures,
    gpu_family,
)
from trainmem.planner.calibration import (
    CalibrationError,
    calibration_for,
    measure,
)
from trainmem.planner.run_report import build_run_report, rank_report
from trainmem.sources.run_logs import RunLogTail, read_run_log, rebuild_plan


def _log(tmp_path: Path, steps: list[dict], name: str = "r.jsonl", **run: object):
    return read_run_log(write_log(tmp_path / name, run_record(**run), steps))


def test_observed_beside_predicted_in_bytes_and_percent(tmp_path: Path):
    steps = [
        step_record(1, allocated=90 * MiB),
        step_record(2, allocated=100 * MiB, context=400 * MiB),
    ]
    report = rank_report(_log(tmp_path, steps))
    est = report.estimate
    doc = report.to_json()
    alloc = doc["allocated"]
    assert (
        alloc["observed_bytes"] == 100 * MiB and alloc["step"] == 2 and alloc["phase"] == "backward"
    )
    # observed - predicted, as a share of observed
    assert alloc["difference_bytes"] == 100 * MiB - est.allocated_bytes
    assert alloc["difference_pct"] == round(
        100 * (100 * MiB - est.allocated_bytes) / (100 * MiB), 2
    )
    device = doc["device_peak"]
    # device peak = peak reserved + context (driver - reserved at the step's end)
    assert device["observed_bytes"] == 120 * MiB + 500 * MiB and device["step"] == 1
    assert device["predicted_bytes"] == est.device_bytes
    assert [s["context_bytes"] for s in doc["per_step"]] == [500 * MiB, 400 * MiB]
    assert doc["warnings"] == []


def test_the_estimate_is_the_rebuilt_plans(tmp_path: Path):
    log = _log(tmp_path, [step_record(1)], method="lora", seq_len=512)
    rebuilt = rebuild_plan(log)
    got = rank_report(log).estimate
    # CUDA 12.8: the typical figures, with the logged GPU's family for its cuBLAS workspace
    figures = replace(TYPICAL, gpu_family=got.runtime_figures.gpu_family)
    expected = estimate(rebuilt.plan, rebuilt.spec, runtime="gpu", figures=figures)
    assert got.allocated_bytes == expected.allocated_bytes
    assert got.device_bytes == expected.device_bytes


def test_low_free_memory_is_warned(tmp_path: Path):
    steps = [step_record(1), step_record(2, free=2 * GiB), step_record(3, free=3 * GiB)]
    (warning,) = rank_report(_log(tmp_path, steps)).warnings
    assert warning.startswith(
        "low free memory: 2.1 GB of 85.9 GB free at step 2 (2 steps under 5%)"
    )


def test_ranks_side_by_side_in_rank_order(tmp_path: Path):
    logs = [
        _log(
            tmp_path,
            [step_record(1, allocated=110 * MiB)],
            name=f"r{rank}.jsonl",
            rank=rank,
            world=2,
        )
        for rank in (1, 0)
    ]
    doc = build_run_report(logs).to_json()
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert {r["plan"]["gpus"] for r in doc["ranks"]} == {2}  # from the world size


def test_cpu_and_mps_logs_use_the_driver_figure(tmp_path: Path):
    cpu = {**step_record(1), "max_allocated_bytes": None, "max_driver_bytes": 700 * MiB}
    report = rank_report(_log(tmp_path, [cpu], device="cpu"))
    assert report.estimate.runtime_kind == "system"
    assert report.device_peak is not None and report.device_peak.device_peak == 700 * MiB
    assert report.allocated_peak is None


# -- calibration ------------------------------------------------------------------------------
def test_calibration_is_measured_from_the_steps_after_the_first(tmp_path: Path):
    steps = [
        step_record(1, allocated=100 * MiB, reserved=110 * MiB, context=300 * MiB),
        step_record(2, allocated=100 * MiB, reserved=125 * MiB, context=520 * MiB),
        step_record(3, allocated=80 * MiB, reserved=120 * MiB, context=510 * MiB),
    ]
    m = measure(_log(tmp_path, steps))
    cal, via = m.calibration, m.via
    assert via == "nvml" and cal.gpu == "NVIDIA H100 80GB HBM3"
    assert cal.context_bytes == 520 * MiB  # the largest after step 1
    assert cal.reserve_fraction == pytest.approx(125 / 100 - 1)
    assert (cal.run, cal.steps, cal.cuda, cal.torch) == ("r.jsonl", 3, "12.8", "2.13.0")


def test_without_nvml_the_devices_used_memory_stands_in(tmp_path: Path):
    steps = [step_record(1, context=None, reserved=100 * MiB, free=80 * GiB - 700 * MiB)]
    m = measure(_log(tmp_path, steps))
    cal, via = m.calibration, m.via
    assert via == "device free memory" and cal.context_bytes == 600 * MiB


def test_a_cpu_log_cannot_calibrate(tmp_path: Path):
    with pytest.raises(CalibrationError, match="from a cpu run: calibration is for CUDA"):
        measure(_log(tmp_path, [step_record(1)], device="cpu"))


def test_calibrations_are_found_by_nvml_name_or_preset():
    cal = Calibration("NVIDIA H100 80GB HBM3", 1, 0.1, "r")
    known = {cal.gpu: cal}
    assert calibration_for("NVIDIA H100 80GB HBM3", known) is cal
    assert calibration_for("h100-80gb", known) is cal
    assert calibration_for("NVIDIA A100-SXM4-80GB", known) is None


def test_run_report_uses_a_calibration_of_its_gpu(tmp_path: Path):
    log = _log(tmp_path, [step_record(1)])
    cal = Calibration("NVIDIA H100 80GB HBM3", 10 * MiB, 0.5, "earlier.jsonl")
    plain, calibrated = rank_report(log), rank_report(log, {cal.gpu: cal})
    assert calibrated.estimate.allocated_bytes == plain.estimate.allocated_bytes
    assert calibrated.estimate.component("CUDA context") == 10 * MiB
    assert (
        "runtime overhead (CUDA context, allocator reserve): calibrated from earlier.jsonl"
        in calibrated.notes
    )


# -- built-in figures -------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("NVIDIA H100 80GB HBM3", "hopper"),
        ("NVIDIA GeForce RTX 4090", "ada"),
        ("NVIDIA A100-SXM4-80GB", "ampere"),
        ("NVIDIA GeForce RTX 3090", "ampere"),
        ("Tesla T4", "turing"),
        ("Tesla V100-SXM2-16GB", "volta"),
        ("NVIDIA GeForce GTX 1080", "pascal"),
        ("NVIDIA B200", "blackwell"),
        ("Some Future GPU", None),
    ],
)
def test_gpu_families(name: str, family: str | None):
    assert gpu_family(name) == family


def test_built_in_figures_by_cuda_version():
    # lazy loading: the typical figures, knowing the family (for its cuBLAS workspace)
    assert built_in_figures("NVIDIA H100 80GB HBM3", "12.8") == replace(
        TYPICAL, gpu_family="hopper", nvswitch=True
    )
    assert built_in_figures("NVIDIA H100 80GB HBM3", None).context_bytes == TYPICAL.context_bytes
    assert built_in_figures("an unknown GPU", "12.8") is TYPICAL
    assert built_in_figures("NVIDIA GeForce RTX 3090", "11.1").context_bytes == 1687 * MiB
    assert built_in_figures("NVIDIA GeForce GTX 1080", "10.1").context_bytes == 721 * MiB
    assert built_in_figures("Tesla T4", "11.3").context_bytes == 1000 * MiB  # the ">1000MB" floor
    assert built_in_figures("NVIDIA GeForce RTX 3090", "11.7").source == TYPICAL.source
    assert TYPICAL.context_bytes == CUDA_CONTEXT_BYTES == 600 * MiB
    assert TYPICAL.reserve_fraction == ALLOCATOR_RESERVE_FRACTION == 0.08


# -- a log followed for a long run ------------------------------------------------------------
def _varied_steps(n: int) -> list[dict]:
    """Steps whose peaks, free memory, errors and shapes move about, ties included."""
    out = []
    for i in range(1, n + 1):
        rec = step_record(
            i,
            allocated=(90 + (i * 7) % 13) * MiB,
            reserved=(120 + (i * 5) % 11) * MiB,
            context=None if i % 4 == 0 else (400 + i % 3) * MiB,
            free=(1 + (i * 3) % 9) * GiB,
        )
        if i % 10 == 3:
            rec["error"] = f"RuntimeError: step {i}"
        rec["batch"], rec["seq_len"] = 1 + i % 3, 64 * (1 + (i * 11) % 5)
        out.append(rec)
    return out


def test_a_tail_that_keeps_no_steps_reports_what_a_whole_read_does(tmp_path: Path):
    """The monitor's tail folds each step as it reads it (RunLog.observed) and keeps none;
    its report must be the one `run-report` builds from every step, polled in pieces."""
    path = tmp_path / "run.jsonl"
    steps = _varied_steps(60)
    write_log(path, {**run_record(), "observed": ["batch", "seq_len"]}, steps[:25])
    tail = RunLogTail(path, keep_steps=False)
    tail.poll()
    with path.open("a") as f:
        f.writelines(json.dumps(s) + "\n" for s in steps[25:])
    folded = rank_report(tail.poll())
    whole = rank_report(read_run_log(path))
    assert folded.steps == () and folded.log.steps == () and len(whole.steps) == 60
    # every figure but the per-step list agrees
    doc, expected = folded.to_json(), whole.to_json()
    assert doc.pop("per_step") == [] and expected.pop("per_step")
    assert doc == expected and doc["steps"] == 60
    # and the folded peaks are the list's own: the first step at the largest
    seen = whole.steps
    top = max(s.allocated_peak or 0 for s in seen)
    assert folded.allocated_peak == next(s for s in seen if s.allocated_peak == top)
    assert folded.device_peak == max(seen, key=lambda s: s.device_peak or 0)
    assert any("raised RuntimeError: step 53" in w for w in folded.warnings)
    low = sum(s["free_bytes"] < 0.05 * s["total_bytes"] for s in steps)
    assert 0 < low < 60 and any(f"({low} steps under 5%)" in w for w in folded.warnings)
    big = max(steps, key=lambda s: s["batch"] * s["seq_len"])
    assert (folded.estimate.plan.batch, folded.estimate.plan.seq_len) == (
        big["batch"],
        big["seq_len"],
    )


def test_following_a_long_run_keeps_memory_flat(tmp_path: Path):
    """20,000 steps tailed as the monitor tails them hold a few hundred kilobytes, not the
    steps (kept, they take tens of megabytes)."""
    import tracemalloc

    path = tmp_path / "run.jsonl"
    write_log(path, run_record(), _varied_steps(20_000))
    held = {}
    for keep in (False, True):
        tracemalloc.start()
        tail = RunLogTail(path, keep_steps=keep)
        log = tail.poll()
        while tail.more:
            log = tail.poll()
        held[keep] = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        assert log.step_count == 20_000
        del tail, log
    assert held[False] < 2 * MiB < 20 * MiB < held[True]
