"""Keys handled in the order they were typed.

Textual (8.2, widgets/_input.py ``Input._on_key``) inserts a printable key in the widget's
own message queue, but leaves a bound key (backspace, delete, the arrows, ctrl+u) to bubble
up through every ancestor's queue to the App, which runs the binding when the event gets
there (app.py ``App._on_key``). On the plan view the screen's queue is busy estimating the
last edit, so a character typed right after a backspace was inserted before the backspace
ran: ``⌫⌫⌫⌫4096`` over "2048" gave "096", and a burst into the model field lost its first
characters (textual#6605). Running the widget's own bindings in its own queue, as each key
arrives, keeps the order; keys bound further up (Tab, F2-F4) are priority bindings of the
App for the same reason (``TrainmemApp.BINDINGS``).
"""

from __future__ import annotations

from textual import events
from textual.widget import Widget


async def run_own_binding(widget: Widget, event: events.Key) -> bool:
    """Run ``widget``'s own (non-priority) binding for ``event`` now, as the App would have
    once the key had bubbled to it; True (and the event stopped) if one ran."""
    for binding in widget._bindings.key_to_bindings.get(event.key, ()):
        if not binding.priority and await widget.app.run_action(binding.action, widget):
            event.stop()
            event.prevent_default()
            return True
    return False
