"""The training stack around the model: a hand-written loop keeps the model output.

Hand-computed from the loop's own tensors (docs/research/training-stacks.md section 3):
``out.logits`` is batch x seq x vocab in the output dtype, alive from the loss to the next
forward; without checkpointing ``out.past_key_values`` holds 2 x layers x tokens x kv_dim.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmem.core import Plan, estimate
from trainmem.core.plan import ATTENTION, METHODS, PRECISIONS
from trainmem.sources import catalog

SPEC = catalog.find("Qwen/Qwen2.5-0.5B").spec()  # type: ignore[union-attr]


def phases(plan: Plan) -> dict[str, int]:
    return estimate(plan, SPEC).phases


def test_the_loop_keeps_the_logits_through_backward_and_the_step():
    trainer = Plan(model="x", method="full", seq_len=512, batch=2, grad_ckpt=True)
    loop = replace(trainer, stack="loop")
    logits = 2 * 512 * SPEC.vocab * 2  # bf16 out.logits
    a, b = phases(trainer), phases(loop)
    assert a["forward"] == b["forward"]  # the logits exist in forward either way
    for moment in ("loss backward", "backward (last layer)", "optimizer step"):
        assert b[moment] - a[moment] == logits, moment


def test_without_checkpointing_the_loop_also_keeps_the_kv_cache():
    trainer = Plan(model="x", method="full", seq_len=512, batch=2, grad_ckpt=False)
    loop = replace(trainer, stack="loop")
    tokens = 2 * 512
    logits = tokens * SPEC.vocab * 2
    cache = 2 * SPEC.layers * tokens * SPEC.kv_dim * 2  # k and v, bf16, every layer
    a, b = phases(trainer), phases(loop)
    assert b["optimizer step"] - a["optimizer step"] == logits + cache
    # sdpa saves the cache tensors themselves: while every layer's saves are alive, no extra
    assert b["backward (last layer)"] - a["backward (last layer)"] == logits


def test_eager_attention_with_gqa_keeps_the_cache_beside_the_repeated_kv():
    assert SPEC.kv_heads != SPEC.heads
    plan = Plan(model="x", method="full", seq_len=256, batch=1, grad_ckpt=False, attn="eager")
    cache = 2 * SPEC.layers * 256 * SPEC.kv_dim * 2
    a, b = phases(plan), phases(replace(plan, stack="loop"))
    assert b["forward"] - a["forward"] == cache


@settings(max_examples=60, deadline=None)
@given(
    method=st.sampled_from(METHODS),
    precision=st.sampled_from(PRECISIONS),
    attn=st.sampled_from(ATTENTION),
    ckpt=st.booleans(),
    seq=st.integers(1, 4096),
    batch=st.integers(1, 8),
)
def test_keeping_the_output_never_costs_less(method, precision, attn, ckpt, seq, batch):
    plan = Plan(
        model="x",
        method=method,
        precision=precision,
        attn=attn,
        grad_ckpt=ckpt,
        seq_len=seq,
        batch=batch,
    )
    trainer, loop = estimate(plan, SPEC), estimate(replace(plan, stack="loop"), SPEC)
    assert all(loop.phases[m] >= trainer.phases[m] for m in trainer.phases)
    assert loop.allocated_bytes >= trainer.allocated_bytes


def test_an_unknown_stack_is_refused():
    with pytest.raises(ValueError, match="stack"):
        Plan(stack="axolotl-nightly").validated()
