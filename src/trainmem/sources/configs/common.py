"""What every training-config reader shares: the parsed document with the line of each key,
typed reads that fail as one line naming file, line and key, and the result, a ``ConfigPlan``.

A ``ConfigPlan`` holds plan-field values keyed by Plan field name and, for each, where it
came from: ``file:line key`` for a key of a file, ``<framework> default (<source file>:<line>,
<version>)`` for a key the file leaves out. Keys that change memory but that no plan field
expresses are kept by name in ``unmodelled``; keys that do not change memory are not
looked at.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainmem.core.errors import PlanError
from trainmem.core.stacks import stack_record
from trainmem.core.units import NumberError, checked_number, shown
from trainmem.sources import files
from trainmem.sources.files import show

FIELD = "--from"  # the PlanError field of every config error: the flag that named the file
Kind = Literal["training", "launcher"]  # a launcher file (DeepSpeed, accelerate) ranks lower


@dataclass(frozen=True)
class Doc:
    """One parsed config: its top-level mapping, the 1-based line of each dotted key (none
    for a command line) and how to name it in messages."""

    name: str
    data: Mapping[str, Any]
    lines: Mapping[str, int] = field(default_factory=dict)
    path: Path | None = None  # the file (paths it names: resolve_named)
    # Top-level keys that came from elsewhere (a command line over its --config file), and
    # the name to show for them.
    shown_as: Mapping[str, str] = field(default_factory=dict)
    command: bool = False  # keys are a command line's --options

    def origin(self, key: str) -> str:
        if self.command or key.split(".", 1)[0] in self.shown_as:
            return f"{self.where(key)} --{key}"
        return f"{self.where(key)} {key}"

    def where(self, key: str) -> str:
        name = self.shown_as.get(key.split(".", 1)[0])
        if name is not None:
            return name
        line = self.lines.get(key)
        return f"{self.name}:{line}" if line else self.name

    def error(self, key: str, message: str) -> PlanError:
        where = self.where(key)
        if where.startswith("--"):  # a command line's option: that flag names it, not --from
            return PlanError(where, f"--{key}: {message}")
        return PlanError(FIELD, f"{where}: {key}: {message}")

    def has(self, key: str) -> bool:
        return self.lookup(key) is not None

    def lookup(self, key: str) -> Any:
        """The value at a dotted key (``zero_optimization.stage``); None when absent."""
        value: Any = self.data
        for part in key.split("."):
            if not isinstance(value, Mapping) or part not in value:
                return None
            value = value[part]
        return value

    # Typed reads. Values from a command line are text, so text is converted as
    # HfArgumentParser would (transformers/hf_argparser.py string_to_bool).

    def valued(self, key: str) -> Any:
        """The value, where a key that needs one has one: a command line's bare ``--key``
        reads as True (a switch), which HfArgumentParser refuses for any field but a bool."""
        value = self.lookup(key)
        if value is True and (self.command or key.split(".", 1)[0] in self.shown_as):
            raise self.error(key, "is given without a value")
        return value

    def text(self, key: str) -> str | None:
        value = self.valued(key)
        if value is None:
            return None
        if isinstance(value, (dict, list)):
            raise self.error(key, f"{_shown(value)} is not text")
        return str(value).strip()

    def _numeral(self, key: str) -> Any:
        """The value, with a command line's digit groups (``1_000``) joined: the frameworks
        convert its text with Python's int() and float(), which read them (HfArgumentParser's
        type=int; PEP 515), where a file's text has none."""
        value = self.valued(key)
        if self.command and isinstance(value, str) and _GROUPED.fullmatch(value.strip()):
            return value.strip().replace("_", "")
        return value

    def integer(self, key: str) -> int | None:
        value = self._numeral(key)
        if value is None:
            return None
        try:  # 5e8 and "4" are whole numbers; 400 digits, inf and 1.5 are one line each
            return int(checked_number(value, whole=True))
        except NumberError as exc:
            raise self.error(key, str(exc)) from None

    def number(self, key: str) -> float | None:
        value = self._numeral(key)
        if value is None:
            return None
        try:
            return float(checked_number(value))
        except NumberError as exc:
            raise self.error(key, str(exc)) from None

    def flag(self, key: str) -> bool | None:
        value = self.lookup(key)
        if value is None or isinstance(value, bool):
            return value
        if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
            return value.strip().lower() in _TRUE
        raise self.error(key, f"{_shown(value)} is not true or false")

    def names(self, key: str) -> list[str] | None:
        """A list of names: a YAML/JSON list, or text separated by commas or spaces."""
        value = self.valued(key)
        if value is None:
            return None
        if isinstance(value, str):
            return [n for n in value.replace(",", " ").split() if n]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return [v.strip() for v in value if v.strip()]
        raise self.error(key, f"{_shown(value)} is not a list of names")


