"""Plan names follow every edit and stay distinct where they are shown, cut between words."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from app_helpers import screen_lines, settle
from textual.widgets import DataTable, Input
from textual.widgets._toast import Toast

from trainmem.app import TrainmemApp
from trainmem.app.widgets.plan_form import PlanForm
from trainmem.core.plan import Plan
from trainmem.planner.naming import fit_name
from trainmem.sources.plan_files import NamedPlan, PlanSet

CUT_IN_A_WORD = re.compile(r"\w…")


@pytest.mark.parametrize("width", range(8, 60))
def test_fit_name_cuts_between_words_and_keeps_the_end(width: int):
    name = "Qwen2.5-7B lora 2048x1 bf16 on h100-80gb,unified:36GB (2)"
    fitted = fit_name(name, width)
    assert len(fitted) <= width
    if len(name) <= width:
        assert fitted == name
    elif width >= len("Qwen2.5-7B … (2)"):
        assert fitted.startswith("Qwen2.5-7B ") and fitted.endswith(" (2)")
        assert not CUT_IN_A_WORD.search(fitted)
        assert all(w in name.split(" ") for w in fitted.split(" ") if w != "…")


async def test_the_plan_title_follows_edits(demo_app: Callable[..., TrainmemApp]):
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        form = app.screen.query_one(PlanForm)
        assert str(form.border_subtitle).startswith("Qwen2.5-7B lora 2048x2")
        app.screen.query_one("#f-method").value = "qlora"  # type: ignore[attr-defined]
        app.screen.query_one("#f-model", Input).value = "meta-llama/Llama-3.2-1B"
        await settle(app, pilot)
        await settle(app, pilot)
        name = app.state.workspace.current.name
        assert name.startswith("Llama-3.2-1B qlora 2048x2")
        assert str(form.border_subtitle) == fit_name(name, 30)
        assert app.screen.sub_title == name


async def test_duplicated_plans_read_apart_in_compare(demo_app: Callable[..., TrainmemApp]):
    plan = Plan(device="h100-80gb,unified:36GB", lora_rank=32, precision="fp16")
    plans = PlanSet((NamedPlan("", plan, auto=True), NamedPlan("", Plan(), auto=True)))
    app = demo_app(plan_set=plans)
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        await pilot.press("f3")
        await settle(app, pilot)
        await pilot.press("d")  # duplicate the highlighted (first) plan
        await settle(app, pilot)
        assert app.screen.query_one("#compare-table", DataTable).row_count == 3
        # The Plan column as drawn: "│ 1   <name>  <bar>..." (a name has single spaces)
        rows = [line for line in screen_lines(app) if re.match(r"│ (\d+|▶) ", line)][:3]
        shown = [re.split(r"\s{2,}", line.strip("│ "))[1] for line in rows]
    assert len(set(shown)) == 3, shown
    assert not any(CUT_IN_A_WORD.search(s) for s in shown), shown


async def test_a_toast_quoting_a_strangers_text_shows_its_markup_unparsed(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    # a config value or plan name of "[/x]" reaches the toasts (startup messages, file and
    # run-log errors): parsed as markup it raised MarkupError and stopped the dashboard
    hostile = "optimizer '[/x]' [bold red]bad[/] [link=http://evil.example/]c[/link]"
    app = demo_app(startup_messages=[("error", hostile)])
    async with app.run_test(size=(120, 40), notifications=True) as pilot:
        await settle(app, pilot)
        app.screen.notify(f"from a widget: {hostile}")  # Widget.notify passes markup=True
        await settle(app, pilot)
        shown = [str(n.message) for n in app._notifications]
        assert hostile in shown and f"from a widget: {hostile}" in shown
        await pilot.pause(0.3)  # the toast rack is refreshed later
        toasts = [" ".join(t.render().plain.split()) for t in app.screen.query(Toast)]
        assert any(hostile in t for t in toasts), toasts  # shown as written, not styled


async def test_a_plan_named_in_markup_is_listed_as_written_in_compare(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    # a plans file from someone else names the plans; the compare table drew a str cell
    # as markup ("[/nope]" raised, "[bold red]" styled)
    named = ("[/nope]", "[bold red]b[/]")
    app = demo_app(plan_set=PlanSet(tuple(NamedPlan(n, Plan()) for n in named)))
    async with app.run_test(size=(120, 30)) as pilot:
        await settle(app, pilot)
        await pilot.press("f3")
        await settle(app, pilot)
        lines = "\n".join(screen_lines(app))
        assert all(n in lines for n in named), lines
