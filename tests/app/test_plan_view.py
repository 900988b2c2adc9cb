"""Pilot tests of the plan view: edits recalculate as the estimator says; bad input is flagged
inline next to its field while the last valid estimate stays on screen."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from app_helpers import plain, settle
from textual.widgets import Collapsible, Input, Static

from trainmem.app import TrainmemApp
from trainmem.app.fixture import demo_snapshot
from trainmem.app.screens.plan import PlanScreen
from trainmem.app.targets import plan_targets
from trainmem.app.widgets.breakdown import Breakdown
from trainmem.app.widgets.choice import Choice
from trainmem.app.widgets.devices import DevicePane
from trainmem.app.widgets.plan_form import PlanForm
from trainmem.core import Plan, estimate
from trainmem.core.plan import FIELDS_BY_NAME
from trainmem.core.units import fmt_bytes
from trainmem.planner.report import build_report
from trainmem.sources.resolve import resolve_model


def shown_plan(app: TrainmemApp) -> Plan:
    screen = app.screen
    assert isinstance(screen, PlanScreen)
    assert screen.report is not None
    return screen.report.estimate.plan


def set_field(app: TrainmemApp, name: str, value: Any) -> None:
    if not app.screen.query(f"#f-{name}"):  # a section's row: opened as a user opens it
        app.screen.query_one(PlanForm)._open(FIELDS_BY_NAME[name].section)
    widget = app.screen.query_one(f"#f-{name}")
    if isinstance(widget, Input):
        widget.value = str(value)
    else:
        assert isinstance(widget, Choice)
        widget.value = value


EDITS: list[tuple[str, Any]] = [
    ("seq_len", 4096),
    ("batch", 1),
    ("method", "full"),
    ("grad_ckpt", False),
    ("precision", "bf16-mixed"),
    ("optimizer", "adamw-8bit"),
    ("method", "qlora"),
    ("lora_rank", 64),
    ("lora_targets", "q,v"),
    ("attn", "eager"),
    ("gpus", 4),
    ("zero", 3),
    ("offload", "params"),
    ("model", "Qwen/Qwen2.5-0.5B"),
    ("model", "13B"),
    ("device", "H100-80GB,RTX-4090"),
    ("rule_of_thumb", True),
]


async def test_every_field_recalculates_as_the_estimator_says(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        expected = Plan()
        for name, value in EDITS:
            set_field(app, name, value)
            await settle(app, pilot)  # the simulated report replaces the quick one
            expected = replace(expected, **{name: value})
            plan = shown_plan(app)
            assert plan == expected.validated(), name
            screen = app.screen
            assert isinstance(screen, PlanScreen) and screen.report is not None
            assert screen.report.simulated, name
            figures = screen.report.budgets[0].figures  # the first device's (its cuBLAS size)
            want = estimate(expected, resolve_model(expected.model), figures=figures)
            assert screen.report.estimate.device_bytes == want.device_bytes, name
            peaks = plain(app.screen.query_one("#peaks", Static))
            assert fmt_bytes(want.device_bytes) in peaks, name
        # The fit is judged per device named in the field, on the rule of thumb when asked.
        report = screen.report
        assert [f.device for f in report.fit] == ["H100-80GB", "RTX-4090"]
        assert "◀ judged" in plain(app.screen.query_one("#peaks", Static)).split("Rule")[1]


async def test_typing_in_a_field_recalculates(demo_app: Callable[..., TrainmemApp]) -> None:
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.click("#f-batch")
        await pilot.press("end", "backspace", "4")
        await pilot.pause()
        assert shown_plan(app).batch == 4


async def test_whatif_and_advice_follow_the_report(demo_app: Callable[..., TrainmemApp]) -> None:
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        plan = Plan()
        want = build_report(plan, resolve_model(plan.model), plan_targets("auto", demo_snapshot()))
        whatif = plain(app.screen.query_one("#whatif", Static))
        assert f"longest sequence {want.what_if.seq_len_text()} " in whatif
        advice = app.screen.query_one("#advice", Static)
        assert advice.display  # 26.6 GB does not fit a 4090
        assert want.advice[0].action in plain(advice)
        # The device panes mark the predicted peak after what is already in use.
        pane = app.screen.query_one("#dev-gpu0", DevicePane)
        assert pane.plan_bytes is not None
        assert pane.plan_bytes.bytes == want.estimate.device_bytes
        assert "short" in plain(pane)


async def test_invalid_entries_are_flagged_inline_and_keep_the_estimate(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        before = shown_plan(app)
        cases = [
            ("batch", "two", "batch", "is not a whole number"),
            ("seq_len", "0", "seq_len", "outside 1..10,000,000"),
            ("offload", "optimizer", "offload", "needs ZeRO stage"),
            ("device", "RTX-9999", "device", "unknown device"),
            ("lora_targets", "q,x", "lora_targets", "is not all-linear"),
            ("model", "Qwen/Qwen2.5-7", "model", "did you mean"),
        ]
        for name, bad, field, message in cases:
            set_field(app, name, getattr(before, name))  # opens the GPU section's rows
            good = app.screen.query_one(f"#f-{name}")
            old = good.value  # type: ignore[attr-defined]
            set_field(app, name, bad)
            await settle(app, pilot)
            form = app.screen.query_one(PlanForm)
            assert message in (form.error(field) or ""), name
            assert message in plain(app.screen.query_one(f"#err-{field}", Static))
            assert app.screen.query_one(f"#f-{field}").has_class("-invalid")
            assert shown_plan(app) == before  # the last valid estimate stays
            assert app.screen.query_one(Breakdown).has_class("-stale")
            set_field(app, name, old)
            await settle(app, pilot)
            assert form.error(field) is None and not app.screen.query(f"#err-{field}")
            assert not app.screen.query_one(Breakdown).has_class("-stale")


async def test_plan_switching_keys(demo_app: Callable[..., TrainmemApp]) -> None:
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("ctrl+n")  # a copy to edit
        await pilot.pause()
        assert len(app.state.workspace.plans) == 2 and app.state.workspace.selected == 1
        set_field(app, "batch", 8)
        await pilot.pause()
        await pilot.press("f5")
        await pilot.pause()
        assert shown_plan(app).batch == 2
        await pilot.press("f6")
        await pilot.pause()
        assert shown_plan(app).batch == 8
        await pilot.press("ctrl+r")
        await pilot.pause()
        assert shown_plan(app) == Plan().validated()


async def test_help_and_command_palette_list_the_actions(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    app = demo_app()
    async with app.run_test(size=(80, 24)) as pilot:
        await settle(app, pilot)
        titles = {c.title for c in app.get_system_commands(app.screen)}
        assert {"Copy", "Next", "Compare", "Monitor", "Save", "Open", "Help", "Quit"} <= titles
        await pilot.press("f1")
        await pilot.pause()
        text = " ".join(plain(s) for s in app.screen.query(Static))
        assert "Export the comparison as Markdown" in text and "Forget observed peaks" in text
        await pilot.press("escape")
        await pilot.pause()
        assert isinstance(app.screen, PlanScreen)


async def test_pick_a_model_from_the_palette(demo_app: Callable[..., TrainmemApp]) -> None:
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        await pilot.press("ctrl+l")
        await settle(app, pilot)
        await pilot.press(*"llama-3.1-8b")
        await settle(app, pilot)
        await pilot.press("enter")
        await settle(app, pilot)
        assert shown_plan(app).model == "meta-llama/Llama-3.1-8B"


async def test_models_in_the_local_cache_complete_and_resolve_off_the_ui_thread(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    import json
    import os
    from pathlib import Path

    from trainmem.sources import catalog

    repo = Path(os.environ["HF_HUB_CACHE"]) / "models--acme--tiny-lm"
    snapshot_dir = repo / "snapshots" / "a1"
    snapshot_dir.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("a1")  # huggingface_hub's layout: refs name snapshots
    small = catalog.find("Qwen/Qwen2.5-0.5B")
    assert small is not None
    (snapshot_dir / "config.json").write_text(json.dumps(small.config))
    app = demo_app(scan_hf_cache=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        assert "acme/tiny-lm" not in app.state.model_names()  # read when first needed
        set_field(app, "model", "acme/t")
        await settle(app, pilot)
        assert "acme/tiny-lm" in app.state.model_names()
        form = app.screen.query_one(PlanForm)
        assert await form.model_suggester.get_suggestion("acme/t") == "acme/tiny-lm"
        set_field(app, "model", "acme/tiny-lm")
        await settle(app, pilot)
        assert shown_plan(app).model == "acme/tiny-lm"
        assert app.screen.report is not None  # type: ignore[attr-defined]
        assert app.screen.report.estimate.model.source == "hf-cache"  # type: ignore[attr-defined]


async def test_the_gpu_section_mounts_its_rows_when_opened(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        form = app.screen.query_one(PlanForm)
        assert not app.screen.query("#f-gpus")  # one-GPU plan: the section stays closed
        assert form.read()[0]["gpus"] == 1  # read from the plan for rows not mounted
        await pilot.click("#gpus CollapsibleTitle")
        await settle(app, pilot)
        assert app.screen.query_one("#f-gpus", Input).value == "1"
        set_field(app, "gpus", 8)
        await settle(app, pilot)
        assert shown_plan(app).gpus == 8


async def test_a_multi_gpu_plan_opens_with_the_gpu_section_open(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    from trainmem.sources.plan_files import NamedPlan, PlanSet

    plans = PlanSet((NamedPlan("", Plan(gpus=8, strategy="fsdp"), auto=True),))
    app = demo_app(plan_set=plans)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        assert not app.screen.query_one("#gpus", Collapsible).collapsed
        assert app.screen.query_one("#f-gpus", Input).value == "8"
        assert shown_plan(app).strategy == "fsdp"


async def test_a_plan_only_the_simulation_refuses_is_flagged_on_its_field(
    demo_app: Callable[..., TrainmemApp],
) -> None:
    # valid field by field, but one tensor of its step is over 1 EiB: the worker's PlanError
    # was dropped (Textual does not bubble a screen worker's state) and "simulating..." and
    # "Working out what fits..." stayed for good
    app = demo_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        for name, value in (("seq_len", 10_000_000), ("batch", 4096), ("attn", "eager")):
            set_field(app, name, value)
            await settle(app, pilot)
        form = app.screen.query_one(PlanForm)
        assert "PyTorch refuses any allocation of 1 EiB" in (form.error("seq_len") or "")
        assert app.screen.query_one(Breakdown).has_class("-stale")
        assert not app.screen.query_one("#whatif", Static).display
        peaks = str(app.screen.query_one("#peaks", Static).render())
        assert "simulating" not in peaks and "not simulated" in peaks
        assert "quick figures" in str(app.screen.query_one(Breakdown).border_subtitle)
