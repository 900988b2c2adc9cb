"""One report, one path: every front end builds its report with the same inputs (this
machine's calibration included) through build_report, and shows the same figures for the same
plan: `plan --json`, `plan --data` and the exporter here; the dashboard's plan and compare views
in tests/app/test_one_report_app.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trainmem.cli.main import main
from trainmem.core.calibration import Calibration
from trainmem.core.estimator import estimate
from trainmem.core.fit import Budget
from trainmem.core.plan import Plan
from trainmem.core.runtime import TYPICAL
from trainmem.core.target import DeviceTarget
from trainmem.core.whatif import max_seq_len
from trainmem.planner.calibration import machine_calibrations
from trainmem.planner.report import build_report
from trainmem.sources.calibration import calibration_path, save_calibration
from trainmem.sources.resolve import resolve_model

MiB, GiB = 2**20, 2**30
H100 = "NVIDIA H100 80GB HBM3"
# A calibration far from the built-in figures (600 MiB, 8%), so a front end that ignores it
# shows another figure.
CAL = Calibration(H100, 3 * GiB, 0.30, "run.rank0.jsonl", steps=20)
FLAGS = ["--model", "Qwen/Qwen2.5-7B", "--method", "lora", "--device", "h100-80gb"]


@pytest.fixture
def calibrated(isolated_state: Path) -> Calibration:
    save_calibration(CAL)
    return CAL


def _plan_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    assert main(["plan", *FLAGS, *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_calibration_sets_only_the_runtime_part_of_the_estimate():
    plan, spec = Plan(model="1B").validated(), resolve_model("1B")
    plain = estimate(plan, spec)
    after = estimate(plan, spec, figures=CAL.figures)
    assert after.allocated_bytes == plain.allocated_bytes and after.phases == plain.phases
    tensors = [c for c in plain.components if c.kind == "tensor"]
    assert [c for c in after.components if c.kind == "tensor"] == tensors
    assert after.component("CUDA context") == 3 * GiB
    assert after.component("allocator reserve") == round(plain.allocated_bytes * 0.30)
    assert after.device_bytes == plain.allocated_bytes + 3 * GiB + round(
        plain.allocated_bytes * 0.30
    )
    assert after.device_bytes_on("gpu") == after.device_bytes
    assert after.device_bytes_on("gpu", TYPICAL) == plain.device_bytes
    assert any("calibrated from run.rank0.jsonl" in n for n in after.notes)
    assert not any("not yet calibrated" in n for n in after.notes)


def test_each_gpu_is_judged_on_its_own_calibration_and_the_json_agrees():
    plan = Plan(model="1B")
    targets = [DeviceTarget.gpu("RTX-4090", 24 * GiB), DeviceTarget.gpu("H100-80GB", 80 * GiB)]
    zero = Calibration(H100, 0, 0.0, "r.jsonl")
    report = build_report(plan, targets=targets, calibrations={H100: zero}, solve=False)
    allocated = report.estimate.allocated_bytes
    assert report.estimate.device_bytes > allocated  # the 4090 (first): built-in figures
    assert report.fit[1].required_bytes == allocated  # the H100: no runtime overhead
    assert report.fit[1].headroom_bytes == 80 * GiB - allocated
    for row in report.to_json()["fit"]:  # required, headroom and verdict from one figure
        assert row["headroom_bytes"] == row["usable_bytes"] - row["required_bytes"]
    first, second = report.to_json()["fit"]
    assert first["required_bytes"] == report.estimate.device_bytes
    assert second["required_bytes"] == allocated


def test_plan_json_uses_the_calibration_unless_told_not_to(capsys, calibrated):
    out = _plan_json(capsys)
    plain = _plan_json(capsys, "--no-calibration")
    allocated = out["peak"]["allocated_bytes"]
    assert allocated == plain["peak"]["allocated_bytes"]
    assert out["peak"]["device_bytes"] == allocated + 3 * GiB + round(allocated * 0.30)
    assert out["fit"][0]["required_bytes"] == out["peak"]["device_bytes"]
    assert plain["peak"]["device_bytes"] < out["peak"]["device_bytes"]
    assert "calibrated from run.rank0.jsonl" in out["fit"][0]["runtime_figures"]


def test_the_what_if_answers_are_solved_on_the_calibrated_figures(calibrated):
    plan = Plan(model="Qwen/Qwen2.5-7B", device="h100-80gb")
    spec = resolve_model(plan.model)
    report = build_report(plan, spec, calibrations={H100: calibrated})
    assert report.what_if is not None
    usable = report.targets[0].usable_bytes
    budget = Budget(usable, "gpu", calibrated.figures)
    assert report.what_if.max_seq_len == max_seq_len(plan, spec, budget)
    assert report.what_if.max_seq_len < max_seq_len(plan, spec, Budget(usable))


def test_plan_data_judges_the_dataset_on_the_same_figures(capsys, calibrated, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps({"text": "word " * (20 + i)}) + "\n" for i in range(50)))
    out = _plan_json(capsys, "--data", str(data))
    at_plan = next(m for m in out["data"]["memory"] if m["at"] == "plan")
    assert at_plan["judged_bytes"] == out["fit"][0]["required_bytes"]


def test_a_broken_calibration_file_is_one_warning_and_counts_as_none(capsys, isolated_state):
    calibration_path().parent.mkdir(parents=True, exist_ok=True)
    calibration_path().write_text("{not json")
    assert machine_calibrations()[0] == {}
    assert main(["plan", *FLAGS, "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["peak"]["device_bytes"] > 0
    assert captured.err.count("\n") == 1 and "warning" in captured.err
    assert calibration_path().read_text() == "{not json"  # left for the user to look at


def test_the_exporter_serves_the_calibrated_peak(capsys, calibrated):
    from trainmem.cli.devices_cmd import _plan_peak
    from trainmem.cli.main import build_parser

    out = _plan_json(capsys)
    ns = build_parser().parse_args(["devices", *FLAGS])  # as `devices --serve PORT FLAGS`
    assert _plan_peak(ns).peak_bytes == out["peak"]["device_bytes"]


def test_a_plan_is_checked_once():
    plan = Plan(model="1B").validated()
    assert plan.validated() is plan  # the mark makes a second check free
    changed = plan.__class__(**{**plan.to_dict(), "seq_len": 0})
    with pytest.raises(ValueError):
        changed.validated()  # a new plan is checked again
    assert "_checked" not in plan.to_dict()


def test_a_bad_entry_costs_only_its_own_gpu(capsys, calibrated):
    doc = json.loads(calibration_path().read_text())
    doc["gpus"]["Some GPU"] = {"context_bytes": -1, "reserve_fraction": 0.1, "run": "r"}
    calibration_path().write_text(json.dumps(doc))
    assert main(["plan", *FLAGS, "--json"]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert "calibrated from run.rank0.jsonl" in out["fit"][0]["runtime_figures"]
    assert captured.err.count("\n") == 1 and "'Some GPU'" in captured.err
