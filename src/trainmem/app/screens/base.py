"""What the three main screens (plan, compare, monitor) share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen

if TYPE_CHECKING:
    from textual.worker import Worker

    from trainmem.app.dashboard import Dashboard


class AppScreen(Screen[None]):
    app: Dashboard  # type: ignore[assignment]  (the App, typed by what screens use)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # Textual posts a worker's state to the node that started it and does not bubble it:
        # the screens' workers (estimates, searches, exports) reach the app's one handler
        self.app.on_worker_state_changed(event)
