"""The keys, read from the bindings themselves so the list never drifts from the code."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

if TYPE_CHECKING:
    from textual.dom import DOMNode

INTRO = (
    "Edit any field and the estimate updates at once; a field that cannot be used is marked "
    "and explained under it while the last good estimate stays. Choices (◂ lora ▸) change "
    "with ←/→, space or a click. The device panes mark the plan's predicted peak (┃, or ▶ "
    "when it runs past the end) after what is already in use. Ctrl+P opens the command "
    "palette: every action below is there too."
)


class HelpScreen(ModalScreen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "dismiss", "Close", id="help.close")
    ]

    def compose(self) -> ComposeResult:
        from trainmem.app.screens.compare import CompareScreen
        from trainmem.app.screens.monitor import MonitorScreen
        from trainmem.app.screens.plan import PlanScreen

        table = Table(box=None, show_header=False, padding=(0, 2, 0, 0), expand=True)
        table.add_column(style="bold", no_wrap=True)
        table.add_column()
        groups: list[tuple[str, type[DOMNode]]] = [
            ("Everywhere", type(self.app)),
            ("Plan (F2)", PlanScreen),
            ("Compare (F3)", CompareScreen),
            ("Monitor (F4)", MonitorScreen),
        ]
        for title, node in groups:
            table.add_row(Text(title, style="underline"), "")
            for binding in node.BINDINGS:
                if isinstance(binding, Binding) and binding.description:
                    # The keys the user's keymap gives it, else its own.
                    key = getattr(self.app, "keymap", {}).get(binding.id, binding.key)
                    keys = ", ".join(
                        self.app.get_key_display(Binding(k, "")) for k in key.split(",")
                    )
                    table.add_row(keys, binding.tooltip or binding.description)
            table.add_row("", "")
        table.add_row("Ctrl+P", "command palette")
        table.add_row("Tab / Shift+Tab", "next / previous field")
        table.add_row("← / →, space", "change a choice")
        table.add_row("→ or End", "accept a model / device completion")
        table.add_row("Enter", "in Compare: edit the highlighted plan")
        with VerticalScroll(id="help"):
            yield Static(INTRO, classes="hint")
            yield Static(table)

    def on_mount(self) -> None:
        self.query_one("#help").border_title = "Keys"
        self.query_one("#help").border_subtitle = "Escape closes"
