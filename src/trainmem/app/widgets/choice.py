"""A one-line choice among a few values: ←/→ (or space) step through them, a click steps too.

The plan form has nine of these. A ``Select`` is five widgets with an overlay list each; this is
one widget, which keeps the first frame fast and reads the same with NO_COLOR (``◂ lora ▸``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from trainmem.app.widgets.keys import run_own_binding


class Choice(Widget, can_focus=True):
    DEFAULT_CSS = """
    Choice {
        height: auto;
        width: 1fr;
        color: $text;
    }
    Choice:focus {
        background: $boost;
        text-style: bold;
    }
    Choice.-invalid {
        background: $error 30%;
    }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "step(-1)", "Previous", show=False),
        Binding("right,space", "step(1)", "Next", show=False),
    ]

    value: reactive[Any] = reactive(None, init=False)

    class Changed(Message):
        def __init__(self, choice: Choice, value: Any) -> None:
            super().__init__()
            self.choice = choice
            self.value = value

        @property
        def control(self) -> Choice:
            return self.choice

    def __init__(
        self,
        options: Sequence[tuple[str, Any]],
        value: Any,
        *,
        label: str = "",
        label_width: int = 0,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(id=id, classes=classes)
        self.options = list(options)
        self.label = label
        self.label_width = label_width
        self.set_reactive(Choice.value, value)

    def _index(self) -> int:
        return next((i for i, (_, v) in enumerate(self.options) if v == self.value), 0)

    def action_step(self, step: int) -> None:
        self.value = self.options[(self._index() + step) % len(self.options)][1]

    async def _on_key(self, event: events.Key) -> None:
        # ←/→/space run here, in typing order (see app.widgets.keys).
        if not await run_own_binding(self, event):
            await super()._on_key(event)

    def on_click(self, event: events.Click) -> None:
        # The left arrow steps back, anywhere else steps on.
        self.action_step(-1 if event.x <= self.label_width + 1 else 1)

    def watch_value(self, value: Any) -> None:
        self.post_message(self.Changed(self, value))

    def _label_line(self) -> bool:
        """A label too long for its column gets a line of its own, the control under it
        (as a long label beside an Input wraps), rather than running into the control."""
        return len(self.label) >= self.label_width > 0

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        # One line (two with a long label), however narrow the grid cell it is measured in.
        return 2 if self._label_line() else 1

    def render(self) -> Text:
        label = next((text for text, v in self.options if v == self.value), str(self.value))
        out = Text(no_wrap=True, overflow="ellipsis")
        if self._label_line():
            out.append(self.label + "\n", style="dim")
            out.append(" " * self.label_width)
        elif self.label:  # its own label: one widget per field instead of two
            out.append(self.label.ljust(self.label_width), style="dim")
        out.append("◂ ", style="dim")
        out.append(label)
        out.append(" ▸", style="dim")
        return out
