"""The mlx stack's own rules and remedies: mlx-lm's loss and one Mac are all it plans, and
its advice names mlx_lm.lora's switches, never a torch stack's (Unsloth, Liger, 8-bit AdamW,
sharding)."""

from __future__ import annotations

import pytest

from trainmem.core.errors import PlanError
from trainmem.core.fit import Budget
from trainmem.core.plan import Plan
from trainmem.core.whatif import advice, need
from trainmem.sources import catalog

GB = 10**9
SPEC = catalog.find("Qwen/Qwen2.5-7B").spec()  # type: ignore[union-attr]


def mlx(**kw: object) -> Plan:
    return Plan(**{"model": "Qwen/Qwen2.5-7B", "stack": "mlx", **kw})  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kw", "field"),
    [({"loss": "fused"}, "loss"), ({"loss": "chunked"}, "loss"), ({"gpus": 2}, "gpus")],
)
def test_what_the_mlx_stack_cannot_plan_is_refused_by_field(kw, field) -> None:
    with pytest.raises(PlanError) as err:
        mlx(**kw).validated()
    assert err.value.field == field


def test_mlx_advice_is_mlx_lms_own() -> None:
    plan = mlx(method="full", grad_ckpt=False, mlx_num_layers=-1, device="mac-64GB")
    budget = Budget(48 * GB, "unified")
    tips = advice(plan, SPEC, budget)
    text = " ".join(t.action for t in tips)
    for torch_only in ("Unsloth", "Liger", "8-bit AdamW", "FSDP", "ZeRO", "bf16 (TRL"):
        assert torch_only not in text
    assert "--grad-checkpoint" in text and "--fine-tune-type lora" in text
    fewer = next(t for t in tips if "--num-layers" in t.action)
    assert dict(fewer.changes) == {"mlx_num_layers": SPEC.layers // 2}
    # each remedy is the plan re-estimated with its change, as for every stack
    assert fewer.saves_bytes == need(plan, SPEC, budget) - need(
        mlx(method="full", grad_ckpt=False, mlx_num_layers=SPEC.layers // 2), SPEC, budget
    )


def test_torch_only_fields_do_not_apply_to_an_mlx_plan_and_say_so() -> None:
    from trainmem.core.estimator import estimate
    from trainmem.core.plan import FIELDS_BY_NAME

    plan = mlx(method="qlora", attn="eager", alloc_conf="expandable_segments:True")
    off = {"quant", "kbit_prep", "attn", "alloc_conf", "gpus", "strategy", "packing"}
    assert all(not FIELDS_BY_NAME[name].applies(plan) for name in off)  # dimmed in the form
    assert all(FIELDS_BY_NAME[name].applies(mlx(method="qlora", stack="trl")) for name in off)
    assert set(plan.ignored_fields()) == {"attn", "alloc_conf"}
    notes = estimate(plan.validated(), SPEC, runtime="unified").notes
    assert "attn, alloc_conf do not apply to this plan and change nothing" in notes
