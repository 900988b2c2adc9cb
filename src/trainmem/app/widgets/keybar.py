"""The footer: every active key binding that has a description, drawn as one line.

Textual's ``Footer`` is a widget per key and recomposes whenever focus moves; on the plan
view that was a fifth of the time to the first frame. This draws the same information from
``screen.active_bindings`` in one widget; a click on a key runs its action, as in ``Footer``.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual import events
from textual.dom import DOMNode
from textual.screen import Screen
from textual.widget import Widget


class KeyBar(Widget):
    COMPONENT_CLASSES: ClassVar[set[str]] = {"keybar--key", "keybar--disabled"}
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        background: $footer-background;
        color: $footer-foreground;
    }
    KeyBar > .keybar--key {
        color: $footer-key-foreground;
        text-style: bold;
    }
    KeyBar > .keybar--disabled {
        color: $text-disabled;
    }
    """

    def __init__(self) -> None:
        super().__init__()
        self._spans: list[tuple[int, int, DOMNode, str]] = []  # x from, x to, node, action

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen[object]) -> None:
        if screen is self.screen:
            self.refresh()

    def render(self) -> Text:
        key_style = self.get_component_rich_style("keybar--key")
        off_style = self.get_component_rich_style("keybar--disabled")
        entries = []  # (active binding, key shown, cells)
        seen: set[str] = set()
        for active in self.screen.active_bindings.values():
            binding = active.binding
            if not binding.show or not binding.description or binding.action in seen:
                continue
            seen.add(binding.action)
            key = self.app.get_key_display(binding)
            entries.append((active, key, len(key) + len(binding.description) + 3))
        # The main keys (the App's MAIN_KEYS: help, the views, quit) always have their place;
        # the others follow in order while they fit, whole (F1 lists them all).
        main = set(getattr(self.app, "MAIN_KEYS", ()))
        room = self.size.width - sum(c for a, _, c in entries if a.binding.id in main)
        shown = []
        for active, key, cells in entries:
            if active.binding.id not in main:
                if cells > room:
                    continue
                room -= cells
            shown.append((active, key))
        out = Text(no_wrap=True, overflow="crop")
        self._spans = []
        for active, key in shown:
            start = out.cell_len
            out.append(" ")
            out.append(key, style=key_style)
            description = f" {active.binding.description} "
            out.append(description, style="" if active.enabled else off_style)
            self._spans.append((start, out.cell_len, active.node, active.binding.action))
        palette = " ^p palette "
        pad = self.size.width - out.cell_len - len(palette)
        if pad >= 1:
            out.append(" " * pad)
            start = out.cell_len
            out.append(" ")
            out.append("^p", style=key_style)
            out.append(" palette ")
            self._spans.append((start, out.cell_len, self.app, "command_palette"))
        return out

    async def on_click(self, event: events.Click) -> None:
        for start, end, node, action in self._spans:
            if start <= event.x < end:
                await self.app.run_action(action, node)
                return
