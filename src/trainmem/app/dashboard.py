"""What the screens and the command palette use of the App, as a type: trainmem.app.app's
TrainmemApp provides it. They are typed against this, not the App class, so that no screen
imports the module that imports every screen (tests/test_layers.py checks there is no
import circle, type-only imports included)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from textual.binding import Binding

    from trainmem.app.state import DashboardState
    from trainmem.planner.report import Report


class Dashboard(Protocol):
    state: DashboardState  # everything the screens share
    loading_text: str  # progress of a plans file read in the background ("" when none)

    def publish_report(self, report: Report) -> None: ...
    def want_model_list(self) -> None: ...
    def watch_run_log(self, path: Path) -> None: ...
    def typed_path(self, text: str | None) -> Path | None: ...
    def on_worker_state_changed(self, event: Any) -> None: ...

    # Textual's App, as the screens call it
    def push_screen(self, screen: Any, callback: Callable[[Any], Any] | None = None) -> Any: ...
    def switch_mode(self, mode: str) -> Any: ...
    def call_from_thread(self, callback: Callable[..., Any], *args: Any, **kwargs: Any) -> Any: ...
    def get_key_display(self, binding: Binding) -> str: ...
    def notify(self, message: str, **kwargs: Any) -> None: ...
