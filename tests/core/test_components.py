"""Component formulas against hand-computed cases on a small synthetic decoder."""

import pytest

from trainmem.core.activations import head_activations, layer_activations
from trainmem.core.architecture import spec_from_config
from trainmem.core.estimator import estimate
from trainmem.core.plan import Plan
from trainmem.core.precision import dtypes
from trainmem.core.states import ADAM8BIT_BYTES_PER_STATE, NF4_BYTES_PER_PARAM, model_states

H, LAYERS, HEADS, KV, HD, FF, V = 256, 2, 4, 2, 64, 512, 1000
SPEC_CONFIG = {
    "model_type": "llama",
    "hidden_size": H,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV,
    "head_dim": HD,
    "intermediate_size": FF,
    "vocab_size": V,
    "tie_word_embeddings": False,
}
SPEC = spec_from_config(SPEC_CONFIG, "tiny")
P = SPEC.params
QD, KVD = HEADS * HD, KV * HD


def plan(**kw):
    base = dict(model="tiny", seq_len=8, batch=2, grad_ckpt=False, device="1GB")
    return Plan(**{**base, **kw}).validated()


def test_full_bf16_model_states():
    p = plan(method="full", precision="bf16")
    st = model_states(SPEC, p, dtypes(p))
    assert st.weights == 2 * P
    assert st.gradients == 2 * P
    assert st.optimizer == 2 * 2 * P  # AdamW moments in the parameters' dtype (bf16)
    assert st.optimizer_temp == 0  # fused AdamW


def test_full_fp32_and_foreach_temporaries():
    p = plan(method="full", precision="fp32", optimizer="adamw-foreach")
    st = model_states(SPEC, p, dtypes(p))
    assert (st.weights, st.gradients, st.optimizer) == (4 * P, 4 * P, 8 * P)
    assert st.optimizer_temp == 4 * P  # _foreach_sqrt of exp_avg_sq
    est = estimate(p, SPEC)
    assert est.phases["optimizer step"] == 4 * P + 4 * P + 8 * P + 4 * P


def test_adam_8bit_state():
    p = plan(method="full", precision="bf16", optimizer="adamw-8bit", stack="loop")
    st = model_states(SPEC, p, dtypes(p))
    # every tensor here but the norms is >= 4096 elements and gets 8-bit blockwise state
    small = LAYERS * 2 * H + H
    assert st.optimizer == pytest.approx(
        (P - small) * 2 * ADAM8BIT_BYTES_PER_STATE + small * 8, rel=1e-6
    )
    # The Trainer keeps 32-bit state for nn.Embedding weights (transformers/trainer.py)
    trainer = plan(method="full", precision="bf16", optimizer="adamw-8bit")
    st_t = model_states(SPEC, trainer, dtypes(trainer))
    assert st_t.optimizer - st.optimizer == pytest.approx(
        V * H * (8 - 2 * ADAM8BIT_BYTES_PER_STATE), abs=2
    )


def test_qlora_nf4_storage_and_fp32_upcasts():
    p = plan(method="qlora", precision="bf16", kbit_prep=True)
    st = model_states(SPEC, p, dtypes(p))
    linear = LAYERS * (H * QD + 2 * H * KVD + QD * H + 3 * H * FF)
    assert pytest.approx(0.5 + 1 / 64 + 4 / 16384) == NF4_BYTES_PER_PARAM
    assert st.weights == round(linear * NF4_BYTES_PER_PARAM) + (P - linear) * 4
    no_prep = plan(method="qlora", precision="bf16", kbit_prep=False)
    st2 = model_states(SPEC, no_prep, dtypes(no_prep))
    assert st.weights - st2.weights == (P - linear) * 2


def test_lora_adapter_fp32_with_adam():
    p = plan(method="lora", lora_rank=8, lora_targets="q,v")
    st = model_states(SPEC, p, dtypes(p))
    adapter = LAYERS * 8 * ((H + QD) + (H + KVD))
    assert st.trainable_params == adapter
    assert (st.adapter, st.gradients, st.optimizer) == (4 * adapter, 4 * adapter, 8 * adapter)
    assert st.weights == 2 * P


def test_layer_activations_full_bf16_by_hand():
    p = plan(method="full", precision="bf16")
    la = layer_activations(SPEC, p, dtypes(p))
    norms = 2 * (4 * H + 2 * H)  # fp32 copy for pow + bf16 normalised value, twice
    attention = 2 * H + 2 * (QD + 2 * KVD) + 2 * QD + 4 * HEADS  # input, q/k/v, out, lse
    mlp = 2 * H + 4 * 2 * FF  # input; gate out, act out, up out, act*up
    assert la.saved == norms + attention + mlp
    assert la.checkpoint == 2 * H


def test_layer_activations_lora_casts_inputs_to_fp32():
    p = plan(method="lora", lora_targets="all-linear")
    la = layer_activations(SPEC, p, dtypes(p))
    norms = 2 * 4 * H  # frozen norm weights: only the fp32 copy is saved
    attention = 3 * 4 * H + 2 * (QD + 2 * KVD) + 2 * QD + 4 * HEADS + 4 * QD
    mlp = 2 * 4 * H + 3 * 2 * FF + 4 * FF
    assert la.saved == norms + attention + mlp


