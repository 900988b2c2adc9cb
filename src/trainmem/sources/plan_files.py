"""Named plans saved to and loaded from TOML: the dashboard's comparisons and its session.

Writes are atomic (a temp file in the same folder, then ``os.replace``), so a crash or a full
disk never leaves half a file. A file that cannot be read or parsed raises ``PlansFileError``
and is left as it is: callers report it and must not write over it.

Every path the dashboard keeps state in comes from ``trainmem.sources.paths``; tests point
it at a temporary folder with ``TRAINMEM_STATE_DIR``.
"""

from __future__ import annotations

import errno
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from trainmem.core.errors import PlanError
from trainmem.core.plan import Plan
from trainmem.core.text import visible
from trainmem.core.units import shown
from trainmem.sources import files
from trainmem.sources.files import FileReadError, MissingFileError, read_text, show

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
        super().__init__(f"{show(path)}: {message}")


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
    # Plans of the file that could not be used, one line each ("plan 3 (x): batch: ..."):
    # the valid ones are open, and the file must not be written over (it would lose these).
    problems: tuple[str, ...] = ()


def to_toml(plan_set: PlanSet) -> str:
    doc: dict[str, Any] = {
        "version": FORMAT_VERSION,
        "selected": plan_set.selected,
        "plans": [
            {**({} if p.auto else {"name": p.name}), **p.plan.to_dict()} for p in plan_set.plans
        ],
    }
    return tomli_w.dumps(doc)


Progress = Callable[[int, int], None]  # (plans checked, plans in the file)


