"""The one error type bad input raises: it names the field and what is accepted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

T = TypeVar("T")


class PlanError(ValueError):
    """Bad user input. ``str(err)`` is the one-line message shown to the user."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


def record_named(records: Mapping[str, T], field: str, name: str) -> T:
    """The record of ``name`` (a method, a stack); a PlanError naming the known ones."""
    record = records.get(name)
    if record is None:
        raise PlanError(field, f"{name!r} is not one of {', '.join(records)}")
    return record
