"""Snapshots of each main view at 120x40 and 80x24 on the deterministic demo machine.

Update after an intended change with ``pytest tests/app --snapshot-update`` and look at the
SVGs under ``__snapshots__`` before committing them; then ``make screenshots`` copies four
of them to screenshots/ for the README (test_screenshots.py checks they are the same).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from app_helpers import settle
from textual.pilot import Pilot

from trainmem.app import TrainmemApp
from trainmem.app.fixture import ReplaySampler, demo_plan_set, demo_snapshot

SIZES = [pytest.param((120, 40), id="120x40"), pytest.param((80, 24), id="80x24")]


MiB = 2**20


def before(*keys: str) -> Callable[[Pilot[Any]], Any]:
    """Keys pressed, each settled; "low-memory": the demo run grows until GPU 1 is nearly
    full (the monitor's warning)."""

    async def run(pilot: Pilot[Any]) -> None:
        await settle(pilot.app, pilot)
        for key in keys:
            if key == "low-memory":
                sampler = pilot.app.state.sampler  # type: ignore[attr-defined]
                assert isinstance(sampler, ReplaySampler)
                sampler.push(demo_snapshot(train_used=23_600 * MiB, seq=2))
            else:
                await pilot.press(key)
            await settle(pilot.app, pilot)

    return run


@pytest.mark.parametrize("size", SIZES)
def test_plan_view(snap_compare: Any, demo_app: Callable[..., TrainmemApp], size: Any) -> None:
    app = demo_app(plan_set=demo_plan_set())
    assert snap_compare(app, terminal_size=size, run_before=before())


@pytest.mark.parametrize("size", SIZES)
def test_compare_view(snap_compare: Any, demo_app: Callable[..., TrainmemApp], size: Any) -> None:
    app = demo_app(plan_set=demo_plan_set())
    assert snap_compare(app, terminal_size=size, run_before=before("f3"))


@pytest.mark.parametrize("size", SIZES)
def test_monitor_view(snap_compare: Any, demo_app: Callable[..., TrainmemApp], size: Any) -> None:
    app = demo_app(plan_set=demo_plan_set())
    assert snap_compare(app, terminal_size=size, run_before=before("f4", "low-memory"))