def from_toml(text: str, path: Path, progress: Progress | None = None) -> PlanSet:
    """Parse a plans document. A document that cannot be used at all raises PlansFileError;
    a plan that is invalid is left out and named in ``problems`` (the others open)."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PlansFileError(path, f"not valid TOML: {exc}") from None
    except ValueError:  # tomllib's int() of over 4,300 digits (sys.int_info), not a decode error
        raise PlansFileError(path, "not valid TOML: an integer too long to read") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise PlansFileError(path, "not valid TOML: nested too deeply") from None
    version = doc.get("version", FORMAT_VERSION)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise PlansFileError(path, f"format version {shown(version)} is not a format version")
    if version > FORMAT_VERSION:
        raise PlansFileError(
            path,
            f"written in plans format {version} by a newer trainmem-tui; this one reads "
            f"format {FORMAT_VERSION} (upgrade to open it; the file is left as it is)",
        )
    raw = doc.get("plans")
    if not isinstance(raw, list) or not raw:
        raise PlansFileError(path, "holds no [[plans]] tables")
    plans: list[NamedPlan] = []
    problems: list[str] = []
    for i, entry in enumerate(raw, 1):
        if progress is not None and i % PROGRESS_EVERY == 0:
            progress(i, len(raw))
        try:
            plans.append(_named_plan(i, entry))
        except PlanError as exc:
            problems.append(exc.message)
    if not plans:
        raise PlansFileError(path, problems[0] if len(problems) == 1 else _summary(problems))
    selected = doc.get("selected", 0)
    if isinstance(selected, bool) or not isinstance(selected, int):
        selected = 0
    return PlanSet(tuple(plans), min(max(selected, 0), len(plans) - 1), tuple(problems))


PROGRESS_EVERY = 1000
NAME_LIMIT = 200  # characters of a plan's name


def _named_plan(i: int, entry: object) -> NamedPlan:
    """Plan ``i`` of a file; PlanError("plan", "plan i (name): field: why") if unusable."""
    if not isinstance(entry, dict):
        raise PlanError("plan", f"plan {i} is not a table")
    data = dict(entry)
    name = data.pop("name", None)
    if name is not None and not isinstance(name, str):
        raise PlanError("plan", f"plan {i}: name {shown(name)} is not text")
    if name:  # a label from a file: shown everywhere, so made safe once, here
        name = plan_label(name)
    try:
        plan = Plan.from_dict(data)
    except PlanError as exc:
        label = f"plan {i} ({name})" if name else f"plan {i}"
        raise PlanError("plan", f"{label}: {exc}") from None
    auto = not name or _legacy_default_name(name, plan)
    return NamedPlan(name if name and not auto else "", plan, auto=auto)


def plan_label(name: str) -> str:
    """A plan's name as read from a file or typed (a rename): control characters and escape
    sequences written out (``\x1b``: a terminal never acts on them, wherever the name is
    shown or exported), and cut to ``NAME_LIMIT`` characters."""
    name = visible(name)
    return name if len(name) <= NAME_LIMIT else name[: NAME_LIMIT - 1] + "…"


def _summary(problems: list[str]) -> str:
    more = f" (and {len(problems) - 1:,} more)" if len(problems) > 1 else ""
    return f"no usable plan: {problems[0]}{more}"


def problems_text(plan_set: PlanSet, limit: int = 3) -> str:
    """The invalid plans of a file, in one line (the first few, then a count)."""
    shown = "; ".join(plan_set.problems[:limit])
    rest = len(plan_set.problems) - limit
    return shown + (f"; and {rest:,} more" if rest > 0 else "")


def load_plans(path: Path, progress: Progress | None = None) -> PlanSet:
    try:
        text = read_text(path, limit=MAX_FILE, what="plans file")
    except MissingFileError:
        raise PlansFileError(path, "no such file") from None
    except FileReadError as exc:  # a FIFO, a device, too large, not UTF-8...: one line
        raise PlansFileError(path, str(exc).replace(f"plans file {path} ", "", 1)) from None
    return from_toml(text, path, progress)


MAX_FILE = 256 * 2**20  # ~800,000 plans; a larger "plans file" is something else
LARGE_FILE = 512 * 1024  # bytes (~1,600 plans): the dashboard reads larger files in a worker


def is_large(path: Path) -> bool:
    try:
        return path.stat().st_size > LARGE_FILE
    except OSError:
        return False


@dataclass(frozen=True)
class Opened:
    """A plans file opened for the dashboard: its usable plans (None: none), what to tell the
    user, and the files that must never be written over (they hold plans that did not load)."""

    plan_set: PlanSet | None
    messages: tuple[tuple[str, str], ...] = ()  # (severity, text)
    broken: tuple[Path, ...] = ()


def open_plans(path: Path, *, session: bool, progress: Progress | None = None) -> Opened:
    """Open ``path`` as the dashboard does. A broken or partly invalid session file is moved
    aside (kept, never lost) and the valid plans open; a broken ``--compare`` file stays where
    it is and is never written over."""
    try:
        plan_set = load_plans(path, progress)
    except PlansFileError as exc:
        if _absent(path):
            if session:
                return Opened(None)
            told = f"{show(path)} does not exist yet; Save creates it"
            return Opened(None, (("information", told),))
        if session:
            return Opened(None, (("error", f"{exc}. {_keep_aside(path)}"),))
        return Opened(None, (("error", f"{exc}. The file is left untouched."),), (path,))
    if not plan_set.problems:
        return Opened(plan_set)
    kept = len(plan_set.plans)
    told = (
        f"{show(path)}: opened the {kept:,} valid plans of {kept + len(plan_set.problems):,}; "
        f"{problems_text(plan_set)}."
    )
    if session:
        return Opened(plan_set, (("error", f"{told} {_keep_aside(path)}"),))
    # Never written over: saving it would drop the plans that did not load.
    note = "The file is left untouched: Save writes it only under another name."
    return Opened(plan_set, (("error", f"{told} {note}"),), (path,))


def _absent(path: Path) -> bool:
    """Nothing at ``path`` (a name the OS refuses, too long, is not absent: it is an error)."""
    try:
        return not path.exists()
    except (OSError, ValueError):
        return False


def _keep_aside(path: Path) -> str:
    """Move a broken session file out of the way, so the next save cannot lose it."""
    aside = path.with_name(f"{path.stem}.broken-{time.strftime('%Y%m%d-%H%M%S')}{path.suffix}")
    try:
        path.rename(aside)
    except OSError as exc:
        return f"It could not be kept aside ({exc.strerror or exc}); it is left untouched."
    return f"The file was kept as {aside}; the next session starts from what was valid."


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to a temp file beside ``path``, flush it to disk, then rename it over
    ``path``: readers see the old file or the new one, never a part. Raises OSError.

    A symlink is followed (its target is written, the link kept); anything there but a
    regular file (a device such as /dev/null, a FIFO, a folder) is refused, since the rename
    would replace the node itself."""
    path = path.resolve()  # follows symlinks, dangling ones too
    try:
        there = files.kind(path)
    except files.FileReadError as exc:  # a name the OS refuses, no permission
        raise OSError(errno.EACCES, str(exc)) from None
    if there not in (None, "file"):
        raise OSError(
            errno.EISDIR if there == "dir" else errno.EINVAL,
            f"{show(path)} is {'a folder' if there == 'dir' else 'not a regular file'}",
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # the OS says only "File exists"
        blocking = next((p for p in (path.parent, *path.parent.parents) if p.is_file()), None)
        if blocking is None:
            raise
        raise NotADirectoryError(
            errno.ENOTDIR, f"{show(blocking)} is a file, not a folder"
        ) from None
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


_PLANS_FILE = re.compile(rb"^\s*(\[\[plans\]\]|version\s*=|selected\s*=)", re.M)


def _holds_other_data(path: Path) -> bool:
    """Whether ``path`` holds something that is not a plans file (a training config typed
    at the save prompt): saving must not replace it."""
    try:
        with path.open("rb") as f:
            head = f.read(64 * 1024)
    except (OSError, ValueError):
        return False  # nothing there, or unreadable: the write says why
    if not head.strip():
        return False
    return path.suffix.lower() != ".toml" or _PLANS_FILE.search(head) is None


def save_plans(path: Path, plan_set: PlanSet) -> None:
    """Write atomically. Raises PlansFileError when the folder or file cannot be written, or
    when the file there holds something else (it is never replaced)."""
    try:
        other = files.kind(path) == "file" and _holds_other_data(path.resolve())
    except files.FileReadError:
        other = False  # a dangling link or a refused name: the write follows or says why
    if other:
        raise PlansFileError(
            path, "holds something that is not a plans file (.toml); not written over"
        )
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
