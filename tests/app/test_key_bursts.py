"""Typing never loses or reorders a key, at any speed.

Keys are put into the app as the terminal driver does (``driver.send_message`` from its input
thread) and, unlike ``pilot.press``, without waiting for each one to be handled: a burst at
5-50 ms a key, as keys arrive over SSH, while the screen is still estimating the last edit.
Textual runs an Input's bound keys (backspace...) only once they have bubbled up to the App
(textual#6605): ``⌫⌫⌫⌫4096`` over "2048" gave "096" and the plan was re-estimated at 96.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from app_helpers import settle
from textual import events
from textual.keys import _character_to_key
from textual.widgets import Collapsible, Input

from trainmem.app import TrainmemApp
from trainmem.app.widgets.plan_form import SECTIONS
from trainmem.core.plan import PLAN_FIELDS

DELAYS = [pytest.param(s, id=f"{round(s * 1000)}ms") for s in (0.005, 0.02, 0.05)]
# Every text field, the slow test (about a minute a speed): the fastest and the slowest burst,
# which keeps the suite under its 10 minutes; the cross-field burst runs at all three.
EVERY_FIELD_DELAYS = [DELAYS[0], DELAYS[-1]]

# What is typed into each text field: valid together with the default plan, so the plan
# must end up holding exactly this.
TYPED = {
    "model": "meta-llama/Llama-3.2-1B",
    "seq_len": "4096",
    "batch": "3",
    "lora_rank": "32",
    "lora_alpha": "64",
    "lora_targets": "q,v",
    "lora_dropout": "0.05",
    "modules_to_save": "lm_head",
    "gpus": "2",
    "nodes": "2",
    "reduce_bucket": "400000000",
    "prefetch_bucket": "40000000",
    "max_live_params": "900000000",
    "persistence_threshold": "90000",
    "device": "24GB",
    "alloc_conf": "expandable_segments:True",
    "mlx_num_layers": "8",
}
TEXT_FIELDS = [f for f in PLAN_FIELDS if f.kind not in ("choice", "bool")]


def test_every_text_field_is_typed_into():
    assert set(TYPED) == {f.name for f in TEXT_FIELDS}


def _key(name: str) -> events.Key:
    """The event the driver makes for one key: a character or a named key."""
    if len(name) == 1:
        return events.Key(name if name.isalnum() else _character_to_key(name), name)
    return events.Key(name, None)


async def burst(app: TrainmemApp, keys: list[str], delay: float) -> None:
    """Send ``keys`` as a terminal would, ``delay`` seconds apart, not waiting for the app."""
    driver = app._driver
    assert driver is not None
    for name in keys:
        event = _key(name)
        event.set_sender(app)
        driver.send_message(event)
        await asyncio.sleep(delay)


def retype(old: str, new: str) -> list[str]:
    """Go to the end, erase ``old`` with backspaces, type ``new``."""
    return ["end", *["backspace"] * len(old), *new]


@pytest.mark.parametrize("delay", EVERY_FIELD_DELAYS)
async def test_bursts_into_every_text_field(demo_app: Callable[..., TrainmemApp], delay: float):
    app = demo_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await pilot.pause()
        model = app.screen.query_one("#f-model", Input)
        assert app.focused is model  # the first key lands there
        # The first edit, at once: the default model is still being read, and the first
        # model edit starts the cache's model list and a lookup per keystroke.
        await burst(app, retype(model.value, TYPED["model"]), delay)
        await settle(app, pilot)
        for key in SECTIONS:  # the sections' rows are mounted when first opened
            app.screen.query_one(f"#{key}", Collapsible).collapsed = False
        await settle(app, pilot)
        for field in TEXT_FIELDS[1:]:
            widget = app.screen.query_one(f"#f-{field.name}", Input)
            widget.focus()
            await pilot.pause()
            await burst(app, retype(widget.value, TYPED[field.name]), delay)
        await settle(app, pilot)
        await settle(app, pilot)  # the last model lookup, then its estimate
        plan = app.state.workspace.current.plan
        for field in TEXT_FIELDS:
            shown = app.screen.query_one(f"#f-{field.name}", Input).value
            assert shown == TYPED[field.name], field.name
            assert getattr(plan, field.name) == field.parse(TYPED[field.name]), field.name
        assert app.screen.report is not None and app.screen.report.estimate.plan == plan


@pytest.mark.parametrize("delay", DELAYS)
async def test_a_burst_across_fields_and_choices(
    demo_app: Callable[..., TrainmemApp], delay: float
):
    """Tab and a choice's ←/→ in a burst: each key acts where the keys before it left
    focus, so "4096⇥3" fills two fields and "⇥→" steps the choice after them."""
    app = demo_app()
    async with app.run_test(size=(120, 60)) as pilot:
        await settle(app, pilot)
        seq = app.screen.query_one("#f-seq_len", Input)
        seq.focus()
        await pilot.pause()
        # seq_len, batch, then Grad ckpt (a choice): on -> off
        keys = [*retype(seq.value, "4096"), "tab", *retype("2", "3"), "tab", "right"]
        await burst(app, keys, delay)
        await settle(app, pilot)
        plan = app.state.workspace.current.plan
        assert (plan.seq_len, plan.batch, plan.grad_ckpt) == (4096, 3, False)
        assert app.focused is app.screen.query_one("#f-grad_ckpt")
