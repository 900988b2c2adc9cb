"""What following a long run costs the dashboard's monitor: memory held and the time of one
poll that finds one new step, after N steps (run on an idle machine).

    .venv/bin/python bench/run_log_bench.py [--steps 1000 100000]

For each N a run log of N steps is written in the probe's format (trainmem.core.run_log; the
figures vary step to step), read to its end by the monitor's poller (trainmem.app.runs
.RunLogPoller: the tail folds each step and keeps none), then one step is appended and the
next poll timed (median of 5, each after its own appended step): it reads that step and
rebuilds the comparison. Memory: tracemalloc's count of what the tail holds after the whole
read, beside a tail keeping every step (what `run-report` reads, and what the monitor held
before it folded them).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from machine import cpu_name

from trainmem.app.runs import RunLogPoller
from trainmem.core.run_log import FORMAT_VERSION, RUN, STEP
from trainmem.sources import catalog
from trainmem.sources.run_logs import RunLogTail

MiB, GiB = 2**20, 2**30
MODEL = "meta-llama/Llama-3.2-1B"  # its config.json, as the probe would log it


def run_record() -> dict[str, Any]:
    entry = catalog.find(MODEL)
    assert entry is not None
    config = entry.config
    return {
        "format": FORMAT_VERSION,
        "kind": RUN,
        "rank": 0,
        "world_size": 1,
        "device": {"type": "cuda", "name": "NVIDIA H100 80GB HBM3", "total_bytes": 80 * GiB},
        "peaks": "exact",
        "plan": {"method": "lora", "seq_len": 2048, "batch": 4, "precision": "bf16"},
        "observed": ["batch", "seq_len"],
        "model": {"name": MODEL, "config": config},
    }


def step_record(i: int) -> dict[str, Any]:
    alloc, reserved = (20 + i % 7) * GiB, (24 + i % 5) * GiB
    phase = {"max_allocated_bytes": alloc, "max_reserved_bytes": reserved}
    return {
        "kind": STEP,
        "step": i,
        "time": 1.7e9 + i,
        "duration_s": 0.41,
        "allocated_bytes": alloc // 2,
        "reserved_bytes": reserved,
        "max_allocated_bytes": alloc,
        "max_reserved_bytes": reserved,
        "driver_bytes": reserved + 600 * MiB,
        "free_bytes": 80 * GiB - reserved - 600 * MiB,
        "total_bytes": 80 * GiB,
        "phases": {"forward": phase, "backward": phase, "optimizer": phase},
        "batch": 4,
        "seq_len": 1024 + i % 1024,
    }


def held(path: Path, keep: bool) -> int:
    tracemalloc.start()
    tail = RunLogTail(path, keep_steps=keep)
    tail.poll()
    while tail.more:
        tail.poll()
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[1000, 100_000])
    args = parser.parse_args()
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores visible, {platform.platform()}")
    print(f"python {sys.version.split()[0]}; command: python bench/run_log_bench.py")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.steps:
            path = Path(tmp) / f"run-{n}.jsonl"
            with path.open("w") as f:
                f.write(json.dumps(run_record()) + "\n")
                f.writelines(json.dumps(step_record(i)) + "\n" for i in range(1, n + 1))
            poller = RunLogPoller(path)
            start = time.perf_counter()
            seen = poller()
            while poller._tails[path].more:
                seen = poller() or seen
            first = time.perf_counter() - start
            samples = []
            for extra in range(1, 6):
                with path.open("a") as f:
                    f.write(json.dumps(step_record(n + extra)) + "\n")
                start = time.perf_counter()
                seen = poller() or seen
                samples.append(time.perf_counter() - start)
            assert seen is not None and seen.reports[0].step_count == n + 5
            megabytes = path.stat().st_size / 1e6
            folded, kept = held(path, False) / MiB, held(path, True) / MiB
            print(
                f"{n:>9,} steps ({megabytes:6.1f} MB): first read {first:6.2f} s, a poll with "
                f"one new step {statistics.median(samples) * 1000:6.2f} ms; held: folded "
                f"{folded:6.2f} MiB, every step kept {kept:7.1f} MiB"
            )


if __name__ == "__main__":
    main()
