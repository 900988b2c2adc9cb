"""Cost of the device sampler: CPU time per sample, and memory over 100,000 samples.

Reproduce (about 5 minutes on 2 cores; tracemalloc slows the memory run several times):

    PYTHONPATH=src .venv/bin/python bench/devices_sampler.py > bench/results/devices_sampler.txt

NVML is the test double (trainmem.devices.fakes), so this measures our code, not the driver;
on a real GPU each NVML call adds its own cost (roughly 5-6 calls per GPU per sample). System
RAM goes through the psutil double too, except in the line marked "real psutil".
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import platform
import sys
import time
import tracemalloc
from typing import Any

from machine import cpu_name

from trainmem.devices import NvmlReader, Sampler, SystemReader
from trainmem.devices.fakes import (
    FakeGpu,
    FakeNvml,
    FakeProc,
    FakeProcess,
    FakePsutil,
    eight_gpu_machine,
)

MiB = 2**20
psutil: Any = importlib.import_module("psutil")  # imported so: psutil ships no type stubs


def make_sampler(n_gpus: int, *, real_psutil: bool = False) -> tuple[Sampler, FakeNvml]:
    if n_gpus == 8:
        fake = eight_gpu_machine()
    else:
        gpu = FakeGpu(used=20_000 * MiB, processes=[FakeProcess(1000, 19_000 * MiB)])
        fake = FakeNvml([gpu])
    pids = {p.pid for g in fake.gpus for p in g.processes}
    if real_psutil:
        system = SystemReader()
    else:
        system = SystemReader(FakePsutil(processes={p: FakeProc() for p in pids}))
    nvml = NvmlReader(module=fake, register_atexit=False)
    return Sampler(nvml=nvml, system=system, apple=False), fake


def cpu_per_sample(n_gpus: int, samples: int, *, real_psutil: bool = False) -> float:
    sampler, fake = make_sampler(n_gpus, real_psutil=real_psutil)
    for _ in range(200):  # warm up: NVML init, caches, first history entries
        sampler.sample_once()
    t0 = time.process_time()
    for i in range(samples):
        fake.gpus[0].used = (20_000 + i % 1000) * MiB
        sampler.sample_once()
    return (time.process_time() - t0) / samples


def memory_run(total: int, checkpoints: list[int]) -> list[tuple[int, float, float, int, int]]:
    """8 GPUs, and a new PID on GPU 7 every sample: the worst case for per-process peaks."""
    sampler, fake = make_sampler(8)
    me = psutil.Process()
    rows = []
    tracemalloc.start()
    for i in range(1, total + 1):
        fake.gpus[0].used = (20_000 + i % 1000) * MiB
        fake.gpus[7].processes[-1].pid = 100_000 + i
        sampler.sample_once()
        if i in checkpoints:
            gc.collect()
            traced = tracemalloc.get_traced_memory()[0] / MiB
            rss = me.memory_info().rss / MiB
            history = len(sampler.history("gpu0"))
            rows.append((i, traced, rss, history, len(sampler.peaks().processes)))
    tracemalloc.stop()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=100_000, help="memory run length")
    args = parser.parse_args()
    print("trainmem devices sampler benchmark")
    print(f"command:  PYTHONPATH=src {os.path.relpath(sys.executable)} bench/devices_sampler.py")
    print(f"machine:  {platform.platform()}; {cpu_name()}; {os.cpu_count()} logical CPUs")
    print(f"python:   {platform.python_implementation()} {platform.python_version()}")
    print(f"date:     {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    print()
    print("CPU time per sample (time.process_time over 5000 samples, after 200 warm-up)")
    for n in (1, 8):
        per = cpu_per_sample(n, 5000)
        print(f"  {n} GPU(s) in the NVML double, psutil double:  {per * 1e6:7.1f} us/sample")
    per = cpu_per_sample(8, 2000, real_psutil=True)
    print(f"  8 GPU(s) in the NVML double, real psutil:     {per * 1e6:7.1f} us/sample")
    print("  At the default 1 s interval, 1000 us/sample would be 0.1% of one core.")
    print()
    print(f"Memory over {args.samples:,} samples: 8 GPUs, a new PID every sample; history bound")
    print("3600 points per device, per-process peaks bound 4096; tracemalloc on throughout.")
    print(f"  {'samples':>8}  {'traced MiB':>10}  {'RSS MiB':>8}  {'history':>8}  {'peaks':>6}")
    t0 = time.perf_counter()
    marks = [1_000, 10_000, 25_000, 50_000, 75_000, 100_000]
    marks = [m for m in marks if m < args.samples] + [args.samples]
    for i, traced, rss, history, peaks in memory_run(args.samples, marks):
        print(f"  {i:>8}  {traced:>10.2f}  {rss:>8.1f}  {history:>8}  {peaks:>6}")
    print(f"  (memory run: {time.perf_counter() - t0:.0f} s wall)")


if __name__ == "__main__":
    main()
