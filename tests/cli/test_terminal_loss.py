"""The dashboard on a real pseudo-terminal: closing the terminal (what an SSH drop or
``tmux kill-session`` does) or SIGTERM ends it within two seconds at any moment of its life,
start-up included, and keeps the open plans. Without a terminal it says so and exits 2."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pty_dashboard import spawn_dashboard

LIMIT_S = 2.0


def _spawn(tmp_path: Path, extra_env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    return spawn_dashboard(tmp_path, ["--model", "3B", "--interval", "0.2"], env=extra_env)


def _drain(master: int, seconds: float) -> bytes:
    """Read what the app writes for ``seconds`` (a full pty would block it)."""
    out = b""
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        ready, _, _ = select.select([master], [], [], left)
        if not ready:
            break
        try:
            out += os.read(master, 1 << 16)
        except OSError:
            break
    return out


def _ended_within(proc: subprocess.Popen[bytes], limit: float) -> float:
    start = time.monotonic()
    try:
        proc.wait(limit + 3)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"still running {limit + 3:.0f} s after the terminal went away")
    return time.monotonic() - start


@pytest.mark.parametrize("after_s", [0.05, 0.2, 0.4, 0.7, 1.0, 1.5, 3.0])
def test_closing_the_terminal_ends_it_at_any_moment(tmp_path: Path, after_s: float) -> None:
    proc, master = _spawn(tmp_path, {"NO_COLOR": "1"})
    _drain(master, after_s)
    os.close(master)  # the terminal is gone: the kernel hangs up its session
    took = _ended_within(proc, LIMIT_S)
    assert took <= LIMIT_S, f"ended {took:.2f} s after the terminal closed"
    if after_s >= 3.0:  # running by then: the plans it opened are kept
        assert (tmp_path / "state" / "session.toml").is_file()


@pytest.mark.parametrize("after_s", [0.1, 0.6, 3.0])
def test_sigterm_ends_it_and_keeps_the_session(tmp_path: Path, after_s: float) -> None:
    proc, master = _spawn(tmp_path, {})
    try:
        _drain(master, after_s)
        proc.send_signal(signal.SIGTERM)
        start = time.monotonic()
        while proc.poll() is None and time.monotonic() - start < LIMIT_S + 3:
            _drain(master, 0.05)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        os.close(master)
    assert took <= LIMIT_S, f"ended {took:.2f} s after SIGTERM"
    if after_s >= 3.0:
        assert (tmp_path / "state" / "session.toml").is_file()


def test_without_a_terminal_it_says_so_and_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "trainmem"],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "TRAINMEM_STATE_DIR": str(tmp_path)},
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "needs a terminal" in lines[0]
