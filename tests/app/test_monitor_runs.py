"""The monitor with a probe log (--run-log) and, without GPUs, training processes by RSS."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from app_helpers import plain
from textual.widgets import DataTable, Static

from trainmem.app import TrainmemApp
from trainmem.app.fixture import demo_sampler_factory, demo_snapshot
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
        await _until(pilot, lambda: len(runs[path].report.steps) == 2)
        assert runs[path].report.allocated_peak.step == 2
        before = len(app.state.workspace.plans)
        await pilot.press("p")
        assert len(app.state.workspace.plans) == before + 1
        assert app.state.workspace.current.plan == runs[path].report.estimate.plan
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
