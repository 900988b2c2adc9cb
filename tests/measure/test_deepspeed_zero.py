"""One real 2-process DeepSpeed ZeRO-2 step on the CPU (bench/measure/deepspeed_zero.py),
checked against hand-computed model states and against the estimate.

Needs torch, transformers and deepspeed (the torch-tests extra); skipped cleanly without them.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("deepspeed")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "measure"))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import deepspeed_zero
from tiny_llama import TINY

from trainmem.core.architecture import spec_from_config
from trainmem.core.estimator import estimate

pytestmark = pytest.mark.torch


def test_real_two_process_zero2_step() -> None:
    plan = deepspeed_zero.zero_plan(TINY["name"], 2, "none", True)
    plan = plan.__class__(**{**plan.to_dict(), "gpus": 2}).validated()
    ranks = deepspeed_zero.run_case(TINY["name"], 0, plan, {TINY["name"]: TINY})
    assert [r.get("error") for r in ranks] == [None, None], ranks
    assert all(r["optimizer_class"] == "DeepSpeedZeroOptimizer" for r in ranks)
    # Before the step, per rank: the whole model in bf16 (2 bytes per parameter) and this
    # rank's half of the fp32 master and of Adam's two fp32 moments (4 + 8 bytes per
    # parameter over 2), DeepSpeed padding its flat partition (stage_1_and_2.py
    # flatten_dense_tensors_aligned): a few hundred elements at most. The reduce bucket is
    # made when backward starts (setup_buckets), not kept between steps.
    params = 4096 * 128 + 2 * (128 * 128 * 2 + 128 * 64 * 2 + 3 * 128 * 256 + 2 * 128) + 128
    for r in ranks:
        states = r["start_bytes"]
        assert abs(states - (2 * params + 12 * params // 2)) <= 12 * 512, states
        assert r["host_peak_bytes"] == 0  # nothing offloaded
    entry = {**TINY, "model_type": "llama"}
    config = {k: v for k, v in entry.items() if k not in ("name", "architecture")}
    est = estimate(plan, spec_from_config(config, TINY["name"]), "cpu")
    measured = max(r["peak_allocated_bytes"] for r in ranks)
    assert abs(est.allocated_bytes - measured) / measured < 0.10, (est.allocated_bytes, measured)
