"""FSDP1 MixedPrecision on the CPU (bench/measure/sharded.py --fsdp1-mp): one rank of a
2-rank FullyShardedDataParallel step under the fake process group, its starting states
hand-computed and its peak against the estimate.

Needs torch and transformers (the torch-tests extra); skipped cleanly without them.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "measure"))
import sharded
from tiny_llama import TINY as TINY_LLAMA

from trainmem.core.architecture import spec_from_config
from trainmem.core.estimator import estimate

pytestmark = pytest.mark.torch

TINY = TINY_LLAMA
PARAMS = 4096 * 128 + 2 * (128 * 128 * 2 + 128 * 64 * 2 + 3 * 128 * 256 + 2 * 128) + 128


@pytest.mark.parametrize("reduce", ["16-bit", "fp32"])
def test_fsdp1_mixed_precision_step_on_the_cpu(reduce):
    plan = sharded.sharded_plan(
        TINY["name"], "full", 2, "full-shard", 1, True, "bf16-mixed", reduce, seq_len=64
    )
    m = sharded._fake_run(TINY, plan)
    # the rank's half of the fp32 flat parameters and of AdamW's two fp32 moments (FSDP1
    # pads each flat parameter to a multiple of the world: a few elements) and the rotary
    # buffer, beside the int64 input ids, before the step
    states = m["start_bytes"] - 8 * 64
    assert abs(states - 12 * PARAMS // 2) <= 12 * 16, m["start_bytes"]
    config = {k: v for k, v in TINY.items() if k not in ("name", "architecture")}
    est = estimate(plan, spec_from_config(config, TINY["name"]), "cpu")
    measured = m["peak_allocated_bytes"]
    assert abs(est.allocated_bytes - measured) / measured < 0.03, (est.allocated_bytes, measured)


@pytest.mark.parametrize("prefetch", ["backward-pre", "none"])
def test_fsdp1_backward_prefetch_holds_one_more_layer_in_backward(prefetch):
    """FullyShardedDataParallel with backward_prefetch BACKWARD_PRE (torch's default) or
    None (what the Trainer passes: transformers training_args.py:2875 NO_PREFETCH), without
    checkpointing so that the peak is in a layer's backward: each within 1% of the estimate,
    and the estimates differ by the one layer unit BACKWARD_PRE gathers ahead."""
    base = sharded.sharded_plan(
        TINY["name"], "full", 2, "full-shard", 1, False, "bf16-mixed", "16-bit", seq_len=64
    )
    plan = replace(base, backward_prefetch=prefetch).validated()
    assert plan.prefetches_backward is (prefetch == "backward-pre")
    measured = sharded._fake_run(TINY, plan)["peak_allocated_bytes"]
    config = {k: v for k, v in TINY.items() if k not in ("name", "architecture")}
    spec = spec_from_config(config, TINY["name"])
    est = estimate(plan, spec, "cpu").allocated_bytes
    assert abs(est - measured) / measured < 0.01, (est, measured)
    other = replace(plan, backward_prefetch="none" if prefetch != "none" else "backward-pre")
    layer = 128 * 128 * 2 + 128 * 64 * 2 + 3 * 128 * 256 + 2 * 128  # one unit, gathered
    gap = abs(est - estimate(other.validated(), spec, "cpu").allocated_bytes)
    assert gap == 2 * layer  # in bf16 (measured: 10,109,300 - 9,813,876 = 295,424 bytes)
