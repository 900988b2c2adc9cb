"""bench/measure/trace_events.py on one tiny case: the real step's allocation sequence traced,
and the synthetic sequence (trainmem.core.step_events) within the tolerance measured in
bench/results/trace-cpu.json.

Needs torch + transformers (skipped cleanly without them).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "measure"))

pytestmark = pytest.mark.torch

# The worst |synthetic - traced| / traced peak reserved over the real-execution cases of
# bench/results/trace-cpu.json (tiny random Llama and Qwen2 models), rounded up.
TOLERANCE_PCT = 11.0


def test_traced_sequence_and_synthetic_peak_reserved() -> None:
    import harness
    import trace_events as te
    from sequence import pack, unpack

    from trainmem.core.allocator import Alloc, Free

    plan = harness.measured_plan("full", "bf16", "adamw", 256, 2)
    rec = te.run(te.TINY["tiny-llama"], plan, "real")
    assert "error" not in rec, rec.get("traceback_tail")
    traced, synthetic = rec["traced"], rec["synthetic"]
    events = unpack(rec["sequence"])
    assert pack(events) == rec["sequence"]
    assert len(events) == traced["events"]
    # The events are the storage tracker's own accounting: the same peak of live bytes, and
    # every free is of a storage allocated before it.
    assert traced["tensors_peak"] == traced["tracker_peak"]
    allocated: set[int] = set()
    for event in events:
        if isinstance(event, Alloc):
            allocated.add(event.id)
        else:
            assert isinstance(event, Free) and event.id in allocated
            allocated.remove(event.id)
    # The loaded model comes first: its parameters' storages, then the buffers and input.
    loaded = 0
    for event in events:
        if not isinstance(event, Alloc) or loaded >= rec["facts"]["params_bytes"]:
            break
        loaded += event.size
    assert loaded == rec["facts"]["params_bytes"]
    assert traced["peak_where"].startswith(("step 1", "step 2"))
    assert traced["peak_reserved"] >= traced["peak_allocated"] >= traced["tensors_peak"]
    error = 100.0 * abs(synthetic["peak_reserved"] - traced["peak_reserved"])
    assert error / traced["peak_reserved"] <= TOLERANCE_PCT, (synthetic, traced)


def test_plan_trace_is_the_harness_trace() -> None:
    """trainmem.probe.trace (what `plan --trace` runs) records the same sequence as the bench's
    tracker for the same plan on fake tensors: the product's trace is the validated one."""
    import harness
    import trace_events as te

    from trainmem.core.architecture import spec_from_config
    from trainmem.probe.trace import trace_plan

    entry = te.TINY["tiny-qwen2"]
    plan = harness.lora("bf16-mixed", 8, "attention", seq_len=128, batch=2, grad_ckpt=True)
    bench, _ = te.trace(entry, plan, "fake")
    spec = spec_from_config(harness.config_dict(entry), entry["name"])
    probe = trace_plan(plan, spec)
    # Storages freed together (a graph node's saved tensors) may die in either order; with no
    # allocation between them the allocator ends in the same state whatever the order.
    assert _together(probe.events) == _together(bench.events)
    assert len(probe.events) == len(bench.events) > 1000
    assert probe.versions["torch"] == torch.__version__


def _together(events: Sequence[Any]) -> list[Any]:
    """The sequence with each run of consecutive frees as one sorted list."""
    from trainmem.core.allocator import Free

    out: list[Any] = []
    for event in events:
        if isinstance(event, Free) and out and isinstance(out[-1], list):
            out[-1].append(event.id)
            out[-1].sort()
        elif isinstance(event, Free):
            out.append([event.id])
        else:
            out.append(event)
    return out
