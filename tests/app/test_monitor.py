"""Monitoring with a fake sampler: observed memory and peak against the plan, low-memory warning."""

from __future__ import annotations

from collections.abc import Callable

from app_helpers import plain, settle
from textual.widgets import DataTable, Static

from trainmem.app import TrainmemApp
from trainmem.app.fixture import TRAIN_PID, ReplaySampler, demo_plan_set, demo_snapshot
from trainmem.core import Plan, estimate
from trainmem.core.units import fmt_bytes
from trainmem.planner.run_report import difference
from trainmem.sources.resolve import resolve_model

MiB = 2**20


async def test_monitor_compares_the_run_and_warns_when_memory_runs_low(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    app = demo_app(plan_set=demo_plan_set())  # selected: 7B LoRA, batch 1
    predicted = estimate(Plan(batch=1), resolve_model(Plan().model)).device_bytes
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("f4")
        await settle(app, pilot)
        warning = app.screen.query_one("#monitor-warning", Static)
        assert not warning.display
        table = app.screen.query_one("#monitor-table", DataTable)
        row = next(r for r in range(table.row_count) if table.get_row_at(r)[1] == str(TRAIN_PID))
        cells = [str(c) for c in table.get_row_at(row)]
        assert cells[5:] == list(
            difference(21_400 * MiB, predicted).shown(fmt_bytes)
        )  # the fixture's peak

        # The run grows until GPU 1 has under 5% free: the next sample shows it at once.
        sampler = app.state.sampler
        assert isinstance(sampler, ReplaySampler)
        sampler.push(demo_snapshot(train_used=23_600 * MiB, seq=2))
        await settle(app, pilot)
        assert warning.display and "LOW FREE MEMORY on gpu1" in plain(warning)
        cells = [str(c) for c in table.get_row_at(row)]
        assert cells[3] == "24.7 GB" and cells[4] == "24.7 GB"
        assert cells[5:] == list(difference(23_600 * MiB, predicted).shown(fmt_bytes))
        assert cells[5].startswith("+")
        # Other processes (a notebook, the desktop) are not taken for the run.
        others = [table.get_row_at(r) for r in range(table.row_count) if r != row]
        assert all(str(r[5]) == "not the run" for r in others)


def test_difference_is_observed_minus_predicted_as_a_share_of_observed() -> None:
    over = difference(11 * 2**30, 10 * 2**30)  # the run held 1 GiB more than predicted
    assert (over.bytes, round(over.pct or 0, 4)) == (2**30, round(100 / 11, 4))
    assert over.over and over.shown() == ("+1.00 GiB", "+9.1%")
    under = difference(400 * MiB, 500 * MiB)
    assert not under.over and under.shown() == ("-100.0 MiB", "-25.0%")
    assert difference(0, 10).pct is None and difference(0, 10).shown()[1] == "n/a"
    assert over.shown(fmt_bytes) == ("+1.1 GB", "+9.1%")  # the monitor table's unit
