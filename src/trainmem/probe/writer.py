"""Appending the run log: one JSON line per record, flushed at once, never an exception.

The training loop matters more than its log: the first failure to open or write (a full
disk, a lost mount, a path that cannot exist) is warned once with ``warnings.warn`` and the
writer goes quiet for the rest of the run.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import warnings
from typing import IO, Any

ENV = "TRAINMEM_RUN_LOG"
DEFAULT_NAME = "trainmem-run.jsonl"


def rank_path(path: str | os.PathLike[str] | None, rank: int, default_dir: str = "") -> str:
    """The log file of ``rank``: ``path`` (else $TRAINMEM_RUN_LOG, else trainmem-run.jsonl in
    ``default_dir``) with ``{rank}`` filled in, or ``.rank<N>`` put before its extension
    (run.jsonl -> run.rank0.jsonl), so ranks never share a file."""
    text = os.fspath(path) if path is not None else os.environ.get(ENV) or ""
    if not text:
        text = os.path.join(default_dir, DEFAULT_NAME) if default_dir else DEFAULT_NAME
    text = os.path.expanduser(text)
    if "{rank}" in text:
        return text.replace("{rank}", str(rank))
    folder, name = os.path.split(text)
    stem, dot, ext = name.rpartition(".")
    name = f"{stem}.rank{rank}.{ext}" if dot and stem else f"{name}.rank{rank}"
    return os.path.join(folder, name)


def _finite(value: Any) -> Any:
    """NaN and infinities as null: every line must be strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class LogWriter:
    def __init__(self, path: str) -> None:
        self.path = path
        self._file: IO[str] | None = None
        self.failed: str | None = None  # why the writer went quiet

    def write(self, record: dict[str, Any]) -> None:
        if self.failed is not None:
            return
        try:
            line = json.dumps(record, allow_nan=False, default=str, separators=(",", ":"))
        except ValueError:  # a NaN somewhere (a loss): written as null rather than lost
            line = json.dumps(_finite(record), default=str, separators=(",", ":"))
        except Exception as exc:
            self._fail(f"cannot encode a record ({type(exc).__name__}: {exc})")
            return
        try:
            if self._file is None:
                folder = os.path.dirname(self.path)
                if folder:
                    os.makedirs(folder, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
            # One write of the whole line, then flush: a reader sees whole lines, or a last
            # one still being written (which it keeps for later).
            self._file.write(line + "\n")
            self._file.flush()
        except Exception as exc:
            self._fail(f"cannot write {self.path}: {exc}")

    def _fail(self, why: str) -> None:
        self.failed = why
        warnings.warn(f"trainmem probe: {why}; the run goes on without its log", stacklevel=3)
        self.close()

    def close(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            with contextlib.suppress(Exception):
                f.close()
