"""FSDP1 MixedPrecision on the CPU (bench/measure/sharded.py --fsdp1-mp): one rank of a
2-rank FullyShardedDataParallel step under the fake process group, its starting states
hand-computed and its peak against the estimate.

Needs torch and transformers (the torch-tests extra); skipped cleanly without them.
"""

from __future__ import annotations

import sys
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