# A number written with PEP 515's digit groups: an underscore only between ASCII digits.
_DIGITS = r"[0-9]+(?:_[0-9]+)*"
_GROUPED = re.compile(
    rf"[+-]?(?:{_DIGITS}(?:\.(?:{_DIGITS})?)?|\.{_DIGITS})(?:[eE][+-]?{_DIGITS})?"
)
_TRUE = ("true", "yes", "t", "y", "1")
_FALSE = ("false", "no", "f", "n", "0")


def _shown(value: Any) -> str:
    return shown(value, 60)  # never repr: a YAML alias bomb is a billion-item list


@dataclass(frozen=True)
class ConfigPlan:
    """Plan-field values read from config files, with where each came from."""

    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    unmodelled: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    explicit: frozenset[str] = frozenset()  # fields set by a key, not a framework default
    kind: Kind = "training"

    def under(self, other: ConfigPlan) -> ConfigPlan:
        """This plan's values with ``other``'s on top where ``other`` ranks higher: a key
        beats a framework default, a training config beats a launcher file, and between
        equals the later file (``other``) wins, with a note when the two disagree."""
        values, origins = dict(self.values), dict(self.origins)
        notes = [*self.notes, *other.notes]
        explicit = set(self.explicit)
        for name, value in other.values.items():
            if name in values and _rank(self, name) > _rank(other, name):
                if name in other.explicit and values[name] != value:
                    notes.append(
                        f"{name}: {origins[name]} ({_shown(values[name])}) is used over "
                        f"{other.origins[name]} ({_shown(value)})"
                    )
                continue
            if name in self.explicit and name in other.explicit and values[name] != value:
                notes.append(
                    f"{name}: {other.origins[name]} ({_shown(value)}) is used over "
                    f"{origins[name]} ({_shown(values[name])})"
                )
            values[name], origins[name] = value, other.origins[name]
            if name in other.explicit:
                explicit.add(name)
        kind: Kind = "training" if "training" in (self.kind, other.kind) else "launcher"
        return ConfigPlan(
            values,
            origins,
            _unique((*self.unmodelled, *other.unmodelled)),
            _unique(notes),
            frozenset(explicit),
            kind,
        )


# How a reader opens a file its config names: (path, the origin that named it) -> its plan.
ReadFile = Callable[[Path, str], "ConfigPlan"]


def _rank(plan: ConfigPlan, name: str) -> int:
    return (2 if name in plan.explicit else 0) + (1 if plan.kind == "training" else 0)


