"""The plan form: one compact row per plan field, with its error shown inline under it.

The form only parses what was typed (a number is a number); the plan's own rules
(``Plan.validated``), the model and the device are checked by the screen, which hands any
``PlanError`` back through ``show_errors`` so the message lands next to the field it names.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from textual import events
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.suggester import Suggester
from textual.widgets import Collapsible, Input, Static

from trainmem.app.widgets.choice import Choice
from trainmem.app.widgets.keys import run_own_binding
from trainmem.core.fields import FieldSpec
from trainmem.core.plan import GPUS, PLAN_FIELDS, STACK, Plan

# One row per plan field, in declaration order: basic fields first, then "Advanced", then
# the sections declared with the fields ("Training stack", "GPUs and nodes"), whose rows are
# mounted when the section is first opened, or from the start when the plan sets one of
# them: most plans keep their defaults, and a row costs start-up time and memory.
FIELDS = PLAN_FIELDS
FIELD_NAMES = tuple(f.name for f in FIELDS)
SECTIONS = {STACK: "Training stack", GPUS: "GPUs and nodes"}
SECTION_FIELDS = {key: tuple(f for f in FIELDS if f.section == key) for key in SECTIONS}
LABEL_WIDTH = 13  # as grid-columns in app.tcss: "Double quant" and a space


class WordSuggester(Suggester):
    """Completes from a list, matching the start of the whole entry or of its part after
    ``/`` (so ``llama`` finds ``meta-llama/...`` and ``qwen2.5-7`` finds ``Qwen/Qwen2.5-7B``)."""

    def __init__(self, words: Iterable[str]) -> None:
        super().__init__(use_cache=False, case_sensitive=False)
        self.words: list[str] = list(words)

    async def get_suggestion(self, value: str) -> str | None:
        if not value:
            return None
        for word in self.words:
            low = word.lower()
            if low.startswith(value):
                return word
            tail = low.rpartition("/")[2]
            if tail.startswith(value) and "/" not in value:
                # Input only shows a suggestion that extends what was typed.
                return value + word[len(word) - len(tail) + len(value) :]
        return None


class FieldInput(Input):
    """The form's Input: compact from the start. Input's own default (not compact) would be
    switched after construction, restyling a widget that is not even mounted yet; the
    classes Input gives itself for this and for a valid value are passed in for the same
    reason (it has no validators, so every value is valid)."""

    compact = reactive(True, toggle_class="-textual-compact")

    def __init__(self, value: str, *, id: str, suggester: Suggester | None) -> None:
        super().__init__(
            value,
            compact=True,
            id=id,
            suggester=suggester,
            select_on_focus=False,
            classes="-textual-compact -valid",
        )

    async def _on_key(self, event: events.Key) -> None:
        # Backspace, the arrows, ctrl+u...: run here, in typing order (see app.widgets.keys).
        if not await run_own_binding(self, event):
            await super()._on_key(event)


class PlanForm(VerticalScroll, can_focus=False):
    """Edits a Plan. Posts ``PlanForm.Edited`` on every change. The form itself takes no
    focus, so the first key typed lands in the model field."""

    class Edited(Message):
        """Field ``name`` changed; ``PlanForm.read()`` gives the values."""

        def __init__(self, name: str) -> None:
            super().__init__()
            self.name = name

    def __init__(self, plan: Plan, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._plan = plan
        self.model_suggester = WordSuggester([])
        self.device_suggester = WordSuggester([])
        self.targets_suggester = WordSuggester(["all-linear", "attention", "linear", "q,k,v,o"])
        self._errors: dict[str, Static] = {}
        self._edited = False  # typed into since the last load()
        # Each Input's text as composed, loaded or last reported: an Input reports its value
        # once when it mounts, which is not an edit (and would re-estimate once per field).
        self._texts: dict[str, str] = {}
        self._inapplicable: set[str] = set()  # rows dimmed now
        self._mounted: set[str] = set()  # sections whose rows are mounted

    def compose(self) -> ComposeResult:
        for field in FIELDS:
            if not field.advanced:
                yield from self._row(field)
        with Collapsible(title="Advanced", collapsed=False, id="advanced"):
            for field in FIELDS:
                if field.advanced and not field.section:
                    yield from self._row(field)
        for key, title in SECTIONS.items():
            opened = _sets(self._plan, key)
            with Collapsible(title=title, collapsed=not opened, id=key):
                if opened:
                    self._mounted.add(key)
                    for field in SECTION_FIELDS[key]:
                        yield from self._row(field)

    def _row(self, field: FieldSpec) -> ComposeResult:
        """A label and its control, side by side in the form's two-column grid."""
        value = getattr(self._plan, field.name)
        fid = f"f-{field.name}"
        if field.kind in ("choice", "bool"):
            # Booleans read as words ("on"/"off"), not a tick drawn only in colour.
            yield Choice(
                list(field.options()),
                value,
                label=field.label,
                label_width=LABEL_WIDTH,
                id=fid,
                classes="span",
            )
            return
        yield Static(field.label, classes="field-label", markup=False, id=f"l-{field.name}")
        self._texts[fid] = field.format(value)
        suggester = {
            "model": self.model_suggester,
            "device": self.device_suggester,
            "lora_targets": self.targets_suggester,
        }.get(field.name)
        field_input = FieldInput(field.format(value), id=fid, suggester=suggester)
        # The app's choice (off by default; see TrainmemApp.__init__).
        field_input.cursor_blink = getattr(self.app, "cursor_blink", False)
        yield field_input

    def _shown(self) -> tuple[FieldSpec, ...]:
        """The fields with a row now (a section's once it was opened)."""
        return tuple(f for f in FIELDS if not f.section or f.section in self._mounted)

    def _open(self, key: str) -> None:
        """Open section ``key``, mounting its rows the first time."""
        section = self.query_one(f"#{key}", Collapsible)
        section.collapsed = False
        if key in self._mounted:
            return
        self._mounted.add(key)
        section.query_one(Collapsible.Contents).mount(
            *(w for field in SECTION_FIELDS[key] for w in self._row(field))
        )
        self.mark_applicable(self._plan, force=True)

    def on_collapsible_expanded(self, event: Collapsible.Expanded) -> None:
        if event.collapsible.id in SECTIONS:
            self._open(event.collapsible.id)

    # -- reading and writing ---------------------------------------------------------------

    def load(self, plan: Plan) -> None:
        """Show ``plan`` without posting Edited (e.g. another plan was selected)."""
        if plan == self._plan and not self._edited:
            return  # already on screen (the form was composed with it)
        self._edited = False
        self._plan = plan
        for key in SECTIONS:
            if key not in self._mounted and _sets(plan, key):
                self._open(key)
        with self.prevent(Input.Changed, Choice.Changed):
            for field in self._shown():
                widget = self.query_one(f"#f-{field.name}")
                value = getattr(plan, field.name)
                if isinstance(widget, Input):
                    widget.value = self._texts[widget.id or ""] = field.format(value)
                    widget.cursor_position = len(widget.value)
                elif isinstance(widget, Choice):
                    widget.value = value
        self.show_errors({})

    def read(self) -> tuple[dict[str, Any], dict[str, str]]:
        """The typed values (by Plan field) and the fields that did not parse."""
        values: dict[str, Any] = {}
        errors: dict[str, str] = {}
        for field in FIELDS:
            if field.section and field.section not in self._mounted:  # no row yet: as loaded
                values[field.name] = getattr(self._plan, field.name)
                continue
            widget = self.query_one(f"#f-{field.name}")
            if isinstance(widget, Input):
                try:
                    values[field.name] = field.parse(widget.value)
                except ValueError as exc:
                    errors[field.name] = str(exc)
            elif isinstance(widget, Choice):
                values[field.name] = widget.value
        return values, errors

    def show_errors(self, errors: dict[str, str]) -> None:
        """Put each message on the line under its field; clear the others. Error lines are
        mounted only when needed: most of the time there are none."""
        for key in SECTIONS:
            if any(f.name in errors for f in SECTION_FIELDS[key]):
                self._open(key)
        for field in self._shown():
            message = errors.get(field.name)
            control = self.query_one(f"#f-{field.name}")
            control.set_class(bool(message), "-invalid")
            shown = self._errors.get(field.name)
            if message and shown is None:
                shown = self._errors[field.name] = Static(
                    f"↳ {message}", id=f"err-{field.name}", classes="field-error", markup=False
                )
                control.parent.mount(shown, after=control)  # type: ignore[union-attr]
            elif message and shown is not None:
                shown.update(f"↳ {message}")
            elif shown is not None:
                del self._errors[field.name]
                shown.remove()
        if any(f.advanced and not f.section for f in FIELDS if f.name in errors):
            self.query_one("#advanced", Collapsible).collapsed = False

    def mark_applicable(self, plan: Plan, *, force: bool = False) -> None:
        """Dim the rows that do not apply to ``plan`` (LoRA fields on a full fine-tune):
        they stay editable, and keep their values for when the method changes back."""
        shown = self._shown()
        off = {f.name for f in shown if f.applies is not None and not f.applies(plan)}
        if off == self._inapplicable and not force:
            return  # most edits change no method: no widget to touch
        for field in shown:
            if not force and (field.name in off) == (field.name in self._inapplicable):
                continue
            self.query_one(f"#f-{field.name}").set_class(field.name in off, "-inapplicable")
            if field.kind not in ("choice", "bool"):
                self.query_one(f"#l-{field.name}").set_class(field.name in off, "-inapplicable")
        self._inapplicable = off

    def error(self, name: str) -> str | None:
        """The message shown under field ``name``, if any."""
        shown = self._errors.get(name)
        return str(shown.content)[2:] if shown is not None else None

    # -- events ------------------------------------------------------------------------------

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        key = event.input.id or ""
        if self._texts.get(key) == event.value:
            return  # not a change: the value it already had (e.g. reported on mount)
        self._texts[key] = event.value
        self._edited = True
        self.post_message(self.Edited(key.removeprefix("f-")))

    def on_choice_changed(self, event: Choice.Changed) -> None:
        event.stop()
        self._edited = True
        self.post_message(self.Edited((event.choice.id or "").removeprefix("f-")))


def _sets(plan: Plan, key: str) -> bool:
    """Whether ``plan`` sets a field of section ``key`` away from its default (the section
    then opens with its rows)."""
    return any(getattr(plan, f.name) != f.default for f in SECTION_FIELDS[key])
