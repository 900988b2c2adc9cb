"""The monitor with a probe log (--run-log) and, without GPUs, training processes by RSS."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from app_helpers import plain
from textual.widgets import DataTable, Static

from trainmem.app import TrainmemApp
from trainmem.app.fixture import demo_sampler_factory, demo_snapshot
from trainmem.app.runs import RunLogPoller
from trainmem.app.screens.monitor import runs_text
from trainmem.cli.main import main
from trainmem.devices.processes import TrainingProcess

sys.path.insert(0, str(Path(__file__).parents[1] / "probe"))
from fake_run_logs import MiB, run_record, step_record, write_log


async def _until(pilot, condition: Callable[[], bool], timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
        await pilot.pause()
    raise AssertionError("timed out")


async def test_a_run_log_is_tailed_beside_the_plan_rebuilt_from_it(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    path = tmp_path / "run.rank0.jsonl"
    write_log(path, run_record(), [step_record(1, allocated=100 * MiB)], end=False)
    app = demo_app(run_logs=[path], interval=0.05)
    async with app.run_test(size=(140, 50)) as pilot:
        await app.switch_mode("monitor")
        runs = app.state.runs
        await _until(pilot, lambda: path in runs and runs[path].report is not None)
        shown = plain(app.screen.query_one("#monitor-runs", Static))
        assert "rank 0, 1 steps" in shown and "allocated peak predicted" in shown
        assert "at step 1, backward" in shown
        with path.open("a") as f:  # the run goes on while the dashboard reads it
            f.write(json.dumps(step_record(2, allocated=300 * MiB)) + "\n")
        await _until(pilot, lambda: runs[path].report.step_count == 2)
        assert runs[path].report.allocated_peak.step == 2
        before = len(app.state.workspace.plans)
        await pilot.press("p")
        assert len(app.state.workspace.plans) == before + 1
        assert app.state.workspace.current.plan == runs[path].report.estimate.plan
        # its model is the log's own config ("tiny-llama" names no model anywhere else)
        model = runs[path].report.estimate.plan.model
        assert app.state.specs.get(model) == runs[path].report.estimate.model
        app._stop_watching.set()


async def test_a_log_not_written_yet_is_said_then_read(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    path = tmp_path / "later.jsonl"
    app = demo_app(run_logs=[path], interval=0.05)
    async with app.run_test(size=(140, 50)) as pilot:
        await app.switch_mode("monitor")
        runs = app.state.runs
        await _until(pilot, lambda: path in runs)
        assert runs[path].report is None and "later.jsonl" in (runs[path].error or "")
        write_log(path, run_record(), [step_record(1)])
        await _until(pilot, lambda: runs[path].report is not None)
        app._stop_watching.set()


async def test_without_gpus_training_processes_are_compared_by_their_rss(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    snap = demo_snapshot()
    cpu_only = replace(snap, devices=tuple(d for d in snap.devices if d.kind == "system"))
    app = demo_app(sampler_factory=demo_sampler_factory([cpu_only]), interval=0.05)
    async with app.run_test(size=(140, 50)) as pilot:
        train = TrainingProcess(77, "python", "python train.py", 40 * 2**30, True)
        app.process_poller = lambda: [train]
        app._start_watching()
        await app.switch_mode("monitor")
        await _until(pilot, lambda: app.state.processes == [train])
        await pilot.pause()
        table = app.screen.query_one("#monitor-table", DataTable)
        row = [str(c) for c in table.get_row_at(0)]
        assert row[:2] == ["RAM", "77"] and "has torch loaded" in row[2]
        assert "nothing to monitor" not in plain(app.screen.query_one("#monitor-free", Static))
        app._stop_watching.set()


def _rank_logs(tmp_path: Path) -> Path:
    """A two-rank run written under the base path run.jsonl, as the probe names its files."""
    for rank, allocated in ((0, 300 * MiB), (1, 20 * MiB)):  # rank 1 under its prediction
        steps = [step_record(1, allocated=allocated, reserved=allocated + 20 * MiB)]
        write_log(tmp_path / f"run.rank{rank}.jsonl", run_record(rank=rank, world=2), steps)
    return tmp_path / "run.jsonl"


def test_the_monitor_and_run_report_show_the_same_differences(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    base = _rank_logs(tmp_path)
    assert main(["run-report", str(base)]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if "difference" in line]
    seen = RunLogPoller(base)()
    assert seen is not None and [r.log.rank for r in seen.reports] == [0, 1]
    shown = runs_text([seen]).plain
    # Every difference run-report prints, with its share, is in the monitor, sign and all.
    for r in seen.reports:
        for peak in r.compared():
            d = peak.difference
            assert d is not None
            size, pct = d.shown()
            assert f"({size}, {pct})" in shown
            assert any(f"{size} ({pct})" in line for line in printed)
    alloc0 = seen.reports[0].compared()[0].difference
    alloc1 = seen.reports[1].compared()[0].difference
    assert alloc0 is not None and alloc0.over and alloc0.shown()[0].startswith("+")
    assert alloc1 is not None and not alloc1.over and alloc1.shown()[1].startswith("-")


async def test_a_base_path_tails_every_rank(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    base = tmp_path / "run.jsonl"
    app = demo_app(run_logs=[base], interval=0.05)
    async with app.run_test(size=(140, 50)) as pilot:
        await app.switch_mode("monitor")
        runs = app.state.runs
        await _until(pilot, lambda: base in runs)
        assert not runs[base].reports and "run.rank0.jsonl" in (runs[base].error or "")
        _rank_logs(tmp_path)  # the run starts: both ranks appear under the base path
        await _until(pilot, lambda: len(runs[base].reports) == 2)
        shown = plain(app.screen.query_one("#monitor-runs", Static))
        assert "run.rank0.jsonl: rank 0" in shown and "run.rank1.jsonl: rank 1" in shown
        app._stop_watching.set()


def test_escapes_from_a_log_are_shown_not_sent(tmp_path: Path) -> None:
    record = run_record()
    record["model"]["name"] = "tiny\x1b]0;title\x07llama"
    steps = [{**step_record(1), "error": "boom\x1b[2J[bold]x[/]"}]
    path = write_log(tmp_path / "r\x1b[31m.rank0.jsonl", record, steps)
    seen = RunLogPoller(path)()
    assert seen is not None and seen.report is not None
    text = runs_text([seen])
    assert "\x1b" not in text.plain and "\x07" not in text.plain
    assert "r\\x1b[31m.rank0.jsonl" in text.plain and "tiny\\x1b]0;title\\x07llama" in text.plain
    assert "boom\\x1b[2J[bold]x[/]" in text.plain  # markup in data stays text
