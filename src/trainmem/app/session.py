"""The session file (the plans open at the last exit), shared by every dashboard on one state
directory: a dashboard per machine in one tmux session each quit at their own time.

Saving merges instead of overwriting: when the file changed since this dashboard read it,
the plans another dashboard added or edited there are kept after this one's, so nothing
either had is lost. A plan this dashboard deleted but another still had comes back, which
loses nothing either. Plain Python, no Textual; called at exit, off the UI loop.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from trainmem.app.workspace import Workspace
from trainmem.sources.plan_files import NamedPlan, PlanSet, open_plans, save_plans

Signature = tuple[int, int] | None  # (mtime in ns, size) of the file; None: no file


def signature(path: Path) -> Signature:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size)


def _key(named: NamedPlan) -> tuple[object, ...]:
    """What makes two saved plans the same: an auto-named plan's name follows the others in
    its file, so only the plan counts; a name of the user's own counts too, less the " (2)"
    a merge adds to keep names distinct."""
    return (named.plan,) if named.auto else (named.plan, _COPY.sub("", named.name))


_COPY = re.compile(r" \(\d+\)$")


UNREAD = (-1, -1)  # the signature of a file this dashboard never read: no file has it


class SessionFile:
    def __init__(self, path: Path, read: Iterable[NamedPlan] = (), opened: bool = True) -> None:
        """``read``: the plans the dashboard read from the file at start. ``opened=False``: it
        opened something else (``--compare FILE``), so the session's plans are merged at
        exit like another dashboard's, and a broken session is moved aside, not written
        over."""
        self.path = path
        # as this dashboard found it (or last wrote it)
        self.seen: Signature = signature(path) if opened else UNREAD
        self._base = {_key(p) for p in read}  # the plans it held then

    def read_too(self, plans: Iterable[NamedPlan]) -> None:
        """Plans read from the file after start-up (a large session, read in a worker)."""
        self._base.update(_key(p) for p in plans)

    def save(self, plan_set: PlanSet) -> tuple[PlanSet, str | None]:
        """Write ``plan_set``, merged with what another dashboard saved meanwhile. Returns
        what was written and a note for the user when plans were merged. Raises
        PlansFileError when it cannot be written."""
        with _locked(self.path):
            merged, note = plan_set, None
            if signature(self.path) != self.seen:
                merged, note = self._merge(plan_set)
            save_plans(self.path, merged)
            self.seen = signature(self.path)
            self._base = {_key(p) for p in merged.plans}
        return merged, note

    def _merge(self, plan_set: PlanSet) -> tuple[PlanSet, str | None]:
        # A broken or partly invalid file is moved aside (kept) and its valid plans merged.
        opened = open_plans(self.path, session=True)
        theirs = opened.plan_set.plans if opened.plan_set is not None else ()
        ours = {_key(p) for p in plan_set.plans}
        added = [p for p in theirs if _key(p) not in self._base and _key(p) not in ours]
        notes = [text for _severity, text in opened.messages]
        if added:
            ws = Workspace(plan_set)
            for named in added:
                ws.append(named)
            plan_set = ws.to_plan_set()
            plans = f"{len(added):,} plan{'s' * (len(added) != 1)}"
            notes.insert(
                0,
                f"kept the {plans} {self.path} held before"
                if self.seen == UNREAD
                else f"kept {plans} another dashboard saved in {self.path}",
            )
        return plan_set, "; ".join(notes) or None


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Two dashboards quitting at the same moment take turns (an advisory lock beside the
    file, where the platform has one): read, merge and write happen as one step."""
    try:
        import fcntl
    except ImportError:  # Windows: the window between reading and writing stays small
        yield
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path.with_name(f".{path.name}.lock"), os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:  # an unwritable folder: the write itself then says why
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
