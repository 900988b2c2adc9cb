"""Helpers shared by the dashboard tests."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from textual.app import App
from textual.pilot import Pilot


async def settle(app: App[Any], pilot: Pilot[Any]) -> None:
    """Let messages, thread workers (what-if, file I/O) and the repaint they cause finish."""
    await pilot.pause()
    await app.workers.wait_for_complete()
    await pilot.pause()


def plain(widget: Any) -> str:
    """What a Static or a render()-ing widget shows, as plain text (no styles, no wrapping)."""
    renderable = widget.content if hasattr(widget, "content") else widget.render()
    console = Console(width=300, file=io.StringIO(), no_color=True, legacy_windows=False)
    with console.capture() as capture:
        console.print(renderable)
    return capture.get()
