"""What every command does when its stdout cannot take the output: a full disk, a stdout
closed before the start, a reader that goes away. One line on stderr and status 1 for the
first two (as `devices` words it), status 141 and nothing on stderr for a closed pipe, in the
text output as in --json: never a traceback, and never the status --check gives a plan that
does not fit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

PLAN = ["plan", "--model", "1M", "--device", "80GiB"]


def _run(args: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.run(
        [sys.executable, "-m", "trainmem", *args],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        timeout=120,
        check=False,
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full")
@pytest.mark.parametrize("args", [PLAN, [*PLAN, "--json"], ["devices", "--json"]])
def test_a_full_disk_is_one_line_and_status_1(args: list[str]) -> None:
    with open("/dev/full", "w") as full:
        done = _run(args, stdout=full)
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1 and "cannot write to stdout: No space left" in done.stderr


def test_a_stdout_closed_before_the_start_is_one_line_and_status_1() -> None:
    done = _run([*PLAN, "--json"], stdout=None, pass_fds=(), close_fds=True, preexec_fn=_close_1)
    assert done.returncode == 1
    assert done.stderr == "trainmem-tui plan: error: cannot write to stdout: closed\n"


def _close_1() -> None:
    os.close(1)


def test_a_closed_pipe_on_the_text_output_is_141_not_the_checks_1() -> None:
    """rich turns a broken pipe into SystemExit(1), which `--check` means as "too big"."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainmem", *PLAN, "--check"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # gone before the first line
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141 and err == ""