def _unique(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


@dataclass
class Reading:
    """A ConfigPlan being built from one document."""

    doc: Doc
    framework: str  # "axolotl 067b021": named in the origin of each default
    kind: Kind = "training"
    values: dict[str, Any] = field(default_factory=dict)
    origins: dict[str, str] = field(default_factory=dict)
    explicit: set[str] = field(default_factory=set)
    unmodelled: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def set(self, name: str, value: Any, key: str) -> None:
        """Field ``name`` from key ``key`` of the document."""
        self.values[name], self.origins[name] = value, self.doc.origin(key)
        self.explicit.add(name)

    def default(self, name: str, value: Any, source: str) -> None:
        """Field ``name`` from the framework's default for an absent key; ``source`` is the
        framework file and line that sets it."""
        self.values[name] = value
        self.origins[name] = f"{self.framework} default ({source})"
        self.explicit.discard(name)

    def keyed(
        self, name: str, key: str, read: Callable[[str], Any], default: Any, source: str
    ) -> None:
        """Field ``name`` from ``key`` as ``read`` (a Doc reader: integer, number, flag...)
        gives it, or the framework's ``default`` (set at ``source``) when the key is absent."""
        value = read(key)
        if value is None:
            self.default(name, default, source)
        else:
            self.set(name, value, key)

    def unmodelled_key(self, key: str, why: str = "") -> None:
        """A key that changes memory but no plan field expresses (named in the notes)."""
        self.unmodelled.append(f"{self.doc.origin(key)}{f' ({why})' if why else ''}")

    def unmodelled_present(self, keys: Mapping[str, str]) -> None:
        """Each of ``keys`` that is set to something other than off / empty."""
        for key, why in keys.items():
            value = self.doc.lookup(key)
            if value not in (None, False, "", [], {}, "false", "False", 0):
                self.unmodelled_key(key, why)

    def unmodelled_sizes(self, sizes: Mapping[str, str]) -> None:
        """Each of ``sizes`` (a parallel degree: absent or 1 is off) set above 1, its reason
        with ``{n}`` the size."""
        for key, why in sizes.items():
            size = self.doc.integer(key)
            if size is not None and size > 1:
                self.unmodelled_key(key, why.format(n=size))

    def typos(self, known: Iterable[str], fields: Collection[str] = ()) -> None:
        """Top-level keys that are not known but look like a known one: a note each, so a
        misspelt micro_batch_size is not silently planned at its default. ``fields`` are the
        framework's own keys (framework_fields): real keys the plan does not read, never
        misspellings (per_device_eval_batch_size is not per_device_train_batch_size)."""
        known = set(known)
        for key in self.doc.data:
            if key in known or key in fields:
                continue
            close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.85)
            if close:
                self.notes.append(
                    f"{self.doc.origin(str(key))}: unknown key, ignored (did you mean {close[0]}?)"
                )

    def merged(self, other: ConfigPlan) -> None:
        """Fold in a file this one names (a DeepSpeed or accelerate file): its values rank
        below this document's keys."""
        mine = self.result()
        both = other.under(mine)
        self.values, self.origins = dict(both.values), dict(both.origins)
        self.explicit = set(both.explicit)
        self.unmodelled, self.notes = list(both.unmodelled), list(both.notes)

    def named(self, key: str, text: str) -> Path:
        """A file the document names at ``key``, as the framework opens it (resolve_named),
        with a note when it is read from beside the config instead."""
        path, note = resolve_named(self.doc, key, text)
        if note:
            self.notes.append(note)
        return path

    def result(self) -> ConfigPlan:
        return ConfigPlan(
            dict(self.values),
            dict(self.origins),
            _unique(self.unmodelled),
            _unique(self.notes),
            frozenset(self.explicit),
            self.kind,
        )


def checked_reentrant(r: Reading, key: str, stack: str) -> None:
    """``use_reentrant`` at ``key``. The plan models the stack's own choice
    (Stack.reentrant_ckpt); the other is named with what it changes in the estimate: only an
    LLM.int8 base's inputs, which bitsandbytes keeps outside non-reentrant checkpointing's
    saved-tensor hooks (trainmem.core.estimator, layer.int8_inputs)."""
    value = r.doc.flag(key)
    if value is None or value == stack_record(stack).reentrant_ckpt:
        return
    kind, planned = ("reentrant", "non-reentrant") if value else ("non-reentrant", "reentrant")
    int8 = r.values.get("quant") == "int8" and r.values.get("grad_ckpt")
    why = f"{kind} checkpointing, planned as the {stack} stack's {planned}"
    if int8:
        r.unmodelled_key(key, f"{why}: it decides whether LLM.int8 inputs stay saved")
    else:
        r.notes.append(f"{r.doc.origin(key)}: {why}; the same memory without an LLM.int8 base")


