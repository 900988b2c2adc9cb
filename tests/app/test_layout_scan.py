"""Every screen at 80x24, 100x30 and 120x40, read as the user sees it: no word cut inside
itself, no label running into its control, and the key bar always shows the main keys.

The screens are rendered to text on the demo machine (the snapshot tests' fixture), so a
layout change anywhere is scanned at once, however the text got there.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from app_helpers import screen_lines, settle
from textual.widgets import Collapsible

from trainmem.app import TrainmemApp
from trainmem.app.fixture import demo_plan_set
from trainmem.app.widgets.devices import plan_line
from trainmem.app.widgets.plan_form import SECTIONS, PlanForm
from trainmem.core.plan import PLAN_FIELDS

SIZES = [pytest.param(s, id=f"{s[0]}x{s[1]}") for s in ((80, 24), (100, 30), (120, 40))]
# view -> what is done first: the keys pressed, or "sections" (every section of the form
# opened and the form read a page at a time, so every label is on screen once).
VIEWS = {
    "plan": (),
    "plan-sections": ("sections",),
    "compare": ("f3",),
    "monitor": ("f4",),
    "help": ("f1",),
    "help-on-compare": ("f3", "f1"),
}
# A letter then "…" is a word cut inside itself ("spa…"), except these whole words.
WHOLE = {"config…", "devices…"}
CUT = re.compile(r"\S*[^\W\d_]…")
MAIN_KEYS = ("f1", "f2", "f3", "f4", "^q")  # as the key bar writes them


async def _screens(app: TrainmemApp, pilot, steps: tuple[str, ...]) -> list[list[str]]:
    """Do ``steps``, then the screen's text; with "sections", one text per page of the
    form scrolled through, so every row of it is read."""
    await settle(app, pilot)
    for step in steps:
        if step != "sections":
            await pilot.press(step)
            await settle(app, pilot)
            continue
        for key in SECTIONS:
            app.screen.query_one(f"#{key}", Collapsible).collapsed = False
        await settle(app, pilot)
        form = app.screen.query_one(PlanForm)
        pages = []
        for y in range(0, int(form.max_scroll_y) + form.size.height, form.size.height):
            form.scroll_to(y=y, animate=False)
            await settle(app, pilot)
            pages.append(screen_lines(app))
        return pages
    return [screen_lines(app)]


def problems(lines: list[str], form_width: int) -> list[str]:
    found = []
    for row, line in enumerate(lines):
        for word in CUT.findall(line):
            if word not in WHOLE:
                found.append(f"row {row}: a word cut inside itself: {word!r} in {line!r}")
        if re.search(r"\w◂", line):
            found.append(f"row {row}: a label runs into its choice: {line!r}")
        form = line[:form_width]  # a label beside an Input: never touching its value
        for field in PLAN_FIELDS:
            if re.search(rf"(^|\s){re.escape(field.label)}[^\s│]", form):
                found.append(f"row {row}: label {field.label!r} touches its field: {line!r}")
    keybar = lines[-1]
    hidden = [k for k in MAIN_KEYS if not re.search(rf"(^|\s){re.escape(k)} ", keybar)]
    if hidden:
        found.append(f"the key bar hides {hidden}: {keybar!r}")
    return found


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("view", VIEWS)
async def test_every_screen_reads_whole(
    demo_app: Callable[..., TrainmemApp], view: str, size: tuple[int, int]
):
    app = demo_app(plan_set=demo_plan_set())
    async with app.run_test(size=size) as pilot:
        screens = await _screens(app, pilot, VIEWS[view])
    form_width = 40 if view.startswith("plan") else 0  # the form's labels: the plan view's
    for lines in screens:
        assert len(lines) == size[1]
        assert problems(lines, form_width) == [], "\n".join(lines)


def test_the_scan_finds_what_it_looks_for():
    """The checks themselves, on the lines this issue was filed with."""
    bar = " ^n Copy  f5 Prev  f6 Next  ^q Quit  f1 Help  f2 Plan  f3 Compare  f4 Monitor "
    assert problems(["│ plan ┃ 24.1 GB → ! tight 0.7 GB spa… │", bar], 40)
    assert problems(["│ Double quant◂ on ▸ │", bar], 40)
    assert problems(["│ Reduce bucket500000000 │", bar], 40)
    assert problems(["│ Model      Qwen/Qwen2.5-7B │", " ^n Copy  f5 Prev  ^q Quit  f1 Help "], 40)
    assert problems(["│ reading model config… │", bar], 40) == []
    assert problems(["│ Qwen2.5-7B … (2) │ Double quant ◂ on ▸", bar], 40) == []


@pytest.mark.parametrize("verdict", ["fits", "tight", "too big"])
def test_the_device_panes_plan_line_drops_words_to_fit(verdict: str):
    """The pane's plan line was cut inside a word in a narrow pane ("0.7 GB spa…")."""
    headroom = -16_100_000_000 if verdict == "too big" else 700_000_000
    full = plan_line(24_100_000_000, verdict, headroom, "", 80).plain
    for width in range(10, 60):
        line = plan_line(24_100_000_000, verdict, headroom, "", width).plain
        assert len(line) <= max(width, len("✗ 16.1 GB short")), (width, line)
        assert set(line.split()) <= set(full.split()), (width, line)  # whole words only
        assert ("short" if verdict == "too big" else verdict) in line.split()  # kept whole
