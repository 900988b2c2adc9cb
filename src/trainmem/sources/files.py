"""The one way the sources layer reads a file the user points at (config.json, safetensors
headers, plan files): whatever is at the path, the answer is the bytes or one line naming it.

Why each guard exists:
- ``~nouser`` is left as it is by ``os.path.expanduser``; it is reported, not looked up.
- Only regular files are opened. A FIFO blocks ``open`` forever and ``/dev/zero`` never ends,
  so the type is checked with ``stat`` (through symlinks) before opening, and the file is
  opened with ``O_NONBLOCK`` and checked again, in case something else was swapped in.
- Reads are capped: at most ``limit + 1`` bytes are read, and more than ``limit`` is refused.
- Every ``OSError`` (ENAMETOOLONG, EACCES, ELOOP, ...) becomes one line.
- JSON nested deeper than ``MAX_DEPTH`` is refused: json.loads recurses and raises
  RecursionError deep down; nothing we read is nested more than a few levels.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from trainmem.core.text import visible

MAX_DEPTH = 64
_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class FileReadError(ValueError):
    """A file that cannot be read as asked; ``str()`` is one line naming the file."""


class MissingFileError(FileReadError):
    """Nothing at the path (callers may want to say what was expected there)."""


def show(path: Path | str) -> str:
    """A path for a one-line message: control characters written out (a file name may hold
    ESC), long ones (a 300-character part) shortened."""
    text = visible(str(path).replace("\n", "\\n"))
    return text if len(text) <= 120 else f"{text[:60]}...{text[-50:]}"


def expand(text: str | Path) -> Path:
    """``~`` and ``~user`` expanded; an unknown user is an error rather than a literal name."""
    text = str(text)
    expanded = os.path.expanduser(text)
    if text.startswith("~") and expanded.startswith("~") and not os.path.lexists(text):
        user = text[1:].split(os.sep, 1)[0]
        raise MissingFileError(f"{show(text)}: no such user {user!r}")
    return Path(expanded)


def typed_path(text: str) -> Path:
    """A path the user typed (the dashboard's open, save, export and tail prompts): ``~``
    expanded, and FileReadError, one line, for an unknown ``~user`` or a NUL byte (which no
    file name can hold: os.stat would raise)."""
    if "\x00" in text:
        raise FileReadError(f"{show(text)}: a file name cannot hold a NUL byte")
    return expand(text.strip())


def reason(exc: OSError) -> str:
    """The OS's words for an error (``strerror``), without the path it repeats."""
    if exc.errno == errno.ENAMETOOLONG:
        return "file name too long (a part over 255 characters?)"
    return (exc.strerror or type(exc).__name__).lower()


def _stat(path: Path) -> os.stat_result | None:
    """``os.stat`` through symlinks; None when nothing is there, FileReadError for a dangling
    symlink or a path the OS refuses (too long, no permission, a symlink loop)."""
    try:
        return os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        if os.path.islink(path):
            raise FileReadError(_dangling(path)) from None
        return None
    except OSError as exc:
        raise FileReadError(f"{show(path)}: {reason(exc)}") from None
    except ValueError:  # an embedded NUL byte: no file can have that name
        return None


def kind(path: Path) -> str | None:
    """``"file"``, ``"dir"``, ``"other"`` (FIFO, device, socket) or None when nothing is
    there; FileReadError as :func:`_stat`."""
    st = _stat(path)
    if st is None:
        return None
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "dir" if stat.S_ISDIR(st.st_mode) else "other"


def _dangling(path: Path) -> str:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return f"{show(path)} is a dangling symbolic link (to {show(target)})"


def _name(path: Path, what: str) -> str:
    return f"{what} {show(path)}" if what else show(path)


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    return next((name for test, name in _KINDS if test(mode)), "of an unknown kind")


@contextmanager
def open_file(path: Path, *, what: str) -> Iterator[tuple[IO[bytes], int]]:
    """The open regular file at ``path`` and its size; FileReadError (one line naming
    ``what`` and the path) for anything else. Every read of this layer goes through here."""
    name = _name(path, what)
    st = _stat(path)
    if st is None:
        raise MissingFileError(f"no such file: {name}")
    wrong = _not_regular(st.st_mode)
    if wrong:  # refused before opening: a FIFO would block open() and /dev/zero never ends
        raise FileReadError(f"{name} is {wrong}, not a regular file")
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        raise FileReadError(f"cannot read {name}: {reason(exc)}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        wrong = _not_regular(st.st_mode)
        if wrong:  # something else swapped in between stat and open
            raise FileReadError(f"{name} is {wrong}, not a regular file")
        try:
            yield f, st.st_size
        except OSError as exc:
            raise FileReadError(f"cannot read {name}: {reason(exc)}") from None


def read_bytes(path: Path, *, limit: int, what: str = "") -> bytes:
    """The whole file, refused when it holds more than ``limit`` bytes."""
    with open_file(path, what=what) as (f, size):
        if size > limit:  # a size over the limit is refused unread (a sparse 2 GB file)
            raise FileReadError(f"{_name(path, what)} is larger than {limit:,} bytes")
        data = f.read(limit + 1)  # a size under it is not trusted: /proc and growing files lie
    if len(data) > limit:
        raise FileReadError(f"{_name(path, what)} is larger than {limit:,} bytes")
    return data


def read_text(path: Path, *, limit: int, what: str = "") -> str:
    data = read_bytes(path, limit=limit, what=what)
    try:  # utf-8-sig: a byte-order mark (Windows editors write one) is not part of the text
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise FileReadError(f"{_name(path, what)} is not UTF-8 text (byte {exc.start})") from None


def read_json(path: Path, *, limit: int, what: str = "") -> Any:
    """The parsed JSON of a file (see :func:`parse_json`)."""
    return parse_json(read_text(path, limit=limit, what=what), what=_name(path, what))


def parse_json(text: str | bytes, *, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """json.loads with one-line errors and nesting refused beyond ``max_depth``.

    NaN and Infinity parse as floats, as Python's json writes them: the fields that matter
    check their values. Integers over 4,300 digits are refused by Python itself."""
    if isinstance(text, bytes):  # json.loads would guess UTF-16 or UTF-32 from the bytes
        try:
            text = text.decode("utf-8-sig")  # a byte-order mark is no part of the JSON
        except UnicodeDecodeError as exc:
            raise FileReadError(f"{what} is not UTF-8 text (byte {exc.start})") from None
    try:
        value = json.loads(text)
    except RecursionError:
        raise FileReadError(f"{what} is nested too deeply (over {max_depth} levels)") from None
    except json.JSONDecodeError as exc:
        raise FileReadError(f"{what} is not valid JSON: {exc}") from None
    except ValueError:  # Python refuses integers over 4,300 digits (sys.int_info)
        raise FileReadError(f"{what} holds an integer too long to read") from None
    if _depth_over(value, max_depth):
        raise FileReadError(f"{what} is nested too deeply (over {max_depth} levels)")
    return value


def _depth_over(value: Any, max_depth: int) -> bool:
    """Whether ``value`` nests deeper than ``max_depth``, walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item
        for child in children:
            if isinstance(child, (dict, list)):
                if depth >= max_depth:
                    return True
                stack.append((child, depth + 1))
    return False
