"""The one error type bad input raises: it names the field and what is accepted."""

from __future__ import annotations


class PlanError(ValueError):
    """Bad user input. ``str(err)`` is the one-line message shown to the user."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")
