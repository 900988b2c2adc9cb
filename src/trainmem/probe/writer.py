"""Appending the run log: one JSON line per record, flushed at once, never an exception.

The training loop matters more than its log: the first failure to open or write (a full
disk, a lost mount, a path that cannot exist) is warned once with ``warnings.warn`` and the
writer goes quiet for the rest of the run. The log must be a regular file: it is opened with
``O_NONBLOCK`` (opening a FIFO for writing blocks until a reader opens it: forever, in the
middle of a training step) and anything but a regular file (a FIFO, a terminal, /dev/...) is
refused the same way, warned once.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import stat
import warnings
from typing import IO, Any

from trainmem.core.run_log import RANK_FIELD, rank_name

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
    if RANK_FIELD in text:  # in the folder too: logs/{rank}/run.jsonl
        return text.replace(RANK_FIELD, str(rank))
    folder, name = os.path.split(text)
    return os.path.join(folder, rank_name(name, rank))


def _finite(value: Any) -> Any:
    """NaN and infinities as null: every line must be strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


_KINDS = (
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a directory"),
)


class NotALogFile(OSError):
    """The path is there but is no regular file."""


def _not_regular(mode: int) -> NotALogFile | None:
    if stat.S_ISREG(mode):
        return None
    kind = next((name for test, name in _KINDS if test(mode)), "of an unknown kind")
    return NotALogFile(f"it is {kind}, not a regular file")


def _open_log(path: str) -> IO[str]:
    """``path`` opened for appending without ever blocking, or OSError. What is there is
    checked before opening (opening a device can act on it) and again after (something else
    may have been put there in between; a FIFO then fails at once, ENXIO, or is refused)."""
    try:
        wrong = _not_regular(os.stat(path).st_mode)
    except FileNotFoundError:
        wrong = None
    if wrong is not None:
        raise wrong
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0)
    fd = os.open(path, flags, 0o666)
    try:
        wrong = _not_regular(os.fstat(fd).st_mode)
        if wrong is not None:
            raise wrong
        return os.fdopen(fd, "a", encoding="utf-8")  # O_NONBLOCK does nothing to a file
    except BaseException:
        os.close(fd)
        raise


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
                self._file = _open_log(self.path)
            # One write of the whole line, then flush: a reader sees whole lines, or a last
            # one still being written (which it keeps for later).
            self._file.write(line + "\n")
            self._file.flush()
        except OSError as exc:  # NotALogFile too (no strerror: its message)
            self._fail(f"cannot write {self.path}: {exc.strerror or exc}")
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
