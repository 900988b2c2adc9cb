"""Two dashboards on one state directory (one tmux window per machine) each save the session
at exit: the second merges what the first saved instead of overwriting it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from app_helpers import settle

from trainmem.app import TrainmemApp
from trainmem.app.fixture import demo_plan_set
from trainmem.app.workspace import Workspace
from trainmem.core.plan import Plan
from trainmem.sources.paths import session_path
from trainmem.sources.plan_files import NamedPlan, PlanSet, load_plans, save_plans


def saved() -> list[NamedPlan]:
    return list(load_plans(session_path()).plans)


def plans_of(app: TrainmemApp) -> list[Plan]:
    return [p.plan for p in app.state.workspace.plans]


async def test_two_dashboards_lose_nothing_either_had(demo_app: Callable[..., TrainmemApp]):
    start = demo_plan_set()
    save_plans(session_path(), start)
    # Both start from the same session, as two windows opened one after the other.
    first, second = demo_app(plan_set=start), demo_app(plan_set=start)
    async with first.run_test(size=(100, 30)) as pilot:
        await settle(first, pilot)
        first.state.workspace.add(Plan(seq_len=1024))
        first.state.workspace.rename(first.state.workspace.selected, "first's own")
        first.state.workspace.update_current(Plan(seq_len=1024, batch=4))
    async with second.run_test(size=(100, 30)) as pilot:
        await settle(second, pilot)
        ws = second.state.workspace
        ws.select(0)
        ws.update_current(replace(ws.current.plan, seq_len=3072))  # an edit
        ws.add(Plan(method="full", model="Qwen/Qwen2.5-0.5B"))  # and a new plan
        ws.rename(ws.selected, "first's own")  # the same name as the other's plan
    first_plans, second_plans = plans_of(first), plans_of(second)

    assert first.save_session() == []  # nothing changed the file since it was read
    assert [p.plan for p in saved()] == first_plans
    told = second.save_session()
    assert len(told) == 1 and "kept 1 plan another dashboard saved" in told[0]
    merged = saved()
    # Every plan either had, once, the second's first and in its order; a plan as both
    # started (here the one the second edited) is not kept twice.
    added_by_first = [p for p in first_plans if p not in {n.plan for n in start.plans}]
    assert added_by_first == [Plan(seq_len=1024, batch=4)]
    assert [p.plan for p in merged] == second_plans + added_by_first
    names = [p.name for p in Workspace(load_plans(session_path())).plans]  # as shown
    assert len(set(names)) == len(names)  # distinct, the user's names kept
    assert "first's own" in names and "first's own (2)" in names

    # Quitting the first again (after the merge) keeps the second's plans too.
    assert "kept 2 plans" in " ".join(first.save_session())
    assert {p.plan for p in saved()} == set(first_plans) | set(second_plans)
    assert len(saved()) == len(set(first_plans) | set(second_plans))


async def test_a_plan_deleted_here_stays_deleted_when_no_one_else_saved(
    demo_app: Callable[..., TrainmemApp],
):
    start = demo_plan_set()
    save_plans(session_path(), start)
    app = demo_app(plan_set=start)
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
        assert app.state.workspace.delete(0)
    assert app.save_session() == []
    assert len(saved()) == len(start.plans) - 1


async def test_a_session_broken_by_another_is_kept_aside_and_merged_around(
    demo_app: Callable[..., TrainmemApp],
):
    app = demo_app(plan_set=PlanSet((NamedPlan("mine", Plan(batch=3)),)))
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
    session_path().parent.mkdir(parents=True, exist_ok=True)
    session_path().write_text("garbage = [")  # written meanwhile, and broken
    told = " ".join(app.save_session())
    assert "kept as" in told
    assert [p.plan for p in saved()] == [Plan(batch=3)]
    aside = [p for p in session_path().parent.iterdir() if ".broken-" in p.name]
    assert len(aside) == 1 and aside[0].read_text() == "garbage = ["


async def test_a_comparison_keeps_the_session_it_never_read(
    demo_app: Callable[..., TrainmemApp], tmp_path
):
    # --compare FILE opens FILE, not the session: quitting merges the session's plans and
    # moves a broken one aside, where it used to write over both
    compared = PlanSet((NamedPlan("compared", Plan(batch=5)),))
    save_plans(session_path(), PlanSet((NamedPlan("from before", Plan(batch=7)),)))
    app = demo_app(plan_set=compared, plans_path=tmp_path / "plans.toml")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
    told = " ".join(app.save_session())
    assert "kept the 1 plan" in told and "held before" in told
    assert [p.plan for p in saved()] == [Plan(batch=5), Plan(batch=7)]

    session_path().write_text("garbage = [")  # broken before the dashboard started
    app = demo_app(plan_set=compared, plans_path=tmp_path / "plans.toml")
    async with app.run_test(size=(100, 30)) as pilot:
        await settle(app, pilot)
    assert "kept as" in " ".join(app.save_session())
    aside = [p for p in session_path().parent.iterdir() if ".broken-" in p.name]
    assert len(aside) == 1 and aside[0].read_text() == "garbage = ["
