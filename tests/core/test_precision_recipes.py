"""Precision recipes of sharded training (issue 18): which recipe a plan runs under, each
recipe's states hand-computed, gathered units, reduce buffers and activations in its dtypes,
a 70B full fine-tune over 4 nodes of 8 GPUs planned as its recipe implies, and per-GPU memory
that never grows with GPUs."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_sharding import LAYERS, SPEC, H, P, V  # the same tiny Llama

from trainmem.core.estimator import estimate, step_sizes
from trainmem.core.plan import Plan
from trainmem.core.precision import dtypes
from trainmem.core.recipes import RECIPE_RECORDS, recipe, recipe_record
from trainmem.core.stacks import STACK_RECORDS
from trainmem.core.states import model_states
from trainmem.sources import catalog

# a layer's trainable elements as the estimate divides them (the final norm spread over layers)
LAYER_TRAINABLE = (P - 2 * V * H) // LAYERS
N = 4  # every dimension above divides by 4: no FSDP2 padding


def plan(**kw):
    base = dict(
        model="tiny",
        method="full",
        precision="bf16-mixed",
        strategy="fsdp",
        gpus=N,
        seq_len=8,
        batch=1,
        device="80GB",
    )
    return Plan(**{**base, **kw}).validated()


def states(p):
    return model_states(SPEC, p, dtypes(p))


# --- which recipe a plan runs under ------------------------------------------------------


@pytest.mark.parametrize(
    ("kw", "name", "reduce"),
    [
        ({}, "fsdp2-accelerate", 2),  # the Trainer through accelerate: bf16 reduce
        (dict(stack="trl"), "fsdp2-accelerate", 2),
        (dict(stack="llama-factory"), "fsdp2-accelerate", 2),
        (dict(stack="axolotl"), "fsdp2-axolotl", 2),
        (dict(stack="loop"), "fsdp2-torch", 4),  # PyTorch's FSDP2 recipe reduces in fp32
        (dict(reduce_dtype="fp32"), "fsdp2-accelerate", 4),
        (dict(stack="loop", reduce_dtype="16-bit"), "fsdp2-torch", 2),
        (dict(fsdp_version=1), "fsdp1-accelerate", 2),
        (dict(precision="fp16-mixed"), "fsdp2-accelerate", 2),
        (dict(strategy="zero", zero=3), "zero-bf16", 2),
        (dict(strategy="zero", zero=2, precision="bf16"), "zero-bf16", 2),
        (dict(strategy="zero", zero=1, precision="fp16-mixed"), "zero-fp16", 2),
    ],
)
def test_the_recipe_follows_from_precision_strategy_version_and_stack(kw, name, reduce):
    found = recipe(plan(**kw))
    assert found is not None and found.name == name and found.reduce == reduce


@pytest.mark.parametrize(
    "kw",
    [
        dict(method="lora"),
        dict(method="qlora"),
        dict(precision="fp32"),
        dict(precision="bf16"),  # pure bf16 under FSDP: no mixed precision at all
        dict(strategy="ddp"),
        dict(strategy="ddp", gpus=1),
    ],
)
def test_plans_without_a_sharded_mixed_recipe_keep_their_precision(kw):
    p = plan(**kw)
    assert recipe(p) is None
    dt = dtypes(p)
    assert (dt.gathered, dt.grad_compute, dt.reduce) == (dt.weight, dt.trainable, dt.trainable)


def test_every_stack_names_a_known_fsdp2_recipe_and_every_record_cites_its_source():
    for stack in STACK_RECORDS.values():
        assert recipe_record(stack.fsdp2_recipe).name == stack.fsdp2_recipe
    for r in RECIPE_RECORDS.values():
        assert r.source and r.label
        assert r.gathered == r.activations == r.grad_compute == 2  # 16-bit compute
        assert r.separate_master == r.name.startswith("zero")


def test_reduce_dtype_applies_to_fsdp_mixed_full_fine_tunes_only_and_round_trips():
    lora = plan(method="lora", reduce_dtype="fp32")
    assert "reduce_dtype" in lora.ignored_fields()
    assert "reduce_dtype" in plan(precision="bf16", reduce_dtype="fp32").ignored_fields()
    assert "reduce_dtype" in plan(strategy="zero", zero=2, reduce_dtype="fp32").ignored_fields()
    full = plan(reduce_dtype="fp32")
    assert full.ignored_fields() == ()
    assert Plan.from_dict(full.to_dict()) == full


# --- each recipe's states, hand-computed on 4 GPUs ---------------------------------------


def test_fsdp2_mixed_keeps_fp32_shards_gradients_and_moments():
    # fp32 sharded parameters (the master itself), fp32 sharded gradients, two fp32 moments
    for kw in ({}, dict(stack="loop"), dict(reduce_dtype="fp32")):
        s = states(plan(**kw))
        assert (s.weights, s.gradients, s.master, s.optimizer) == (
            4 * P // N,
            4 * P // N,
            0,
            8 * P // N,
        )


def test_axolotl_fsdp2_keeps_everything_in_bf16():
    s = states(plan(stack="axolotl"))
    assert (s.weights, s.gradients, s.master, s.optimizer) == (
        2 * P // N,
        2 * P // N,
        0,
        4 * P // N,
    )


def test_fsdp1_mixed_keeps_fp32_flat_shards():
    s = states(plan(fsdp_version=1))
    assert (s.weights, s.gradients, s.optimizer) == (4 * P // N, 4 * P // N, 8 * P // N)


def test_deepspeed_bf16_and_fp16_keep_16_bit_parameters_and_an_fp32_master():
    for precision in ("bf16-mixed", "fp16-mixed", "bf16"):
        s = states(plan(strategy="zero", zero=3, precision=precision))
        assert (s.weights, s.gradients, s.master, s.optimizer) == (
            2 * P // N,
            2 * P // N,
            4 * P // N,
            8 * P // N,
        )


# --- what each recipe gathers, reduces and saves ------------------------------------------


@pytest.mark.parametrize(("reduce", "size"), [("fp32", 4), ("16-bit", 2)])
def test_fsdp2_mixed_gathers_bf16_units_and_reduces_in_the_reduce_dtype(reduce, size):
    p = plan(reduce_dtype=reduce)
    est = estimate(p, SPEC)
    shard = states(p).weights
    # accelerate's [norm, lm_head] unit stays gathered from forward on, its all-gather output
    # too until the root's post-forward; the loss's backward runs before any prefetch: bf16
    tail = 2 * (V * H + H)
    assert est.breakdown["forward"]["weights"] - shard == 2 * tail
    assert est.breakdown["loss backward"]["weights"] - shard == tail
    step = step_sizes(p, SPEC)
    assert step.gathered.layer_grad_inflight == 2 * LAYER_TRAINABLE  # autograd's bf16 grad
    assert step.gathered.reduce_buffer == size * LAYER_TRAINABLE  # foreach_reduce's input
    assert step.tail_reduce == size * V * H  # lm_head's, right after the tail's backward
    assert step.root_reduce == size * V * H  # the embedding's, at the end
    assert step.grad_head == -(-4 * V * H // p.world)  # then lm_head's fp32 shard


@pytest.mark.parametrize(("reduce", "copy"), [("fp32", 4), ("16-bit", 0)])
def test_fsdp1_mixed_reduces_each_unit_inside_its_hook(reduce, copy):
    # torch 2.13 fsdp/_runtime_utils.py _post_backward_hook: an fp32 reduce copies the whole
    # bf16 unit gradient first (flat_param.grad.to(_reduce_dtype)), and _reduce_grad drops
    # its input before the hook returns: nothing held until the next unit's reduce
    step = step_sizes(plan(fsdp_version=1, reduce_dtype=reduce), SPEC)
    assert step.gathered.layer_grad_inflight == (2 + copy) * LAYER_TRAINABLE
    assert step.gathered.reduce_buffer == 0
    fsdp2 = step_sizes(plan(reduce_dtype=reduce), SPEC)
    assert fsdp2.gathered.reduce_buffer == (4 if reduce == "fp32" else 2) * LAYER_TRAINABLE


def test_fsdp_mixed_saves_bf16_activations_without_autocast_copies():
    pure = step_sizes(plan(precision="bf16"), SPEC)
    for kw in ({}, dict(stack="loop"), dict(fsdp_version=1), dict(strategy="zero", zero=3)):
        step = step_sizes(plan(**kw), SPEC)
        assert step.forward_copies == 0 and step.recompute == pure.recompute
        assert step.saved_after_forward == pure.saved_after_forward
        assert step.logits_forward == pure.logits_forward


def test_the_notes_name_the_recipe_and_its_source():
    notes = estimate(plan(stack="loop"), SPEC).notes
    assert any("MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)" in n for n in notes)
    assert not any("not modelled" in n for n in notes)


# --- a 70B full fine-tune on 4 nodes of 8 x 80 GB ------------------------------------------

LLAMA_70B = catalog.find("meta-llama/Llama-3.1-70B")


def test_70b_fsdp2_mixed_on_32_gpus_is_planned_as_its_recipe_implies():
    spec = LLAMA_70B.spec()
    p = Plan(
        model="meta-llama/Llama-3.1-70B",
        method="full",
        precision="bf16-mixed",
        strategy="fsdp",
        gpus=8,
        nodes=4,
        device="h100-80gb",
    ).validated()
    est = estimate(p, spec)
    s = step_sizes(p, spec).states
    # about 16 bytes per parameter of sharded states over 32 GPUs, about 35 GB each
    sharded = s.weights + s.gradients + s.optimizer
    assert sharded == pytest.approx(16 * spec.params / 32, rel=0.001)
    assert 35e9 < sharded < 35.5e9
    # plus accelerate's gathered bf16 [norm, lm_head] unit and its all-gather output
    tail = spec.vocab * spec.hidden + spec.hidden
    assert est.breakdown["forward"]["weights"] - s.weights == 2 * 2 * tail
    # temporaries are the reduce-scatter inputs of a unit and the root, not 139 GB
    assert est.component("temporaries") < 8e9
    assert est.device_bytes < 80e9  # it fits an 80 GB GPU


# --- adding GPUs never raises per-GPU memory ---------------------------------------------

RECIPE_PLANS = [
    {},
    dict(reduce_dtype="fp32"),
    dict(stack="loop"),
    dict(stack="axolotl"),
    dict(fsdp_version=1),
    dict(fsdp="shard-grad-op"),
    dict(strategy="zero", zero=3),
    dict(strategy="zero", zero=2, precision="fp16-mixed"),
]
QWEN = catalog.find("Qwen/Qwen2.5-0.5B").spec()


@settings(max_examples=40, deadline=None, derandomize=True)
@given(
    kw=st.sampled_from(RECIPE_PLANS),
    fewer=st.integers(1, 64),
    more=st.integers(1, 64),
    grad_ckpt=st.booleans(),
)
def test_adding_gpus_never_raises_per_gpu_memory(kw, fewer, more, grad_ckpt):
    fewer, more = sorted((fewer, more))
    for spec in (SPEC, QWEN):
        a = plan(model=spec.name, gpus=fewer, grad_ckpt=grad_ckpt, seq_len=256, **kw)
        b = replace(a, gpus=more).validated()
        assert estimate(b, spec).allocated_bytes <= estimate(a, spec).allocated_bytes
