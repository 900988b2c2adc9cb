"""The dashboard builds its reports with the same inputs as `plan` (tests/planner/
test_one_report.py has the other front ends): the same figures on screen as in --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from app_helpers import settle

from trainmem.cli.main import main
from trainmem.core.calibration import Calibration
from trainmem.sources.calibration import save_calibration

GiB = 2**30
FLAGS = ["--model", "Qwen/Qwen2.5-7B", "--method", "lora", "--device", "h100-80gb"]


@pytest.fixture
def calibrated(isolated_state: Path) -> Calibration:
    cal = Calibration("NVIDIA H100 80GB HBM3", 3 * GiB, 0.30, "run.rank0.jsonl", steps=20)
    save_calibration(cal)
    return cal


async def test_the_dashboard_shows_what_plan_json_prints(capsys, calibrated, demo_app):
    from trainmem.cli.dashboard_cmd import startup

    assert main(["plan", *FLAGS, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    ns, plan_set, messages, _broken = startup(FLAGS)
    app = demo_app(plan_set=plan_set, calibrations=ns.calibrations, startup_messages=messages)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        report = app.state.report
        assert report is not None
        assert report.estimate.device_bytes == out["peak"]["device_bytes"]
        assert report.fit[0].required_bytes == out["fit"][0]["required_bytes"]
        await pilot.press("f3")  # the compare view builds its own reports
        await pilot.pause()
        rows = app.screen.rows  # type: ignore[attr-defined]
        assert rows[0].report.estimate.device_bytes == out["peak"]["device_bytes"]


def test_a_rule_of_thumb_plan_shows_both_verdicts_and_is_judged_on_the_worse():
    """The README's example: the rule fits 16 GB, the device peak (18.8 GB) does not. The
    dashboard shows both verdicts, as `plan` does; views with one verdict show the deciding
    one."""
    from trainmem.app.widgets.breakdown import fit_text, headline_text
    from trainmem.core.plan import Plan
    from trainmem.planner.export import verdict_cell
    from trainmem.planner.report import build_report

    report = build_report(Plan(model="8B", method="qlora", device="16GB", rule_of_thumb=True))
    assert report.fit[0].fits and not report.peak_fit[0].fits
    lines = fit_text(report).plain.splitlines()
    assert len(lines) == 2 and "rule of thumb" in lines[0] and "device peak" in lines[1]
    assert report.deciding_fit == report.peak_fit
    assert verdict_cell(report).startswith("too big")
    assert "too big" in headline_text(report).plain.lower()


async def test_an_mlx_plan_on_a_mac_shows_the_working_set_it_is_judged_on(capsys, demo_app):
    """`plan --json` and the dashboard judge an MLX plan on macOS's GPU working set (stated
    here as wired:30GB), and the dashboard's fit line says which figure it is."""
    from trainmem.app.widgets.breakdown import fit_text
    from trainmem.cli.dashboard_cmd import startup

    flags = ["--model", "Qwen/Qwen2.5-7B", "--method", "qlora", "--stack", "mlx"]
    flags += ["--device", "mac-36GB,wired:30GB"]
    assert main(["plan", *flags, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fit"][0]["usable_bytes"] == 30 * 10**9
    _ns, plan_set, messages, _broken = startup(flags)
    app = demo_app(plan_set=plan_set, startup_messages=messages)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        report = app.state.report
        assert report is not None
        assert report.fit[0].usable_bytes == 30 * 10**9
        assert "macOS's GPU working set" in fit_text(report).plain
