"""The parallel layout is one record computed with the estimate and carried in it
(Estimate.layout), which the dashboard's sharding panel and the advice read."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainmem.core.estimator import estimate
from trainmem.core.plan import Plan
from trainmem.core.sharding import SINGLE, layout
from trainmem.sources import catalog

SPEC = catalog.find("Qwen/Qwen2.5-0.5B").spec()  # type: ignore[union-attr]
BASE = Plan(model="Qwen/Qwen2.5-0.5B", method="full", seq_len=512)


@pytest.mark.parametrize(
    ("changes", "strategy", "shard", "sharded"),
    [
        ({}, "single", 1, (False, False, False)),
        ({"gpus": 4}, "ddp", 1, (False, False, False)),
        ({"gpus": 4, "strategy": "fsdp"}, "fsdp", 4, (True, True, True)),
        (
            {"gpus": 4, "nodes": 2, "strategy": "fsdp", "fsdp": "hybrid-shard"},
            "fsdp",
            4,
            (True, True, True),
        ),
        ({"gpus": 4, "strategy": "zero", "zero": 2}, "zero", 4, (True, True, False)),
        ({"gpus": 2, "nodes": 2, "strategy": "zero", "zero": 3}, "zero", 4, (True, True, True)),
    ],
)
def test_the_estimate_carries_its_layout(changes, strategy, shard, sharded):
    plan = replace(BASE, **changes).validated()
    est = estimate(plan, SPEC)
    lay = est.layout
    assert lay == layout(plan)
    assert (lay.strategy, lay.shard, lay.world) == (strategy, shard, plan.world)
    assert (lay.optimizer, lay.gradients, lay.weights) == sharded


def test_one_gpu_is_the_single_layout():
    assert estimate(BASE.validated(), SPEC).layout is SINGLE
