"""How long `plan --download` takes to fail without a network, and how many lines it prints.

    .venv/bin/python bench/download_offline_bench.py [--out FILE]

Runs the CLI in a subprocess (a fresh process, as a user's) against: the default endpoint
(what a machine without DNS sees), a loopback port with nothing listening (connection
refused), and HF_HUB_OFFLINE=1. Each case is timed from process start to exit.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app_bench import describe_machine


def run(env: dict[str, str]) -> tuple[float, int, int]:
    """(seconds, exit code, stderr lines) of one failing --download."""
    cli = "import sys; from trainmem.cli.main import main; sys.exit(main(sys.argv[1:]))"
    args = [sys.executable, "-c", cli, "plan", "--model", "acme/none"]
    start = time.perf_counter()
    done = subprocess.run(
        [*args, "--device", "24GB", "--download"], env=env, capture_output=True, text=True
    )
    return time.perf_counter() - start, done.returncode, len(done.stderr.strip().splitlines())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--out", type=Path, default=Path("bench/results/download_offline_bench.txt")
    )
    out = parser.parse_args().out
    with tempfile.TemporaryDirectory() as cache, socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()  # freed: connection refused
        base = {**os.environ, "TRAINMEM_CACHE_DIR": cache, "HF_HUB_DISABLE_TELEMETRY": "1"}
        for name in ("HF_ENDPOINT", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            base.pop(name, None)
        cases = {
            "default endpoint": base,
            "connection refused": {**base, "HF_ENDPOINT": f"http://127.0.0.1:{port}"},
            "HF_HUB_OFFLINE=1": {**base, "HF_HUB_OFFLINE": "1"},
        }
        lines = [f"# {describe_machine()}", "case: seconds to exit, exit code, stderr lines"]
        for name, env in cases.items():
            seconds, code, count = run(env)
            lines.append(f"{name}: {seconds:.2f} s, exit {code}, {count} line(s)")
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
