"""The run probe's cost per training step on a tiny CPU loop (target: under 1% of step time).

Two figures, because a shared machine's step times wander by more than 1%:
- the probe's own time: every probe entry point (step begin and end, each phase mark from the
  model's hooks and the loop) timed with perf_counter and summed per step, against the median
  step time without the probe: the direct figure;
- A/B: median step time with the probe minus without, rounds interleaved so drift hits both;
- isolated: the same calls a step makes, in a tight loop without training (the probe's cost
  when the machine is not shared and caches are warm).

    .venv/bin/python bench/probe_bench.py [--steps 60] [--rounds 5] [--out FILE]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
import transformers

from trainmem.probe import RunProbe

SEQ, BATCH, VOCAB = 64, 2, 1024


def model() -> Any:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        hidden_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=344,
        vocab_size=VOCAB,
    )
    return transformers.LlamaForCausalLM(config)


class Timed:
    """Wraps the probe's entry points and sums the time spent inside them."""

    def __init__(self, probe: RunProbe) -> None:
        self.spent = 0.0
        self._depth = 0  # the hooks call phase(): time only the outermost call
        for name in ("begin_step", "end_step", "phase", "_pre_forward", "_post_forward"):
            setattr(probe, name, self._wrap(getattr(probe, name)))

    def _wrap(self, call: Any) -> Any:
        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            self._depth += 1
            try:
                return call(*a, **k)
            finally:
                self._depth -= 1
                if self._depth == 0:
                    self.spent += time.perf_counter() - t0

        return timed


def run(m: Any, opt: Any, batches: list[Any], probe: RunProbe | None) -> list[float]:
    times = []
    for ids in batches:
        t0 = time.perf_counter()
        if probe is not None:
            probe.begin_step()
        m(input_ids=ids, labels=ids).loss.backward()
        if probe is not None:
            probe.phase("optimizer")
        opt.step()
        opt.zero_grad()
        if probe is not None:
            probe.end_step()
        times.append(time.perf_counter() - t0)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path)
    ns = ap.parse_args(argv)
    torch.set_num_threads(1)  # one core: less thrashing on a shared machine
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    batches = [torch.randint(0, VOCAB, (BATCH, SEQ)) for _ in range(ns.steps)]
    run(m, opt, batches[:5], None)  # warm-up: optimizer state, allocator, kernels
    bare: list[float] = []
    probed: list[float] = []
    spent: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(ns.rounds):
            bare += run(m, opt, batches, None)
            probe = RunProbe(os.path.join(tmp, "bench.jsonl"), optimizer=opt)
            timer = Timed(probe)
            probe.watch(m)  # after wrapping, so the hooks are the timed ones
            probed += run(m, opt, batches, probe)
            spent.append(timer.spent / ns.steps)
            probe.close()
    probe = RunProbe(os.path.join(tempfile.gettempdir(), "probe-bench-isolated.jsonl"))
    probe.watch(m)
    n, t0 = 1000, time.perf_counter()
    for _ in range(n):
        probe.begin_step()
        probe._pre_forward(m, (), {"input_ids": batches[0]})
        probe._post_forward(m, (), None)
        probe.phase("optimizer")
        probe.end_step()
    isolated = (time.perf_counter() - t0) / n
    probe.close()
    os.unlink(probe.path)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    step = statistics.median(bare)
    own = statistics.median(spent)
    ab = statistics.median(probed) - step
    lines = [
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs ({platform.processor() or 'n/a'}),"
        f" {platform.system()} {platform.release()}, Python {sys.version.split()[0]},"
        f" torch {torch.__version__} (1 thread), transformers {transformers.__version__};"
        f" load average {load:.1f} at the end (other jobs share the machine)",
        f"loop: Llama 128 hidden x 2 layers, vocab {VOCAB}, batch {BATCH} x {SEQ} tokens, AdamW,"
        f" CPU; {ns.rounds} rounds x {ns.steps} steps each way, interleaved",
        f"median step without the probe: {step * 1e3:.2f} ms",
        f"probe's own time per step: {own * 1e6:.0f} us = {100 * own / step:.3f}% of the"
        " step (target < 1%)",
        f"isolated (the calls of one step, no training, {n} times): {isolated * 1e6:.0f} us ="
        f" {100 * isolated / step:.3f}% of the step",
        f"A/B median step difference: {ab * 1e3:+.3f} ms = {100 * ab / step:+.2f}%"
        " (noise included)",
        f"reproduce: .venv/bin/python bench/probe_bench.py --steps {ns.steps}"
        f" --rounds {ns.rounds} --out bench/results/probe_bench.txt",
    ]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if ns.out:
        ns.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
