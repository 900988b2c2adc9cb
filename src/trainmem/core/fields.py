"""How a plan field is declared: one ``plan_field(...)`` per field of ``Plan`` carries
everything the front ends need (type or choices, default, help, flag, form label and widget,
range, the methods it applies to). The CLI parser, the dashboard form, plan files, JSON and
the measurement harness are all derived from these declarations.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, Literal

from trainmem.core.errors import PlanError
from trainmem.core.text import has_controls
from trainmem.core.units import NumberError, checked_number, range_text, shown

MAX_TEXT = 4096  # characters in a text field: a model path, a module list

Kind = Literal["text", "int", "float", "choice", "bool"]


class FieldSpec:
    """One plan field's declaration. ``name`` and ``default`` are filled in from the dataclass
    field it is attached to. (A plain class: dataclasses cost start-up time.)"""

    __slots__ = (
        "advanced",
        "applies",
        "bool_words",
        "choices",
        "default",
        "help",
        "high",
        "kind",
        "label",
        "low",
        "low_open",
        "name",
        "section",
    )

    def __init__(
        self,
        kind: Kind,
        label: str,
        help: str,
        *,
        choices: tuple[Any, ...] = (),
        bool_words: tuple[str, str] = ("on", "off"),
        low: float | None = None,
        high: float | None = None,
        low_open: bool = False,
        advanced: bool = False,
        section: str = "",
        applies: Callable[[Any], bool] | None = None,
    ) -> None:
        self.kind = kind
        self.label = label
        self.help = help
        self.choices = choices
        self.bool_words = bool_words  # (true, false) as the form and the table show them
        self.low = low
        self.high = high
        self.advanced = advanced
        self.section = section  # a group of advanced fields the form shows apart ("" for none)
        self.applies = applies  # plan -> whether this field matters to it (None: always)
        self.name = ""
        self.default: Any = None
        self.low_open = low_open  # the range excludes ``low`` itself

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def key(self) -> str:
        """The key in plan files and JSON."""
        return self.name

    def options(self) -> tuple[tuple[str, Any], ...]:
        """(shown text, value) for a choice or a bool field."""
        if self.kind == "bool":
            return ((self.bool_words[0], True), (self.bool_words[1], False))
        return tuple((str(c), c) for c in self.choices)

    def format(self, value: Any) -> str:
        """The value as typed in the form or shown in a table."""
        if self.kind == "bool":
            return self.bool_words[0] if value else self.bool_words[1]
        if self.kind == "float":
            return f"{value:g}"
        return str(value)

    def parse(self, text: str) -> Any:
        """A value of this field from typed text (the form, a flag); ValueError with a short
        reason when it is not one. Only the type is read here: ``check`` judges the value."""
        text = text.strip()
        if self.kind == "int":
            cleaned = text.replace(",", "").replace("_", "")  # 4,096 and 4_096
            digits = cleaned[1:] if cleaned[:1] in ("+", "-") else cleaned
            if not digits.isdigit():
                raise ValueError(f"{shown(text) if text else 'empty'} is not a whole number")
            return checked_number(cleaned, whole=True)  # 400 digits: one line, no int()
        if self.kind == "float":
            return float(checked_number(text))  # inf, nan, 1e400 refused
        return text

    def range_text(self) -> str:
        return range_text(self.low, self.high, self.low_open)

    def check(self, value: Any) -> Any:
        """The value checked against the declaration (type, choices, range) and normalised
        (an int where a float is declared becomes a float); PlanError names the field."""
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise PlanError(self.name, f"{shown(value)} is not true or false")
            return value
        if self.kind == "choice":
            if isinstance(value, (bool, dict, list)) or value not in self.choices:
                listed = ", ".join(str(c) for c in self.choices)
                raise PlanError(self.name, f"{shown(value)} is not one of {listed}")
            return value
        if self.kind == "text":
            if not isinstance(value, str):
                raise PlanError(self.name, f"{shown(value)} is not text")
            if len(value) > MAX_TEXT:
                raise PlanError(self.name, f"is longer than {MAX_TEXT:,} characters")
            if has_controls(value):  # no model id, path or list holds one; a terminal acts on it
                raise PlanError(self.name, f"{shown(value)} holds a control character")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PlanError(self.name, f"{shown(value)} is not a number")
        if self.kind == "int" and not isinstance(value, int):
            raise PlanError(self.name, f"{shown(value)} is not a whole number")
        try:
            number = checked_number(
                value,
                whole=self.kind == "int",
                low=self.low,
                high=self.high,
                low_open=self.low_open,
            )
        except NumberError as exc:
            raise PlanError(self.name, str(exc)) from None
        return number if self.kind == "int" else float(number)


def plan_field(default: Any, spec: FieldSpec) -> Any:
    """A dataclass field of ``Plan`` declared by ``spec``."""
    return dataclasses.field(default=default, metadata={"spec": spec})


def field_specs(cls: type) -> tuple[FieldSpec, ...]:
    """The declarations of a dataclass built with ``plan_field``, in field order."""
    out = []
    for f in dataclasses.fields(cls):
        spec: FieldSpec = f.metadata["spec"]
        spec.name, spec.default = f.name, f.default
        out.append(spec)
    return tuple(out)
