"""How long does the caching-allocator simulation take for a 10,000-event trace? (Run on an
idle machine.)

    .venv/bin/python bench/allocator_bench.py

The trace is built like a training step (seeded, so every run times the same events): a
forward pass that keeps activations of 32 layers with their temporaries freed at once, then a
backward pass that frees the activations in reverse while gradients come and go, repeated
until 10,000 events; sizes from 4 KiB to 300 MiB. Timed: ``simulate`` with the defaults, with
expandable_segments:True, and with a GPU small enough for the retry chain to release cached
segments; the median of 7 runs, each including the second pass that lists the segments at
the peak (but for the last line). Then whole plans, as `plan` and the dashboard run them: the
estimate with the simulated device peak (core/step_events.py + core/device_peak.py) against
the quick figure without it, for an 8B QLoRA and a 70B QLoRA at 4,096 tokens.
"""

from __future__ import annotations

import os
import platform
import random
import statistics
import sys
import time

from machine import cpu_name

from trainmem.core import device_peak
from trainmem.core.alloc_conf import parse_alloc_conf
from trainmem.core.allocator import Alloc, Event, Free, simulate
from trainmem.core.estimator import estimate
from trainmem.core.plan import Plan
from trainmem.planner.report import build_report
from trainmem.sources import catalog

MiB = 1024 * 1024


def training_trace(n: int, seed: int = 0) -> list[Event]:
    rng = random.Random(seed)
    events: list[Event] = []
    next_id = 0

    def alloc(size: int) -> int:
        nonlocal next_id
        events.append(Alloc(next_id, size))
        next_id += 1
        return next_id - 1

    while len(events) < n:
        saved = []
        for _ in range(32):  # forward: activations kept, temporaries freed
            saved += [alloc(rng.randrange(4096, 300 * MiB)) for _ in range(4)]
            temps = [alloc(rng.randrange(4096, 64 * MiB)) for _ in range(6)]
            events += [Free(t) for t in temps]
        for act in reversed(saved):  # backward: a gradient per activation, the activation freed
            grad = alloc(rng.randrange(4096, 128 * MiB))
            events.append(Free(act))
            events.append(Free(grad))
    return events[:n]


def timed(events: list[Event], **kwargs) -> tuple[float, object]:
    samples, sim = [], None
    for _ in range(7):
        start = time.perf_counter()
        sim = simulate(events, **kwargs)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples), sim


def main() -> None:
    events = training_trace(10_000)
    print(f"machine: {cpu_name()}, {os.cpu_count()} cores visible, {platform.platform()}")
    print(f"python {sys.version.split()[0]}; command: python bench/allocator_bench.py")
    print(f"trace: {len(events):,} events")
    unlimited = None
    for label, kwargs in (
        ("defaults, no capacity limit", {}),
        ("expandable_segments:True", {"config": parse_alloc_conf("expandable_segments:True")}),
        ("defaults, 80% of the unlimited peak", None),
        ("defaults, peaks only (peak_segments=False)", {"peak_segments": False}),
    ):
        if kwargs is None:
            assert unlimited is not None
            kwargs = {"capacity": int(unlimited.peak_reserved * 0.8)}
        seconds, sim = timed(events, **kwargs)
        if unlimited is None:
            unlimited = sim
        frees = sum(1 for e in sim.log if e.action == "segment_free")
        oom = f", OOM at event {sim.oom.event:,}" if sim.oom else ""
        print(
            f"{label:44s} {seconds * 1000:7.1f} ms  (peak reserved "
            f"{sim.peak_reserved / 2**30:.2f} GiB, {len(sim.log):,} segment actions, "
            f"{frees} released{oom})"
        )

    for model in ("meta-llama/Llama-3.1-8B", "meta-llama/Llama-3.3-70B-Instruct"):
        entry = catalog.find(model)
        assert entry is not None
        spec = entry.spec()
        plan = Plan(model=model, method="qlora", seq_len=4096, device="h100-80gb").validated()
        timings = {}
        for simulated in (True, False):
            samples = []
            for _ in range(7):
                device_peak.clear_cache()
                start = time.perf_counter()
                estimate(plan, spec, simulate=simulated)
                samples.append(time.perf_counter() - start)
            timings[simulated] = statistics.median(samples)
        peak = estimate(plan, spec).device_peak
        print(
            f"estimate {model.split('/')[1]:24s} simulated {timings[True] * 1000:6.1f} ms "
            f"({peak.events if peak else 0:,} events), quick {timings[False] * 1000:5.2f} ms"
        )
        samples = []
        for _ in range(3):
            device_peak.clear_cache()
            before = device_peak._device_peak.cache_info().misses
            start = time.perf_counter()
            build_report(plan, spec)
            samples.append(time.perf_counter() - start)
            runs = device_peak._device_peak.cache_info().misses - before
        print(
            f"report   {model.split('/')[1]:24s} on an H100 with its searches "
            f"{statistics.median(samples) * 1000:6.0f} ms ({runs} simulations)"
        )


if __name__ == "__main__":
    main()
