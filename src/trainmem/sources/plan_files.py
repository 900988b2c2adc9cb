"""Named plans saved to and loaded from TOML: the dashboard's comparisons and its session.

Writes are atomic (a temp file in the same folder, then ``os.replace``), so a crash or a full
disk never leaves half a file. A file that cannot be read or parsed raises ``PlansFileError``
and is left as it is: callers report it and must not write over it.

Every path the dashboard keeps state in comes from ``trainmem.sources.paths``; tests point
it at a temporary folder with ``TRAINMEM_STATE_DIR``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from trainmem.core.errors import PlanError
from trainmem.core.plan import Plan

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]

# Format 1: ``version``, ``selected`` and ``[[plans]]`` tables holding the plan fields by
# their keys (trainmem.core.plan) and an optional ``name``; a plan without a name is named
# after what distinguishes it (the dashboard's default names). Missing fields take defaults,
# so files written before a field existed load unchanged.
FORMAT_VERSION = 1


class PlansFileError(Exception):
    """A plans file that is missing, unreadable or malformed; ``str()`` says which and why."""

    def __init__(self, path: Path, message: str) -> None:
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}")


@dataclass(frozen=True)
class NamedPlan:
    """A plan and its name. ``auto``: the name is the default one, which follows the plan's
    edits (and is not written to files) until the user gives it a name of their own."""

    name: str
    plan: Plan
    auto: bool = False


@dataclass(frozen=True)
class PlanSet:
    """The plans open in the dashboard, and which one the form edits."""

    plans: tuple[NamedPlan, ...]
    selected: int = 0


def to_toml(plan_set: PlanSet) -> str:
    doc: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "selected": plan_set.selected,
        "plans": [
            {**({} if p.auto else {"name": p.name}), **p.plan.to_dict()} for p in plan_set.plans
        ],
    }
    return tomli_w.dumps(doc)


def from_toml(text: str, path: Path) -> PlanSet:
    """Parse a plans document; every problem becomes a PlansFileError naming the plan."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlansFileError(path, f"not valid TOML: {exc}") from None
    version = doc.get("version", FORMAT_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise PlansFileError(path, f"format version {version!r} is not a format version")
    if version > FORMAT_VERSION:
        raise PlansFileError(
            path,
            f"written in plans format {version} by a newer trainmem-tui; this one reads "
            f"format {FORMAT_VERSION} (upgrade to open it; the file is left as it is)",
        )
    raw = doc.get("plans")
    if not isinstance(raw, list) or not raw:
        raise PlansFileError(path, "holds no [[plans]] tables")
    plans = []
    for i, entry in enumerate(raw, 1):
        if not isinstance(entry, dict):
            raise PlansFileError(path, f"plan {i} is not a table")
        data = dict(entry)
        name = data.pop("name", None)
        if name is not None and not isinstance(name, str):
            raise PlansFileError(path, f"plan {i}: name {name!r} is not text")
        try:
            plan = Plan.from_dict(data)
        except PlanError as exc:
            label = f"plan {i} ({name})" if name else f"plan {i}"
            raise PlansFileError(path, f"{label}: {exc}") from None
        auto = not name or _legacy_default_name(name, plan)
        plans.append(NamedPlan(name if name and not auto else "", plan, auto=auto))
    selected = doc.get("selected", 0)
    if not isinstance(selected, int) or not 0 <= selected < len(plans):
        selected = 0
    return PlanSet(tuple(plans), selected)


def load_plans(path: Path) -> PlanSet:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise PlansFileError(path, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PlansFileError(path, f"cannot read: {exc}") from None
    return from_toml(text, path)


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to a temp file beside ``path``, flush it to disk, then rename it over
    ``path``: readers see the old file or the new one, never a part. Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_plans(path: Path, plan_set: PlanSet) -> None:
    """Write atomically. Raises PlansFileError when the folder or file cannot be written."""
    try:
        atomic_write(path, to_toml(plan_set))
    except OSError as exc:
        raise PlansFileError(path, f"cannot write: {exc.strerror or exc}") from None


def _legacy_default_name(name: str, plan: Plan) -> bool:
    """Whether ``name`` is the default name earlier releases wrote for ``plan`` ("Qwen2.5-7B
    lora 2048x2", maybe with " (2)"): such plans get today's default names instead."""
    model = plan.model.rstrip("/").split("/")[-1] or plan.model
    old = f"{model} {plan.method} {plan.seq_len}x{plan.batch}"
    base, _, suffix = name.partition(" (")
    return base == old and (not suffix or suffix.rstrip(")").isdigit())


__all__ = [
    "FORMAT_VERSION",
    "NamedPlan",
    "PlanSet",
    "PlansFileError",
    "atomic_write",
    "from_toml",
    "load_plans",
    "save_plans",
    "to_toml",
]
