"""The dashboard started on a real pseudo-terminal, for the tests that need one (a lost
terminal, the bytes that reach a terminal): state and the HF cache in ``tmp_path``."""

from __future__ import annotations

import fcntl
import os
import struct
import subprocess
import sys
import termios
from pathlib import Path


def _controlling_tty() -> None:  # in the child: the pty becomes its controlling terminal
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def spawn_dashboard(
    tmp_path: Path,
    args: list[str],
    *,
    size: tuple[int, int] = (80, 24),
    env: dict[str, str] | None = None,
) -> tuple[subprocess.Popen[bytes], int]:
    """``python -m trainmem ARGS`` on a pty of ``size`` (columns, rows); returns the process
    and the pty's master end (the caller reads it, and closes it)."""
    master, slave = os.openpty()
    cols, rows = size
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    full_env = {
        **os.environ,
        "TERM": "xterm-256color",
        "TRAINMEM_STATE_DIR": str(tmp_path / "state"),
        "HF_HUB_CACHE": str(tmp_path / "hf"),
        **(env or {}),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainmem", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=full_env,
        preexec_fn=_controlling_tty,
    )
    os.close(slave)
    return proc, master
