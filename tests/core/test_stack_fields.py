"""The stack-level plan fields, hand-computed on a small synthetic decoder: the loss kind,
the quantized base's format, modules_to_save, TRL's fp32 base, checkpoint offload, eager
attention's backward and the optimizers' state layouts.

Each expected figure is written from the library source named beside it (see
docs/research/training-stacks.md), not from the estimator's own code.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_components import FF, HD, HEADS, KV, LAYERS, SPEC_CONFIG, H

from trainmem.core.architecture import spec_from_config
from trainmem.core.errors import PlanError
from trainmem.core.estimator import estimate, step_sizes
from trainmem.core.losses import TRL_TORCH_BACKWARD, TRL_TORCH_FORWARD, loss_head
from trainmem.core.plan import ATTENTION, PRECISIONS, STACKS, Plan
from trainmem.core.precision import dtypes
from trainmem.core.states import (
    ADAM4BIT_BYTES_PER_STATE,
    ADAM8BIT_BYTES_PER_STATE,
    NF4_BYTES_PER_PARAM,
    model_states,
)

V = 40_000  # a vocabulary wider than TRL's 32768-column tile
SPEC = spec_from_config({**SPEC_CONFIG, "vocab_size": V}, "tiny")
QD, KVD = HEADS * HD, KV * HD
LINEARS = [(H, QD), (H, KVD), (H, KVD), (QD, H), (H, FF), (H, FF), (FF, H)]  # (in, out)


def plan(**kw: object) -> Plan:
    base: dict[str, object] = dict(model="tiny", seq_len=64, batch=2, grad_ckpt=False)
    return Plan(**{**base, **kw}).validated()  # type: ignore[arg-type]


# ---------------------------------------------------------------- the loss head
def test_auto_loss_follows_the_stack():
    assert {s: plan(stack=s).loss_kind for s in STACKS} == {
        "trainer": "standard",
        "trl": "chunked",
        "axolotl": "standard",
        "llama-factory": "standard",
        "loop": "standard",
        "unsloth": "fused",  # Unsloth's own fused loss (test_unsloth_stack.py)
        "mlx": "standard",  # mlx-lm's default_loss on the full logits (test_mlx_step.py)
    }
    assert plan(stack="trl", loss="standard").loss_kind == "standard"


def test_trl_chunked_head_on_gpu_and_on_cpu():
    p = plan(stack="trl", loss="chunked", precision="bf16")
    n = 2 * 63  # the shifted positions: batch x (seq - 1)
    tile = n * 32768  # fewer than 4096 tokens, one 32768-wide vocabulary tile
    for kernels, fold_f, fold_b in (("cuda", 0, 0), ("cpu", 13, 29)):
        head = loss_head(SPEC, p, dtypes(p), kernels)  # type: ignore[arg-type]
        # saved: the final norm's fp32 input (4 x H per token), the hidden-state copy (bf16),
        # log-z and entropy (fp32) and the int64 targets
        assert head.saved == 128 * 4 * H + n * (2 * H + 8 + 8)
        assert head.forward == tile * (2 + fold_f) + 7 * 4 * n + 9 * n
        # backward: the tile, an fp32 grad_hidden and its bf16 cast; lm_head is frozen
        assert head.backward == tile * (2 + fold_b) + 4 * n * H + 2 * n * H
    assert (TRL_TORCH_FORWARD, TRL_TORCH_BACKWARD) == (13, 29)


def test_chunked_head_with_a_trainable_lm_head_accumulates_its_gradient_in_fp32():
    frozen = plan(stack="trl", loss="chunked", precision="bf16")
    saved = replace(frozen, modules_to_save="lm_head").validated()
    a, b = (loss_head(SPEC, q, dtypes(q)) for q in (frozen, saved))
    assert b.backward - a.backward == 4 * V * H + 2 * V * H  # fp32 grad_weight + bf16 cast


def test_liger_fused_head():
    p = plan(loss="fused", precision="bf16", seq_len=512, batch=1)
    head = loss_head(SPEC, p, dtypes(p))
    # chunk = next_pow2(ceil(T / ceil(V / H))) = next_pow2(ceil(512 / 157)) = 4
    assert head.forward == 4 * V * 2 + 4 * H * 2
    assert head.saved == 512 * (4 * H + 2 * H + 4)  # norm input, grad_input, loss_1d
    assert head.early_head_grad == 0
    full = plan(method="full", loss="fused", precision="bf16", seq_len=512, batch=1)
    assert loss_head(SPEC, full, dtypes(full)).early_head_grad == V * H * 2


def test_standard_loss_is_the_unchanged_default():
    p = plan()
    assert p.loss == "auto" and p.loss_kind == "standard"
    s = step_sizes(p, SPEC)
    assert s.loss_backward == 2 * 64 * 12 * V  # log_softmax backward: three fp32 tensors


@settings(max_examples=80, deadline=None)
@given(
    method=st.sampled_from(("lora", "qlora")),
    precision=st.sampled_from(("bf16", "fp16", "bf16-mixed", "fp16-mixed")),
    loss=st.sampled_from(("chunked", "fused")),
    stack=st.sampled_from([s for s in STACKS if s != "mlx"]),  # mlx-lm has no such loss
    attn=st.sampled_from(ATTENTION),
    ckpt=st.booleans(),
    seq=st.integers(H, 4096),
    batch=st.integers(1, 8),
)
def test_a_fused_or_chunked_loss_never_costs_more(
    method, precision, loss, stack, attn, ckpt, seq, batch
):
    """With a frozen lm_head, on the GPU kernels, from as many tokens as the hidden size.
    Below that the real kernels can cost more: TRL casts a 32768-row tile of an fp32 lm_head
    weight to 16 bits (32768 x H x 2 bytes) and, when lm_head trains, accumulates its
    gradient in fp32 (4 x V x H); on CPU its torch fold keeps up to 29 bytes per tile element."""
    p = Plan(
        model="x",
        method=method,
        precision=precision,
        stack=stack,
        attn=attn,
        grad_ckpt=ckpt,
        seq_len=seq,
        batch=batch,
    )
    standard = estimate(replace(p, loss="standard"), SPEC)
    other = estimate(replace(p, loss=loss), SPEC)
    assert other.allocated_bytes <= standard.allocated_bytes


def test_fused_kernels_need_16_bit_compute():
    with pytest.raises(PlanError, match="bf16 or fp16"):
        plan(loss="fused", precision="fp32")


# ---------------------------------------------------------------- the quantized base
def test_fp4_is_the_size_of_nf4_and_int8_is_a_byte_plus_a_row_scale():
    linear = LAYERS * sum(i * o for i, o in LINEARS)
    other = SPEC.params - linear
    nf4, fp4, int8 = (plan(method="qlora", quant=q) for q in ("nf4", "fp4", "int8"))
    w = {q.quant: model_states(SPEC, q, dtypes(q)).weights for q in (nf4, fp4, int8)}
    assert w["nf4"] == w["fp4"] == round(linear * NF4_BYTES_PER_PARAM) + other * 4
    # Int8Params: int8 [out, in] + fp32 SCB [out] (bitsandbytes/nn/modules.py)
    assert w["int8"] == LAYERS * sum(o * i + 4 * o for i, o in LINEARS) + other * 4
    assert not int8.double_quant or "double_quant" not in int8.ignored_fields()


def test_int8_inputs_stay_alive_under_non_reentrant_checkpointing():
    """MatMul8bitLt keeps its input as ctx attributes, out of the checkpoint's hooks: under
    non-reentrant checkpointing every layer keeps its 8-bit linears' inputs (fp32 after
    prepare_model_for_kbit_training); LLaMA-Factory checkpoints reentrantly (and runs no PEFT
    preparation, so both are compared without it)."""
    trainer = plan(method="qlora", quant="int8", grad_ckpt=True)
    unprepared = replace(trainer, kbit_prep=False)
    factory = replace(unprepared, stack="llama-factory")
    a, b = step_sizes(unprepared, SPEC), step_sizes(factory, SPEC)
    tokens = 128
    inputs = tokens * 2 * (H + QD + H + FF)  # q/k/v, o, gate/up, down inputs, bf16
    assert a.kept_per_layer - b.kept_per_layer == inputs
    assert step_sizes(factory, SPEC) == step_sizes(replace(factory, kbit_prep=True), SPEC)
    # the backward dequantizes the largest weight into the input's dtype (fp32 after the
    # preparation)
    assert step_sizes(trainer, SPEC).dequant == 4 * H * FF
    assert step_sizes(plan(method="qlora", grad_ckpt=True), SPEC).dequant == 2 * H * FF


# ---------------------------------------------------------------- modules_to_save
def test_modules_to_save_trains_a_copy_in_the_original_dtype():
    lora = plan(precision="bf16")
    both = replace(lora, modules_to_save="lm_head,embed_tokens").validated()
    assert both.modules_to_save == "embed_tokens,lm_head"
    a, b = (model_states(SPEC, q, dtypes(q)) for q in (lora, both))
    copies = 2 * V * H
    assert b.trainable_params - a.trainable_params == copies
    assert b.weights == a.weights  # the frozen originals stay
    assert b.adapter - a.adapter == copies * 2  # bf16 copies (PEFT does not upcast them)
    assert b.gradients - a.gradients == copies * 2
    # AdamW moments in the copies' dtype; the embedding's bnb state would be 32-bit
    assert b.optimizer - a.optimizer == 2 * copies * 2


def test_modules_to_save_dtype_follows_the_stack():
    def copy_bytes(**kw: object) -> int:
        q = plan(modules_to_save="lm_head", **kw)
        base = plan(**kw)
        return (
            model_states(SPEC, q, dtypes(q)).adapter
            - model_states(SPEC, base, dtypes(base)).adapter
        ) // (V * H)

    assert copy_bytes(precision="bf16-mixed") == 2
    assert copy_bytes(precision="bf16-mixed", stack="llama-factory") == 4  # upcast
    assert copy_bytes(precision="bf16", stack="llama-factory") == 2  # pure_bf16
    assert copy_bytes(method="qlora") == 4  # kbit prep made lm_head fp32 before the copy
    assert copy_bytes(method="qlora", stack="trl") == 2  # TRL casts trainables to bf16


def test_axolotl_casts_norms_and_embeddings_back_after_the_kbit_preparation():
    """axolotl 067b021 (loaders/model.py:455-477): after prepare_model_for_kbit_training made
    every 16-bit parameter fp32, modules named "norm" and embed_tokens / lm_head go back to
    the training dtype, so a dense Llama QLoRA keeps nothing in fp32 but its adapters and
    runs a bf16 residual stream with bf16 logits, as without the preparation."""
    trainer, axolotl = plan(method="qlora"), plan(method="qlora", stack="axolotl")
    assert trainer.kbit_prep and axolotl.kbit_prep
    unquantized = 2 * V * H + LAYERS * 2 * H + H  # embed_tokens, lm_head, 2 norms a layer, final
    a, b = (model_states(SPEC, q, dtypes(q)) for q in (trainer, axolotl))
    assert a.weights - b.weights == unquantized * (4 - 2)
    assert (dtypes(trainer).resid, dtypes(axolotl).resid) == (4, 2)
    unprepared = replace(axolotl, kbit_prep=False)
    assert step_sizes(axolotl, SPEC) == step_sizes(unprepared, SPEC)
    assert model_states(SPEC, unprepared, dtypes(unprepared)) == b


def test_a_trained_lm_head_saves_its_input_and_its_gradient_arrives_first():
    p = plan(precision="bf16", modules_to_save="lm_head")
    s, base = step_sizes(p, SPEC), step_sizes(plan(precision="bf16"), SPEC)
    assert s.grad_head == V * H * 2
    assert s.saved_after_forward - base.saved_after_forward == 128 * 2 * H


def test_modules_to_save_applies_to_adapters_only():
    with pytest.raises(PlanError, match="modules_to_save"):
        plan(modules_to_save="norm")
    full = plan(method="full", modules_to_save="lm_head")
    assert full.saved_modules == () and "modules_to_save" in full.ignored_fields()


# ---------------------------------------------------------------- TRL's fp32 base
def test_trl_loads_the_lora_base_in_fp32_under_autocast():
    trainer = plan(precision="bf16-mixed")
    trl = replace(trainer, stack="trl", loss="standard")
    assert not trainer.fp32_base and trl.fp32_base
    a, b = (model_states(SPEC, q, dtypes(q)) for q in (trainer, trl))
    assert (a.weights, b.weights) == (2 * SPEC.params, 4 * SPEC.params)
    # without checkpointing each frozen linear's bf16 copy is saved by its matmul for the
    # input's gradient: one layer's weights in bf16 per layer (and lm_head's)
    sa, sb = step_sizes(trainer, SPEC), step_sizes(trl, SPEC)
    layer_copy = 2 * sum(i * o for i, o in LINEARS)
    assert sb.kept_per_layer - sa.kept_per_layer >= layer_copy
    bf16 = replace(trl, base_dtype="16-bit")
    assert model_states(SPEC, bf16, dtypes(bf16)).weights == 2 * SPEC.params


def test_an_fp32_base_needs_autocast():
    with pytest.raises(PlanError, match="bf16-mixed"):
        plan(precision="bf16", base_dtype="fp32")


# ---------------------------------------------------------------- checkpointing, attention
def test_offloaded_checkpoints_leave_the_gpu_and_stay_on_unified_memory():
    on = plan(grad_ckpt=True, ckpt_offload=True)
    off = replace(on, ckpt_offload=False)
    a, b = step_sizes(on, SPEC), step_sizes(off, SPEC)
    assert a.kept_per_layer == 0 and b.kept_per_layer == 128 * 2 * H
    assert a.recompute - b.recompute == 128 * 2 * H  # the input comes back for its layer
    gpu, unified = estimate(on, SPEC), estimate(on, SPEC, runtime="unified")
    assert unified.allocated_bytes == estimate(off, SPEC, runtime="unified").allocated_bytes
    assert any("pinned host RAM" in n for n in gpu.notes)


def test_eager_backward_holds_the_softmax_gradient_beside_the_scores():
    sdpa = plan(grad_ckpt=True, seq_len=256, batch=1)
    eager = replace(sdpa, attn="eager")
    a, b = step_sizes(sdpa, SPEC), step_sizes(eager, SPEC)
    # bf16: the fp32 softmax output (saved), its fp32 incoming gradient and fp32 result:
    # 12 bytes per score where 6 were saved; fp16 on CUDA returns its result in fp16
    assert b.layer_transient - a.layer_transient == 256 * 256 * HEADS * 6
    fp16 = replace(eager, precision="fp16")
    assert step_sizes(fp16, SPEC).layer_transient - a.layer_transient == 256 * 256 * HEADS * 4
    assert (
        step_sizes(fp16, SPEC, "cpu").layer_transient - a.layer_transient == 256 * 256 * HEADS * 6
    )
    flash = replace(sdpa, attn="flash-attention-2")
    assert estimate(flash, SPEC).allocated_bytes == estimate(sdpa, SPEC).allocated_bytes


# ---------------------------------------------------------------- optimizers
def test_optimizer_state_layouts():
    def optimizer(name: str) -> int:
        q = plan(method="full", precision="bf16", optimizer=name, stack="loop")
        return model_states(SPEC, q, dtypes(q)).optimizer

    p = SPEC.params
    small = LAYERS * 2 * H + H  # the norms: under 4096 elements
    assert optimizer("paged-adamw-32bit") == 8 * p  # bnb 32-bit states are fp32
    assert optimizer("lion") == 4 * p  # one fp32 momentum
    assert optimizer("lion-8bit") == pytest.approx(
        (p - small) * ADAM8BIT_BYTES_PER_STATE + small * 4, abs=8
    )
    # torchao AdamW4bit, block 256: every matrix here is a multiple of 256
    assert optimizer("adamw-4bit") == pytest.approx(
        (p - small) * 2 * ADAM4BIT_BYTES_PER_STATE + small * 2 * 2, abs=8
    )


@settings(max_examples=40, deadline=None)
@given(precision=st.sampled_from(PRECISIONS), stack=st.sampled_from(STACKS))
def test_every_stack_estimates_every_precision(precision, stack):
    p = Plan(model="x", precision=precision, stack=stack, seq_len=128, batch=1)
    if stack == "mlx":  # every layer of the tiny model (mlx-lm refuses 16 of 2); no autocast
        p = replace(p, mlx_num_layers=-1)
        if precision.endswith("-mixed"):
            with pytest.raises(PlanError, match="no autocast"):
                estimate(p, SPEC)
            return
    est = estimate(p, SPEC)
    assert est.allocated_bytes > 0
    assert any(n.startswith("stack: ") for n in est.notes)
