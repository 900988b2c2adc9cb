"""How a plan field is declared: one ``plan_field(...)`` per field of ``Plan`` carries
everything the front ends need (type or choices, default, help, flag, form label and widget,
range, the methods it applies to). The CLI parser, the dashboard form, plan files, JSON and
the measurement harness are all derived from these declarations.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any, Literal

from trainmem.core.errors import PlanError

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
                raise ValueError(f"{text or 'empty'!r} is not a whole number")
            return int(cleaned)
        if self.kind == "float":
            try:
                value = float(text)
            except ValueError:
                raise ValueError(f"{text or 'empty'!r} is not a number") from None
            if not math.isfinite(value):
                raise ValueError(f"{text!r} is not a finite number")
            return value
        return text

    def range_text(self) -> str:
        low = "" if self.low is None else _number(self.low)
        high = "" if self.high is None else _number(self.high)
        if self.low_open:
            return f"above {low}" + (f" and at most {high}" if high else "")
        return f"{low}..{high}"

    def check(self, value: Any) -> Any:
        """The value checked against the declaration (type, choices, range) and normalised
        (an int where a float is declared becomes a float); PlanError names the field."""
        if self.kind == "bool":
            if not isinstance(value, bool):
                raise PlanError(self.name, f"{value!r} is not true or false")
            return value
        if self.kind == "choice":
            if isinstance(value, bool) or value not in self.choices:
                shown = ", ".join(str(c) for c in self.choices)
                raise PlanError(self.name, f"{value!r} is not one of {shown}")
            return value
        if self.kind == "text":
            if not isinstance(value, str):
                raise PlanError(self.name, f"{value!r} is not text")
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise PlanError(self.name, f"{value!r} is not a number")
        if self.kind == "int":
            if not isinstance(value, int):
                raise PlanError(self.name, f"{value!r} is not a whole number")
        else:
            if not math.isfinite(value):
                raise PlanError(self.name, f"{value!r} is not a finite number")
            value = float(value)
        too_low = self.low is not None and (
            value <= self.low if self.low_open else value < self.low
        )
        too_high = self.high is not None and value > self.high
        if too_low or too_high:
            raise PlanError(self.name, f"{_number(value)} is outside {self.range_text()}")
        return value


def _number(value: float) -> str:
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


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
