"""Dashboard speed, side by side with a bare Textual app, in a real pseudo-terminal.

    .venv/bin/python bench/app_bench.py [--runs 5] [--idle 20] [--out bench/results/app_bench.txt]

Both apps run as separate processes on a pty at 120x40, through Textual's real Linux driver:

* time to first frame: process start until the first frame is on the "screen";
* keystroke-to-repaint: a key written to the pty until the repaint it causes arrives (the
  dashboard: a digit typed into the sequence length and deleted again, so every key is an edit
  that re-estimates the plan; the bare app: a character typed into an Input);
* idle CPU: CPU time over ``--idle`` seconds with the dashboard sampling devices at 1 Hz and
  the bare app running its 1 Hz timer, as % of one core;
* resident memory (RSS) after the idle period.

The bare app is a hello app with a 1 Hz timer (and an Input, so a key has something to repaint).
Each figure is reported with the ratio dashboard / bare. Targets: start-up and RSS within
1.5x of the bare app, repaint under 50 ms, idle CPU under 2% of a core.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import platform
import select
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import psutil
from machine import cpu_name

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
COLS, ROWS = 120, 40

BARE_APP = textwrap.dedent(
    """
    from textual.app import App
    from textual.widgets import Input, Static

    class Hello(App):
        def compose(self):
            yield Static("hello", id="hello")
            yield Static("0", id="ticks")
            yield Input()

        def on_mount(self):
            self.ticks = 0
            self.set_interval(1, self.tick)

        def tick(self):
            self.ticks += 1
            self.query_one("#ticks", Static).update(str(self.ticks))

    Hello().run()
    """
)


@dataclass
class Subject:
    name: str
    argv: list[str]
    ready: bytes  # appears in the first frame
    keys: list[bytes]  # pressed once after start, to reach the field the bench types into
    edit: tuple[bytes, bytes]  # typed alternately: each one repaints


def subjects(state: str) -> list[Subject]:
    bare = Path(state) / "bare_app.py"
    bare.write_text(BARE_APP)
    return [
        Subject("bare Textual app", [PY, str(bare)], b"hello", [], (b"x", b"\x7f")),
        Subject(
            "trainmem-tui",
            [PY, "-m", "trainmem", "--interval", "1"],
            b"Estimate",
            [b"\t", b"\t", b"\x1b[F"],  # model -> method -> seq length, cursor to the end
            (b"1", b"\x7f"),  # 2048 -> 20481 -> 2048: two re-estimates
        ),
    ]


class Pty:
    """A child process on a pseudo-terminal of COLS x ROWS."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLS, 0, 0))
        self.start = time.perf_counter()
        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
        )
        os.close(slave)
        self.buffer = b""

    def read(self, timeout: float) -> bytes:
        ready, _, _ = select.select([self.master], [], [], timeout)
        if not ready:
            return b""
        try:
            data = os.read(self.master, 1 << 16)
        except OSError:
            return b""
        self.buffer += data
        return data

    def wait_for(self, marker: bytes, timeout: float = 30.0) -> float:
        """Seconds since start when ``marker`` was first written."""
        deadline = time.perf_counter() + timeout
        while marker not in self.buffer:
            if time.perf_counter() > deadline:
                raise TimeoutError(f"no {marker!r} within {timeout}s")
            self.read(0.05)
        return time.perf_counter() - self.start

    def drain(self, quiet: float = 0.3, limit: float = 3.0) -> None:
        """Read until nothing has arrived for ``quiet`` seconds (both apps write once a
        second, so ``quiet`` must stay well under that), or for ``limit`` seconds at most."""
        deadline = time.perf_counter() + limit
        while self.read(quiet) and time.perf_counter() < deadline:
            pass

    def close(self) -> None:
        """Quit with ctrl+q; failing that, kill the child's process group. Never leave one
        behind: an app whose terminal is gone may spin on its closed input."""
        try:
            os.write(self.master, b"\x11")  # ctrl+q
            self.proc.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        os.close(self.master)


def first_frame(subject: Subject, env: dict[str, str]) -> float:
    pty = Pty(subject.argv, env)
    try:
        return pty.wait_for(subject.ready)
    finally:
        pty.close()


def repaint_latency(pty: Pty, subject: Subject, presses: int) -> list[float]:
    for key in subject.keys:
        os.write(pty.master, key)
        pty.drain(0.2)
    times = []
    for i in range(presses):
        pty.drain(0.15)  # let a what-if repaint or a timer tick pass first
        os.write(pty.master, subject.edit[i % 2])
        sent = time.perf_counter()
        if pty.read(2.0):
            times.append(time.perf_counter() - sent)
    return times


def idle(pty: Pty, seconds: float) -> tuple[float, int]:
    """% of one core over ``seconds`` and the RSS after, while the app idles."""
    proc = psutil.Process(pty.proc.pid)
    pty.drain(0.5)
    cpu0, wall0 = sum(proc.cpu_times()[:2]), time.perf_counter()
    deadline = wall0 + seconds
    while time.perf_counter() < deadline:
        pty.read(0.5)  # keep the pty drained so the app never blocks writing
    cpu = sum(proc.cpu_times()[:2]) - cpu0
    return 100 * cpu / (time.perf_counter() - wall0), proc.memory_info().rss


