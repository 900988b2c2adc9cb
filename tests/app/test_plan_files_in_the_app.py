"""Plans files as the dashboard opens them: partly invalid files, a broken session, a file of
thousands of plans read in the background, and a comparison that stays usable."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app_helpers import settle
from textual.widgets import DataTable

from trainmem.app import TrainmemApp
from trainmem.app.screens.compare import PAGE, CompareScreen
from trainmem.cli.dashboard_cmd import startup
from trainmem.core.plan import Plan
from trainmem.sources.paths import session_path
from trainmem.sources.plan_files import NamedPlan, PlanSet, is_large, load_plans, save_plans

GOOD = "[[plans]]\nname = 'good'\nmodel = '7B'\n"
BAD = "[[plans]]\nname = 'bad'\nmodel = 5\n"


def test_a_partly_invalid_file_opens_its_valid_plans_and_is_never_overwritten(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cmp.toml"
    path.write_text(GOOD + BAD)
    _ns, plan_set, messages, broken = startup(["--compare", str(path)])
    assert plan_set is not None and [p.name for p in plan_set.plans] == ["good"]
    assert broken == [path]
    assert "opened the 1 valid plans of 2" in messages[0][1]
    assert "plan 2 (bad): model: 5 is not text" in messages[0][1]
    assert path.read_text() == GOOD + BAD


def test_a_broken_session_is_kept_aside_and_the_valid_plans_open() -> None:
    path = session_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(GOOD + BAD)
    _ns, plan_set, messages, broken = startup([])
    assert plan_set is not None and len(plan_set.plans) == 1 and broken == []
    aside = list(path.parent.glob("session.broken-*.toml"))
    assert len(aside) == 1 and aside[0].read_text() == GOOD + BAD
    assert not path.exists() and str(aside[0]) in messages[0][1]
    path.write_text("not = [toml")  # unreadable: kept aside too, the defaults open
    _ns, plan_set, messages, broken = startup([])
    assert plan_set is None and broken == [] and "kept as" in messages[0][1]


async def test_thousands_of_plans_open_in_the_background_and_compare_pages(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    path = tmp_path / "many.toml"
    plans = tuple(NamedPlan("", Plan(seq_len=256 + i), auto=True) for i in range(2500))
    save_plans(path, PlanSet(plans))
    assert is_large(path)
    ns, plan_set, _messages, _broken = startup(["--compare", str(path)])
    assert plan_set is None and ns.load_in_background == path  # not read before the UI
    app = demo_app(plans_path=path, load_in_background=path)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await settle(app, pilot)
        assert len(app.state.workspace.plans) == 2500
        await pilot.press("f3")
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        table = screen.query_one("#compare-table", DataTable)
        assert table.row_count == PAGE  # one page drawn, not 2,500 rows
        await pilot.press("]")
        await settle(app, pilot)
        assert screen.page_start == PAGE and screen.rows[0].report is not None
        assert screen.rows[0].report.estimate.plan.seq_len == 256 + PAGE
    assert load_plans(path).plans == plans


async def test_save_never_writes_over_a_partly_invalid_file(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    """Opened with its valid plans; Ctrl+S to the same file is refused, the file kept."""
    path = tmp_path / "cmp.toml"
    path.write_text(GOOD + BAD)
    _ns, plan_set, _messages, broken = startup(["--compare", str(path)])
    app = demo_app(plan_set=plan_set, plans_path=path, broken_paths=broken)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        app._save_to(str(path))  # what the Save prompt calls with the path accepted
        await settle(app, pilot)
        said = [n.message for n in app._notifications]
    assert any("not overwritten" in m for m in said)
    assert path.read_text() == GOOD + BAD


async def test_open_of_a_partly_invalid_file_keeps_it_from_being_saved_over(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    """Ctrl+O reads files as the start-up does: the valid plans open, the file is protected."""
    path = tmp_path / "cmp.toml"
    path.write_text(GOOD + BAD)
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        app._open_from(str(path))  # what the Open prompt calls with the path accepted
        await settle(app, pilot)
        assert [p.name for p in app.state.workspace.plans] == ["good"]
        app._save_to(str(path))
        await settle(app, pilot)
        said = [n.message for n in app._notifications]
    assert any("plan 2 (bad)" in m for m in said) and any("not overwritten" in m for m in said)
    assert path.read_text() == GOOD + BAD


async def test_a_typed_path_no_file_can_have_is_a_toast_not_a_crash(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    # Path.expanduser raised RuntimeError for an unknown ~user, resolve() ValueError for NUL
    config = tmp_path / "axolotl.yml"
    config.write_text("base_model: x\n")
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        for typed in ("~no-such-user-here/p.toml", "a\x00b.toml", "a\x00b.yaml"):
            app._save_to(typed)
            app._open_from(typed)
            await settle(app, pilot)
        app._save_to(str(config))  # a training config typed at the save prompt
        await settle(app, pilot)
        said = [str(n.message) for n in app._notifications]
    assert sum("no such user" in m for m in said) == 2
    assert sum("cannot hold a NUL byte" in m for m in said) == 4
    assert any("not a plans file" in m for m in said)
    assert config.read_text() == "base_model: x\n"
