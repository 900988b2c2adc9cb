"""Compare actions, export, saving and loading plans, and a broken plans file."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app_helpers import settle
from textual.widgets import DataTable, Input

from trainmem.app import TrainmemApp
from trainmem.app.fixture import demo_plan_set
from trainmem.app.screens.compare import CompareScreen
from trainmem.app.screens.plan import PlanScreen
from trainmem.app.screens.prompt import PromptScreen
from trainmem.app.workspace import Workspace
from trainmem.core import Plan
from trainmem.planner.report import build_report
from trainmem.sources.paths import session_path
from trainmem.sources.plan_files import load_plans, save_plans
from trainmem.sources.resolve import resolve_model


async def answer(app: TrainmemApp, pilot: object, text: str) -> None:
    """Answer the open prompt with ``text``."""
    assert isinstance(app.screen, PromptScreen)
    app.screen.query_one(Input).value = text
    await pilot.press("enter")  # type: ignore[attr-defined]
    await settle(app, pilot)  # type: ignore[arg-type]


def names(app: TrainmemApp) -> list[str]:
    return [p.name for p in app.state.workspace.plans]


async def compare_screen(app: TrainmemApp, pilot: Any) -> CompareScreen:
    """F3, and the compare view it opens."""
    await pilot.press("f3")
    await settle(app, pilot)
    assert isinstance(app.screen, CompareScreen)
    return app.screen


async def test_compare_actions_and_export(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    app = demo_app(plan_set=demo_plan_set())
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        screen = await compare_screen(app, pilot)
        table = screen.query_one("#compare-table", DataTable)
        assert table.row_count == 4
        await pilot.press("d")  # duplicate row 1
        await settle(app, pilot)
        first = "Qwen2.5-7B lora 2048x2 r16"  # rank 16 differs from the QLoRA plan's 64
        assert names(app)[:2] == [first, f"{first} (2)"] and table.row_count == 5
        await pilot.press("r")
        await answer(app, pilot, "short context")
        assert names(app)[1] == "short context"
        await pilot.press("x")
        await settle(app, pilot)
        assert "short context" not in names(app) and table.row_count == 4
        await pilot.press("a")
        await settle(app, pilot)
        assert app.state.workspace.plans[-1].plan == Plan() and table.cursor_row == 4

        await pilot.press("m")
        await answer(app, pilot, str(tmp_path / "cmp.md"))
        md = (tmp_path / "cmp.md").read_text()
        assert md.startswith("| Plan | Model |") and "Qwen2.5-7B qlora 4096x2 r64" in md
        assert "| ≠ logits |" in md and "| ≠ LoRA rank | 16 | 16 | 64 |" in md
        await pilot.press("j")
        await answer(app, pilot, str(tmp_path / "cmp.json"))
        doc = json.loads((tmp_path / "cmp.json").read_text())
        assert [p["name"] for p in doc["plans"]] == names(app)
        # The same object as `plan --json`, one per plan.
        plan = app.state.workspace.plans[0].plan
        want = build_report(plan, resolve_model(plan.model), [])
        assert set(doc["plans"][0]["report"]) == set(want.to_json())

        table.move_cursor(row=2)
        await pilot.press("enter")
        await settle(app, pilot)
        assert isinstance(app.screen, PlanScreen) and app.state.workspace.selected == 2
        assert app.screen.report is not None
        assert app.screen.report.estimate.plan.method == "qlora"


async def test_save_load_and_a_broken_file(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    saved = tmp_path / "plans.toml"
    broken = tmp_path / "broken.toml"
    broken.write_text("[[plans]\nthis is not toml")
    app = demo_app(plan_set=demo_plan_set())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await pilot.press("ctrl+s")
        await answer(app, pilot, str(saved))
        assert Workspace(load_plans(saved)).to_plan_set() == app.state.workspace.to_plan_set()

        await pilot.press("ctrl+n")  # change the workspace, then load the saved plans back
        await settle(app, pilot)
        assert len(app.state.workspace.plans) == 5
        await pilot.press("ctrl+o")
        await answer(app, pilot, str(saved))
        assert app.state.workspace.to_plan_set() == Workspace(load_plans(saved)).to_plan_set()
        assert app.screen.query_one("#f-batch", Input).value == "1"  # the form follows

        await pilot.press("ctrl+o")
        await answer(app, pilot, str(broken))
        messages = [n.message for n in app._notifications]
        assert any("broken.toml: not valid TOML" in m for m in messages)
        assert len(app.state.workspace.plans) == 4  # nothing replaced
        await pilot.press("ctrl+s")
        await answer(app, pilot, str(broken))
        assert any("not overwritten" in n.message for n in app._notifications)
    assert broken.read_text() == "[[plans]\nthis is not toml"


async def test_session_is_kept_unless_its_file_was_broken(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    app = demo_app(plan_set=demo_plan_set())
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
    assert app.save_session() == []
    assert (
        Workspace(load_plans(session_path())).to_plan_set()
        == Workspace(demo_plan_set()).to_plan_set()
    )

    session_path().write_text("garbage = [")
    app = demo_app(broken_paths=[session_path()])
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
    assert "left as it was" in " ".join(app.save_session())
    assert session_path().read_text() == "garbage = ["


def test_plans_file_round_trips_through_the_store(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    save_plans(path, demo_plan_set())
    assert load_plans(path) == demo_plan_set()


async def test_a_screen_workers_failure_reaches_the_one_error_handler(
    demo_app: Callable[..., TrainmemApp], monkeypatch, tmp_path
) -> None:
    # Textual posts a worker's state to the screen that started it and does not bubble it
    import trainmem.app.screens.compare as compare

    def broken(*_args, **_kwargs):
        raise RuntimeError("the exporter broke")

    monkeypatch.setattr(compare, "to_markdown", broken)
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        screen = await compare_screen(app, pilot)
        screen._export("md", tmp_path / "out.md")
        await pilot.pause()
        await app.workers.wait_for_complete()
        await pilot.pause()
        said = [str(n.message) for n in app._notifications]
    assert any("RuntimeError: the exporter broke" in m for m in said), said
