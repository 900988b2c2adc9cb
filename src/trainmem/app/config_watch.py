"""Training configs a plan was opened from (``--from``, or Ctrl+O on a config), watched:
saving one in an editor re-reads it and re-estimates the plan.

Plain Python, no Textual: the app polls ``changed()`` from a worker thread (a stat per file
per second, never on the UI thread) and applies what ``reread()`` returns on the UI thread.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmem.core.plan import Plan
from trainmem.sources.files import show

Stamp = tuple[int, int] | None  # (mtime in ns, size), None while the file is missing


def _stamp(path: Path) -> Stamp:
    try:
        st = os.stat(path)
    except (OSError, ValueError):  # ValueError: a NUL byte in the name
        return None
    return (st.st_mtime_ns, st.st_size)


@dataclass
class WatchedConfig:
    files: tuple[Path, ...]
    commands: tuple[str, ...] = ()
    flags: Mapping[str, Any] = field(default_factory=dict)  # typed fields stay over files
    plan: Plan | None = None  # the plan last built from them: how its copy is found
    _stamps: tuple[Stamp, ...] = ()
    _pending: tuple[Stamp, ...] | None = None

    def __post_init__(self) -> None:
        self._stamps = self.stamps()

    @classmethod
    def of(
        cls,
        files: Sequence[str | Path],
        commands: Sequence[str] = (),
        flags: Mapping[str, Any] | None = None,
        plan: Plan | None = None,
    ) -> WatchedConfig:
        paths = tuple(Path(f).expanduser() for f in files)
        return cls(paths, tuple(commands), dict(flags or {}), plan)

    def stamps(self) -> tuple[Stamp, ...]:
        return tuple(_stamp(p) for p in self.files)

    def changed(self) -> bool:
        """True once a file changed and then held still for one poll (an editor's save can
        take more than one write); a file that disappears waits until it is back."""
        now = self.stamps()
        if now == self._stamps or None in now:
            self._pending = None
            return False
        if self._pending != now:
            self._pending = now
            return False
        self._stamps, self._pending = now, None
        return True

    def reread(self) -> tuple[Plan, tuple[str, ...]]:
        """The plan the files now describe and their unmodelled keys (PlanError if a file is
        broken: the caller keeps the last plan, so nothing is lost)."""
        from trainmem.sources.configs import read_configs
        from trainmem.sources.configs.merge import plan_from_config

        config = read_configs(self.files, self.commands)
        return plan_from_config(config, self.flags), config.unmodelled

    def names(self) -> str:
        return ", ".join(show(p.name) for p in self.files) or "the command line"


def is_training_config(path: Path) -> bool:
    """A file Ctrl+O should read as a training config rather than a plans file (TOML)."""
    return path.suffix.lower() in (".yaml", ".yml", ".json")
