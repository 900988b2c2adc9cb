"""The mlx stack's record, hand-computed (trainmem.core.mlx_step): num_layers, MLX-quantized
bytes, DoRA against LoRA, the optimizers' states. Each expected figure is written from
mlx-lm 0.32.2's / MLX 0.32's source named beside it, not from the module's own code."""

from __future__ import annotations

import pytest

from trainmem.core.architecture import spec_from_config
from trainmem.core.errors import PlanError
from trainmem.core.estimator import estimate
from trainmem.core.mlx_step import quantized_bytes, trained_layers, weight_bytes
from trainmem.core.plan import Plan

H, Q, KV, FF, V, L = 256, 256, 128, 704, 8192, 8
CONFIG = {
    "model_type": "llama",
    "hidden_size": H,
    "num_hidden_layers": L,
    "intermediate_size": FF,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "vocab_size": V,
    "tie_word_embeddings": False,
}
SPEC = spec_from_config(CONFIG, "tiny")
LINEARS = [(H, Q), (H, KV), (H, KV), (Q, H), (H, FF), (H, FF), (FF, H)]  # (in, out)


def plan(**kw: object) -> Plan:
    base: dict[str, object] = dict(model="tiny", stack="mlx", seq_len=128, batch=2)
    base.update(grad_ckpt=False, lora_rank=8, mlx_num_layers=4)
    return Plan(**{**base, **kw}).validated()  # type: ignore[arg-type]


def test_num_layers_follow_mlx_lm_slicing() -> None:
    # mlx_lm/lora.py: model.layers[-max(num_layers, 0):], so -1 and 0 are every layer
    assert trained_layers(plan(mlx_num_layers=4), SPEC) == 4
    assert trained_layers(plan(mlx_num_layers=-1), SPEC) == L
    assert trained_layers(plan(mlx_num_layers=0), SPEC) == L
    with pytest.raises(PlanError, match="mlx_num_layers"):
        trained_layers(plan(mlx_num_layers=L + 1), SPEC)


def test_lora_trainable_parameters_on_the_last_layers() -> None:
    # LoRALinear: lora_a (in x r), lora_b (r x out), on every Linear of the trained layers
    per_layer = sum(8 * (i + o) for i, o in LINEARS)
    assert per_layer == 37_376
    for n in (2, 4, L):
        est = estimate(plan(mlx_num_layers=n), SPEC, "cpu", "system")
        assert est.trainable_params == n * per_layer
        assert est.component("adapter") == 4 * n * per_layer  # fp32 whatever the model


def test_dora_adds_a_magnitude_per_output_row() -> None:
    # DoRALinear.m: mx.linalg.norm(weight, axis=1), one fp32 value per output row
    lora = estimate(plan(), SPEC, "cpu", "system")
    dora = estimate(plan(dora=True), SPEC, "cpu", "system")
    assert dora.trainable_params - lora.trainable_params == 4 * sum(o for _, o in LINEARS)
    # ... and keeps each adapted output (tokens x out, model dtype) for m's gradient
    tokens = 128 * 2
    extra = 4 * tokens * sum(o for _, o in LINEARS) * 2
    assert dora.saved_activation_bytes - lora.saved_activation_bytes == extra


def test_frozen_layers_keep_no_activations() -> None:
    a = estimate(plan(mlx_num_layers=2), SPEC, "cpu", "system")
    b = estimate(plan(mlx_num_layers=4), SPEC, "cpu", "system")
    c = estimate(plan(mlx_num_layers=6), SPEC, "cpu", "system")
    per_two = b.saved_activation_bytes - a.saved_activation_bytes
    assert per_two > 0
    assert c.saved_activation_bytes - b.saved_activation_bytes == per_two


