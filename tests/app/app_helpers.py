"""Helpers shared by the dashboard tests."""

from __future__ import annotations

import asyncio
import io
from typing import Any

from rich.console import Console
from textual.app import App
from textual.pilot import Pilot
from textual.worker import WorkerCancelled


async def settle(app: App[Any], pilot: Pilot[Any]) -> None:
    """Let messages, thread workers (what-if, file I/O) and the repaint they cause finish.

    A worker the app cancels meanwhile (a solve a newer keystroke replaced) is what the app
    should do, not a failure; a worker that raised still fails the test."""
    await pilot.pause()
    results = await asyncio.gather(*(w.wait() for w in app.workers), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException) and not isinstance(result, WorkerCancelled):
            raise result
    await pilot.pause()


def plain(widget: Any) -> str:
    """What a Static or a render()-ing widget shows, as plain text (no styles, no wrapping)."""
    renderable = widget.content if hasattr(widget, "content") else widget.render()
    console = Console(width=300, file=io.StringIO(), no_color=True, legacy_windows=False)
    with console.capture() as capture:
        console.print(renderable)
    return capture.get()


def screen_lines(app: App[Any]) -> list[str]:
    """The terminal's text as the user sees it: one string per row, styles dropped (the
    same render ``App.export_screenshot`` records, exported as text)."""
    width, height = app.size
    console = Console(
        width=width,
        height=height,
        file=io.StringIO(),
        force_terminal=True,
        color_system="truecolor",
        record=True,
        legacy_windows=False,
        safe_box=False,
    )
    console.print(
        app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    )
    return console.export_text(styles=False).splitlines()
