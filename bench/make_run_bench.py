"""Time from `make run` to the dashboard's first frame, in a real pseudo-terminal.

    .venv/bin/python bench/make_run_bench.py [--runs 5] [--out bench/results/make_run_bench.txt]

Run it in a checkout that `make run` has set up once (it installs first if not). Three ways to
start the same dashboard, each from process start until the first frame is on the screen
(app_bench.py's pty at 120x40), start-ups interleaved so drift hits each alike:

* `make run`, installed: scripts/install.sh finds its stamp and launches at once;
* `make run`, reinstalling: FORCE_INSTALL=1, so pip reinstalls the editable package first,
  which is what scripts/run.sh did on every launch before the stamp;
* the entry point alone (.venv/bin/trainmem-tui), the floor `make run` can reach.

The reinstall runs pip on this checkout's .venv: run the bench in a clone of its own, not in a
.venv other people are using. Python writes bytecode as it would for a user (the first, warm-up
start-up of each writes it).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from app_bench import COLS, ROWS, Pty, commit, describe_machine, publish

ROOT = Path(__file__).resolve().parent.parent
READY = b"Estimate"  # in the dashboard's first frame


def first_frame(argv: list[str], env: dict[str, str]) -> float:
    pty = Pty(argv, env)
    try:
        return pty.wait_for(READY, timeout=120.0)
    finally:
        pty.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="start-ups per way (median)")
    parser.add_argument("--out", type=Path, help="also write the report here")
    args = parser.parse_args()

    subprocess.run([str(ROOT / "scripts" / "install.sh")], check=True)  # installed checkout
    os.chdir(ROOT)
    with tempfile.TemporaryDirectory() as state:
        env = {
            **os.environ,
            "TERM": "xterm-256color",
            "COLUMNS": str(COLS),
            "LINES": str(ROWS),
            "TRAINMEM_STATE_DIR": state,  # a fresh session, never the developer's
            "HF_HUB_CACHE": state,
        }
        env.pop("NO_COLOR", None)
        env.pop("FORCE_INSTALL", None)
        make = ["make", "--no-print-directory", "run", "ARGS=--interval 1"]
        ways = [
            ("make run, installed", make, env),
            ("make run, reinstalling (FORCE_INSTALL=1)", make, {**env, "FORCE_INSTALL": "1"}),
            (
                "the entry point alone",
                [str(ROOT / ".venv" / "bin" / "trainmem-tui"), "--interval", "1"],
                env,
            ),
        ]
        for _, argv, way_env in ways:  # warm the file cache and write the bytecode
            first_frame(argv, way_env)
        times: dict[str, list[float]] = {name: [] for name, _, _ in ways}
        for _ in range(args.runs):
            for name, argv, way_env in ways:
                times[name].append(first_frame(argv, way_env))

    floor = statistics.median(times[ways[2][0]])
    lines = [
        "time from `make run` to the dashboard's first frame, on an installed checkout",
        f"machine: {describe_machine()}, nproc {len(os.sched_getaffinity(0))}",
        f"commit: {commit()}",
        f"terminal: pty {COLS}x{ROWS}, TERM=xterm-256color; {args.runs} start-ups each "
        "(after one warm-up), interleaved",
        "reproduce: git clone <this repo> /tmp/c && cd /tmp/c && make run ARGS=--version && "
        f".venv/bin/python bench/make_run_bench.py --runs {args.runs} "
        "--out bench/results/make_run_bench.txt",
        "",
        f"{'way':<44}{'median':>8}{'min':>8}{'max':>8}  vs the entry point alone",
    ]
    for name, _, _ in ways:
        t = times[name]
        med = statistics.median(t)
        lines.append(
            f"{name:<44}{med:>7.2f}s{min(t):>7.2f}s{max(t):>7.2f}s  {med / floor:.2f}x"
            f" ({med - floor:+.2f} s)"
        )
    publish("\n".join(lines) + "\n", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