def test_quantized_bytes_by_hand() -> None:
    # 4-bit, groups of 64, bf16 scales and biases: 4096 x 4096 -> half a byte per weight plus
    # 2 x 2 bytes per 64 weights
    assert quantized_bytes(4096, 4096, 4, 64, 2) == 4096 * 4096 // 2 + 2 * 4096 * 64 * 2
    assert quantized_bytes(4096, 4096, 8, 64, 2) == 4096 * 4096 + 2 * 4096 * 64 * 2
    assert quantized_bytes(100, 100, 4, 64, 2) == 100 * 100 * 2  # not a multiple: kept
    # the whole model: every linear, the embedding and lm_head quantized; norms in bf16
    q4 = plan(method="qlora", mlx_bits=4)
    lin = sum(o * i // 2 + 2 * o * (i // 64) * 2 for i, o in LINEARS)
    norms = 2 * H * 2
    embed = V * H // 2 + 2 * V * (H // 64) * 2
    assert weight_bytes(q4, SPEC) == L * (lin + norms) + 2 * embed + H * 2
    q8 = plan(method="qlora", mlx_bits=8, mlx_group_size=32)
    lin8 = sum(o * i + 2 * o * (i // 32) * 2 for i, o in LINEARS)
    embed8 = V * H + 2 * V * (H // 32) * 2
    assert weight_bytes(q8, SPEC) == L * (lin8 + norms) + 2 * embed8 + H * 2


def test_full_fine_tune_trains_only_the_last_layers() -> None:
    # lora.py: for l in model.layers[-num_layers:]: l.unfreeze(); embedding and lm_head stay
    layer = sum(i * o for i, o in LINEARS) + 2 * H
    est = estimate(plan(method="full", mlx_num_layers=3), SPEC, "cpu", "system")
    assert est.trainable_params == 3 * layer
    assert est.component("optimizer state") == 2 * 3 * layer * 2  # Adam m, v in bf16


def test_optimizer_states() -> None:
    # mlx/optimizers/optimizers.py: SGD.init_single always makes v; Adafactor a row and a
    # column factor per matrix
    full = dict(method="full", mlx_num_layers=1, precision="fp32")
    sgd = estimate(plan(**full, optimizer="sgd"), SPEC, "cpu", "system")
    assert sgd.component("optimizer state") == 4 * (sum(i * o for i, o in LINEARS) + 2 * H)
    ada = estimate(plan(**full, optimizer="adafactor"), SPEC, "cpu", "system")
    assert ada.component("optimizer state") == 4 * (sum(i + o for i, o in LINEARS) + 2 * H)


def test_what_mlx_does_not_have() -> None:
    with pytest.raises(PlanError, match="autocast"):
        estimate(plan(precision="bf16-mixed"), SPEC)
    with pytest.raises(PlanError, match="optimizer"):
        estimate(plan(optimizer="adamw-8bit"), SPEC)


def test_plan_round_trips_with_the_mlx_fields() -> None:
    p = plan(method="qlora", mlx_bits=8, mlx_group_size=128, dora=True, mlx_num_layers=-1)
    assert Plan.from_dict(p.to_dict()) == p


def test_loss_peak_holds_four_logits_and_the_last_layers_backward() -> None:
    # The peak (bench/results/mlx_peak_terms.txt, measured in the real step): the saves, 4
    # logits-sized buffers of the model's dtype, and one more layer's LoRA saves (the last
    # layer's backward, started while the loss's buffers are alive); tuner/lora.py's
    # ``(scale * z).astype(x.dtype)`` makes the adapted outputs' gradients fp32 on a bf16 model.
    tokens, d = 128 * 2, 2  # the plan's bf16 model; LoRA's input copies are fp32
    lora_in = H + Q + H + FF  # q/k/v share the norm's output; o; gate/up share; down
    per_token = (2 * H + Q + 2 * KV + 4 * FF) * d + lora_in * 4 + 7 * 8 * 4
    layer = tokens * per_token + 2 * 8 * 128**2 * d  # + the attention probabilities
    # the last layer's backward: a layer's saves, and LoRA's fp32 branch's output gradients
    last = layer + tokens * sum(o for _, o in LINEARS) * 4
    for n in (2, 4):
        est = estimate(plan(mlx_num_layers=n), SPEC, "cpu", "system")
        assert est.peak_phase == "loss backward"
        parts = est.breakdown["loss backward"]
        assert parts["logits"] == 4 * tokens * V * d
        assert parts["activations"] == n * layer + tokens * H * d + last
    # DoRA's adapted outputs are in its saves, not in the last layer's backward
    lora = estimate(plan(), SPEC, "cpu", "system").breakdown["loss backward"]
    dora = estimate(plan(dora=True), SPEC, "cpu", "system").breakdown["loss backward"]
    assert dora["activations"] - lora["activations"] == 4 * tokens * sum(o for _, o in LINEARS) * d


def test_dora_under_checkpointing_has_no_last_backward_on_top() -> None:
    # Measured (bench/results/measure-cpu-mlx.json, three DoRA steps with grad_checkpoint): the
    # peak is the layers' inputs, one recomputed layer and the loss; LoRA keeps the last
    # layer's backward on top of that. Both on the same bf16 model, 4 trained layers.
    tokens, d = 128 * 2, 2
    lora_in = H + Q + H + FF
    outputs = sum(o for _, o in LINEARS)
    lora_layer = tokens * ((2 * H + Q + 2 * KV + 4 * FF) * d + lora_in * 4 + 7 * 8 * 4)
    lora_layer += 2 * 8 * 128**2 * d
    dora_layer = lora_layer + tokens * outputs * d  # each adapted output, before m / norm
    inputs = 4 * tokens * H * d + tokens * H * d  # mx.checkpoint's layer inputs, final norm
    lora = estimate(plan(grad_ckpt=True), SPEC, "cpu", "system").breakdown["loss backward"]
    assert lora["activations"] == inputs + lora_layer + lora_layer + tokens * outputs * 4
    # tuner/dora.py's ``w + (scale * lora_b.T) @ lora_a.T`` upcasts the bf16 weight: an fp32
    # copy of each adapted weight per trained layer stays from the forward to its backward
    upcast = 4 * sum(i * o for i, o in LINEARS)
    dora = estimate(plan(grad_ckpt=True, dora=True), SPEC, "cpu", "system").breakdown
    assert dora["loss backward"]["activations"] == inputs + 4 * upcast + dora_layer
    assert dora["backward (first layer)"]["activations"] == tokens * H * d + upcast + dora_layer
    fp32 = estimate(plan(grad_ckpt=True, dora=True, precision="fp32"), SPEC, "cpu", "system")
    d32 = 4  # an fp32 model's weight needs no upcast
    assert fp32.breakdown["loss backward"]["activations"] == 5 * tokens * H * d32 + (
        tokens * ((2 * H + Q + 2 * KV + 4 * FF) * d32 + lora_in * 4 + 7 * 8 * 4 + outputs * d32)
        + 2 * 8 * 128**2 * d32
    )
