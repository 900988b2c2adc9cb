"""Shared state and background work: failures are shown, not lost; a machine without a GPU
asks for the machine that will train instead of judging the plan on this PC's RAM."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from app_helpers import plain, settle

from trainmem.app import TrainmemApp
from trainmem.app.fixture import demo_sampler_factory, demo_snapshot
from trainmem.app.widgets.breakdown import CPU_ONLY_PROMPT


def _boom() -> None:
    raise RuntimeError("disk on fire")


async def test_a_failing_worker_is_reported(demo_app: Callable[..., TrainmemApp]) -> None:
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        app.run_worker(_boom, name="reading plans", thread=True, exit_on_error=False)
        await settle(app, pilot)
        messages = [n.message for n in app._notifications]
    assert any("reading plans failed: RuntimeError: disk on fire" in m for m in messages)


async def test_without_a_gpu_the_dashboard_asks_for_the_training_machine(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    full = demo_snapshot()
    ram_only = dataclasses.replace(
        full, devices=tuple(d for d in full.devices if d.kind == "system")
    )
    app = demo_app(sampler_factory=demo_sampler_factory([ram_only]))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        fit = plain(app.screen.query_one("#fit"))
        report = app.state.report
    assert report is not None and report.cpu_only
    assert CPU_ONLY_PROMPT.split(".")[0] in fit.replace("\n", " ")
    assert "if trained on this CPU" in fit


def test_a_stale_device_says_how_old_its_figures_are() -> None:
    """A source that stopped answering (a stuck NVML call) keeps its last figures, marked."""
    from trainmem.app.widgets.devices import DevicePane

    gpu = next(d for d in demo_snapshot().devices if d.kind == "gpu")
    fresh = DevicePane(gpu)._lines(80)[0].plain
    stale = DevicePane(dataclasses.replace(gpu, stale_s=12.4))._lines(80)[0].plain
    assert "stale" not in fresh and "stale 12s" in stale
    assert stale.split()[:2] == fresh.split()[:2]  # the title is kept whole


def test_every_change_of_the_open_plans_is_announced_once_from_the_workspace():
    from trainmem.app.workspace import Workspace
    from trainmem.core.plan import Plan

    calls: list[str] = []
    ws = Workspace(None, lambda: calls.append("changed"))
    for change in (
        lambda: ws.add(Plan(model="1B")),
        lambda: ws.duplicate(0),
        lambda: ws.rename(1, "mine"),
        lambda: ws.select(0),
        lambda: ws.update_current(Plan()),
        lambda: ws.delete(2),
    ):
        before = len(calls)
        change()
        assert len(calls) == before + 1
    ws.edit_current(Plan(model="3B"))  # the form's own typing: shown by the form itself
    assert len(calls) == 6
    assert not Workspace(None, lambda: calls.append("x")).delete(0)  # nothing changed
    assert len(calls) == 6


def test_a_rename_is_stored_as_a_name_read_from_a_file() -> None:
    # escapes written out and cut to 200 characters, as a plans file's name is on reading,
    # so what the compare table shows is what a save and a reload give back
    from pathlib import Path

    from trainmem.app.workspace import Workspace
    from trainmem.core.plan import Plan
    from trainmem.sources.plan_files import NamedPlan, PlanSet, from_toml, to_toml

    ws = Workspace(PlanSet((NamedPlan("a", Plan()),)))
    ws.rename(0, "x\x1b]0;PWNED\x07\u202e" + "y" * 10_000)
    name = ws.plans[0].name
    assert "\x1b" not in name and "\\x1b" in name and len(name) == 200
    assert from_toml(to_toml(ws.to_plan_set()), Path("p.toml")).plans[0].name == name