def describe_machine() -> str:
    cpu = cpu_name()
    import textual

    load = "/".join(f"{x:.1f}" for x in os.getloadavg())
    return (
        f"{cpu}, {os.cpu_count()} cores visible, {psutil.virtual_memory().total / 2**30:.0f} GiB "
        f"RAM, {platform.system()} {platform.release()}, Python {platform.python_version()}, "
        f"Textual {textual.__version__}, load average {load} (1/5/15 min, at the start: other "
        "work on the machine slows every figure)"
    )


def commit() -> str:
    """The commit measured, and whether src/ differs from it."""

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=ROOT, capture_output=True, text=True, check=False
        ).stdout.strip()

    dirty = (
        " (with uncommitted changes to src/)" if git("status", "--porcelain", "--", "src") else ""
    )
    return (git("log", "-1", "--format=%h %s")[:100] or "unknown") + dirty


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="start-ups per app (median)")
    parser.add_argument("--presses", type=int, default=40, help="keystrokes per app")
    parser.add_argument("--idle", type=float, default=20.0, help="idle seconds per app")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()

    # Byte-compile our sources first, as pip does when it installs a wheel: an editable install
    # under PYTHONDONTWRITEBYTECODE (set here) would otherwise compile every module at every
    # start, a cost the bare app (Textual's own .pyc files) never pays and users do not either.
    import compileall

    import trainmem

    compileall.compile_dir(str(Path(trainmem.__file__).parent), quiet=1)

    with tempfile.TemporaryDirectory() as state:
        env = {
            **os.environ,
            "TERM": "xterm-256color",
            "COLUMNS": str(COLS),
            "LINES": str(ROWS),
            "TRAINMEM_STATE_DIR": state,  # a fresh session, never the developer's
            "HF_HUB_CACHE": state,
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        env.pop("NO_COLOR", None)
        results: dict[str, dict[str, float]] = {}
        subs = subjects(state)
        for subject in subs:  # warm the OS file cache so neither pays for a cold disk
            first_frame(subject, env)
        starts: dict[str, list[float]] = {s.name: [] for s in subs}
        for _ in range(args.runs):  # interleaved, so drift hits both alike
            for subject in subs:
                starts[subject.name].append(first_frame(subject, env))
        for subject in subs:
            pty = Pty(subject.argv, env)
            try:
                pty.wait_for(subject.ready)
                pty.drain(0.5)
                lat = repaint_latency(pty, subject, args.presses)
                cpu, rss = idle(pty, args.idle)
            finally:
                pty.close()
            results[subject.name] = {
                "start_s": statistics.median(starts[subject.name]),
                "repaint_ms": 1000 * statistics.median(lat),
                "repaint_p95_ms": 1000 * sorted(lat)[int(0.95 * (len(lat) - 1))],
                "idle_cpu_pct": cpu,
                "rss_mib": rss / 2**20,
            }

    bare, dash = results[subs[0].name], results[subs[1].name]
    rows = [
        ("time to first frame (median)", "start_s", "s", 1.5, "ratio"),
        ("keystroke to repaint (median)", "repaint_ms", "ms", 50, "abs"),
        ("keystroke to repaint (p95)", "repaint_p95_ms", "ms", None, ""),
        (f"idle CPU, {args.idle:.0f} s, 1 Hz", "idle_cpu_pct", "% core", 2.0, "abs"),
        ("resident memory (RSS)", "rss_mib", "MiB", 1.5, "ratio"),
    ]
    lines = [
        "trainmem-tui dashboard vs a bare Textual app (hello + 1 Hz timer), same run",
        f"machine: {describe_machine()}, nproc {len(os.sched_getaffinity(0))}",
        f"commit: {commit()}",
        f"terminal: pty {COLS}x{ROWS}, TERM=xterm-256color; {args.runs} start-ups each, "
        f"{args.presses} keystrokes each",
        "reproduce: .venv/bin/python bench/app_bench.py --out bench/results/app_bench.txt",
        "trainmem's sources byte-compiled first (as a wheel install does); both apps run with "
        "PYTHONDONTWRITEBYTECODE=1",
        "",
        f"{'measure':<32}{'bare':>10}{'trainmem':>10}{'ratio':>8}  target",
    ]
    for label, key, unit, target, kind in rows:
        ratio = dash[key] / bare[key] if bare[key] else float("inf")
        if kind == "ratio":
            verdict = f"<= {target}x bare: {'met' if ratio <= target else 'MISSED'}"
        elif kind == "abs":
            verdict = f"< {target} {unit}: {'met' if dash[key] < target else 'MISSED'}"
        else:
            verdict = ""
        lines.append(
            f"{label:<32}{bare[key]:>9.3g}{'':1}{dash[key]:>9.3g}{'':1}{ratio:>7.2f}x  "
            f"{unit}; {verdict}".rstrip("; ")
        )
    publish("\n".join(lines) + "\n", args.out)
    return 0


def publish(report: str, out: Path | None) -> None:
    """Print the report and, with --out, write it (the folder made if needed)."""
    print(report, end="")
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(report)


if __name__ == "__main__":
    raise SystemExit(main())