def resolve_named(doc: Doc, key: str, text: str) -> tuple[Path, str | None]:
    """A file a config names (``deepspeed: ds.json``) where the framework opens it: a relative
    path from the working directory, as every one of them does (transformers and accelerate
    HfDeepSpeedConfig, accelerate/utils/deepspeed.py:141 os.path.exists; axolotl's
    prepare_optim_env, utils/trainer.py os.path.isfile(cfg.deepspeed); LLaMA-Factory passes it
    to TrainingArguments; TRL's --accelerate_config, cli/accelerate_config.py Path.is_file).

    Absent there but present beside the config, that file is read instead, with a note (the
    second value) saying the framework would not find it from here."""
    try:
        path = files.expand(text)
    except files.FileReadError as exc:
        raise doc.error(key, str(exc)) from None
    if path.is_absolute():
        return path, None
    try:
        here = Path.cwd() / path
    except OSError:  # the working directory was removed
        here = None
    beside = doc.path.parent / path if doc.path is not None and not doc.command else None
    if beside is None or (here is not None and (here == beside or _exists(here))):
        return (here or path), None
    if not _exists(beside):
        return (here or beside), None
    return beside, (
        f"{doc.origin(key)}: {show(text)} is not in the working directory, where the framework "
        f"opens it; read {show(beside)} beside {doc.name} instead (run from "
        f"{show(beside.parent)} for the framework to find it)"
    )


def _exists(path: Path) -> bool:
    """Something is there (a file, or a broken link the reader then reports)."""
    try:
        return files.kind(path) is not None
    except files.FileReadError:
        return True


def named_path(doc: Doc, key: str, text: str) -> Path:
    """The file ``text`` names, resolved by :func:`resolve_named` (its note dropped: for
    callers that report it through a Reading, use Reading.named)."""
    return resolve_named(doc, key, text)[0]


__all__ = [
    "FIELD",
    "ConfigPlan",
    "Doc",
    "ReadFile",
    "Reading",
    "checked_reentrant",
    "named_path",
    "resolve_named",
    "show",
]


# The legacy ``fsdp`` words (transformers trainer_utils.py FSDPOption) as sharding choices;
# transformers turns them into fsdp_config defaults (training_args.py
# _apply_legacy_fsdp_to_config), and axolotl passes its ``fsdp:`` list on unchanged
# (core/builders/base.py:684-686).
FSDP_WORDS = {
    "full_shard": "full-shard",
    "shard_grad_op": "shard-grad-op",
    "hybrid_shard": "hybrid-shard",
    "hybrid_shard_zero2": "hybrid-shard",
    "no_shard": "no-shard",
}


def legacy_fsdp_words(
    doc: Doc, r: Reading, words: Iterable[object], *, version: int, strategy_set: bool
) -> None:
    """The old ``fsdp`` list ("full_shard auto_wrap offload"): a sharding word sets the
    strategy unless ``fsdp_config`` set it (``strategy_set``), ``offload`` parameter offload;
    FSDP2 takes full_shard and shard_grad_op only, as transformers refuses the others."""
    for word in (str(w).lower() for w in words):
        if word in FSDP_WORDS:
            if version == 2 and word not in ("full_shard", "shard_grad_op"):
                raise doc.error("fsdp", f"{word} is FSDP1's: transformers refuses it with FSDP2")
            if not strategy_set:
                r.set("fsdp", FSDP_WORDS[word], "fsdp")
            if word == "hybrid_shard_zero2":
                r.unmodelled_key("fsdp", "hybrid_shard_zero2 is planned as hybrid-shard")
        elif word == "offload":
            r.set("offload", "params", "fsdp")
        elif word not in ("auto_wrap", "true"):  # "true": the Trainer's fsdp=True
            raise doc.error("fsdp", f"{shown(word)} is not an FSDP option")


# FSDP1's BackwardPrefetch names, as accelerate 1.16 reads them (utils/dataclasses.py:1767-1777,
# upper-cased; NO_PREFETCH is None) and transformers 5.25 passes them (training_args.py:2875).
_PREFETCH = {"BACKWARD_PRE": "backward-pre", "BACKWARD_POST": "backward-post"}


def backward_prefetch(r: Reading, doc: Doc, key: str, version: int) -> None:
    """An FSDP1 ``backward_prefetch`` under ``key``, if written (FSDP2 ignores it, as
    accelerate does with a warning)."""
    value = doc.lookup(key)
    if value is None or version != 1:
        return
    name = str(value).upper()
    if name == "NO_PREFETCH":
        r.set("backward_prefetch", "none", key)
    elif name in _PREFETCH:
        r.set("backward_prefetch", _PREFETCH[name], key)
    else:
        raise doc.error(key, f"{shown(value)} is not BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH")