def test_eager_attention_keeps_scores():
    p = plan(method="full", attn="eager")
    la = layer_activations(SPEC, p, dtypes(p))
    assert la.attention_scores == HEADS * (4 + 2)  # fp32 softmax + its bf16 copy
    sdpa = estimate(plan(method="full"), SPEC)
    eager = estimate(p, SPEC)
    extra = LAYERS * 16 * 8 * la.attention_scores  # tokens * seq * per-position bytes
    repeat = LAYERS * 16 * 2 * 2 * (QD - KVD)  # eager repeats k and v to all heads
    assert eager.phases["loss backward"] - sdpa.phases["loss backward"] == extra + repeat


def test_loss_backward_holds_three_fp32_vocab_tensors():
    p = plan(method="lora")
    ha = head_activations(SPEC, p, dtypes(p))
    assert ha.loss_backward == 12 * V
    assert ha.logits_forward == (2 + 4 + 4) * V  # bf16 logits, fp32 upcast, log_softmax
    est = estimate(p, SPEC)
    # forward ends with 10 bytes per logit alive, loss backward with 12; nothing else differs
    assert est.phases["loss backward"] - est.phases["forward"] == 16 * (12 - 10) * V


def test_peak_is_the_largest_phase_and_components_add_up():
    for method in ("full", "lora", "qlora"):
        est = estimate(plan(method=method), SPEC)
        assert est.allocated_bytes == max(est.phases.values())
        tensors = sum(c.bytes for c in est.components if c.kind == "tensor")
        assert tensors == est.allocated_bytes
        assert est.device_bytes == sum(c.bytes for c in est.components)


def test_tied_embedding_backward_sums_two_gradients_out_of_place():
    tied = spec_from_config({**SPEC_CONFIG, "tie_word_embeddings": True}, "tied")
    p = plan(method="full", precision="fp32")
    est = estimate(p, tied)
    vh = V * H * 4
    # all gradients, plus lm_head's buffered gradient and the sum, alive together
    optimizer_and_weights = 4 * tied.params + 8 * tied.params
    assert est.phases["backward (embedding)"] == optimizer_and_weights + 4 * tied.params + 2 * vh


def test_zero_partitions_deepspeed_mixed_precision_states():
    p1 = plan(method="full", precision="bf16", zero=1, gpus=4)
    st = model_states(SPEC, p1, dtypes(p1))
    # 16-bit weights and gradients; fp32 master and Adam moments split over 4 GPUs
    assert (st.weights, st.gradients, st.master, st.optimizer) == (2 * P, 2 * P, P, 2 * P)
    p2 = plan(method="full", precision="bf16", zero=2, gpus=4)
    # the worst rank's gradient buffer: its quarter and, whole, the FF x H linear straddling
    # its end (DeepSpeed 0.19.8 copy_grads_in_partition; the embedding is under a quarter)
    assert model_states(SPEC, p2, dtypes(p2)).gradients == 2 * (-(-P // 4) + FF * H)
    p3 = plan(method="full", precision="bf16", zero=3, gpus=4, offload="optimizer")
    st3 = model_states(SPEC, p3, dtypes(p3))
    assert (st3.weights, st3.master, st3.optimizer) == (2 * P // 4, 0, 0)


def test_autocast_keeps_16bit_weight_copies_during_forward():
    mixed = estimate(plan(method="full", precision="bf16-mixed", grad_ckpt=True), SPEC)
    linear = LAYERS * (H * QD + 2 * H * KVD + QD * H + 3 * H * FF)
    # decoder linears and lm_head, cached until autocast exits (checkpointing saves none)
    assert mixed.breakdown["forward"]["temporaries"] == 2 * linear + 2 * V * H
    assert mixed.breakdown["loss backward"]["temporaries"] == 0
    no_ckpt = estimate(plan(method="full", precision="bf16-mixed"), SPEC)
    fp32 = estimate(plan(method="full", precision="fp32"), SPEC)
    # without checkpointing the matmuls save the copies: they count with the activations
    assert no_ckpt.saved_activation_bytes > 2 * linear + 2 * V * H
    assert mixed.component("weights") == fp32.component("weights") == 4 * P
    lora_mixed = estimate(plan(method="lora", precision="bf16-mixed"), SPEC)
    assert lora_mixed.component("weights") == 2 * P  # a 16-bit base: nothing to copy


def test_lora_dropout_keeps_a_copy_and_what_backward_needs():
    def saved(dropout, kernels):
        p = plan(method="lora", lora_targets="q", lora_dropout=dropout)
        return layer_activations(SPEC, p, dtypes(p), kernels).saved

    # q alone: its fp32 input cast (4 bytes), then the dropped-out copy plus the mask
    assert saved(0.05, "cuda") - saved(0.0, "cuda") == (4 + 1 - 4) * H  # 1-byte bool mask
    assert saved(0.05, "cpu") - saved(0.0, "cpu") == (4 + 4 - 4) * H  # fp32 noise tensor


def test_lora_under_autocast_saves_16bit_copies_per_target():
    bf16 = plan(method="lora", lora_targets="q,k,v")
    mixed = plan(method="lora", lora_targets="q,k,v", precision="bf16-mixed")
    diff = layer_activations(SPEC, bf16, dtypes(bf16)).saved - (
        layer_activations(SPEC, mixed, dtypes(mixed)).saved
    )
    assert diff == 3 * (4 - 2) * H  # three fp32 input casts become three bf16 copies
