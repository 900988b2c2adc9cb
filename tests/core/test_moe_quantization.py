"""A bitsandbytes load of a transformers-5 MoE model quantizes its nn.Linear layers only: the
fused 3-D experts and the router stay 16-bit, and PEFT's k-bit preparation casts them to
fp32 (bench/results/bnb-moe-load.json measures both on tiny models of each MoE model_type)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from trainmem.core.architecture import spec_from_config
from trainmem.core.estimator import step_sizes
from trainmem.core.plan import Plan
from trainmem.core.precision import dtypes
from trainmem.core.states import NF4_BYTES_PER_PARAM, stored_weight_bytes

H, INTER, E, V, LAYERS = 256, 128, 4, 1000, 2
CONFIG = {
    "model_type": "qwen3_moe",
    "hidden_size": H,
    "intermediate_size": 512,
    "moe_intermediate_size": INTER,
    "num_experts": E,
    "num_experts_per_tok": 2,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "vocab_size": V,
    "tie_word_embeddings": False,
}
SPEC = spec_from_config(CONFIG, "tiny-moe")


@pytest.mark.parametrize(("prep", "kept_bytes"), [(False, 2), (True, 4)])
def test_experts_and_router_stay_16_bit_and_prep_makes_them_fp32(prep, kept_bytes):
    plan = Plan(model="tiny-moe", method="qlora", kbit_prep=prep, device="80GB").validated()
    attention = (H * 256 + 2 * H * 128 + 256 * H) * LAYERS  # q, k, v (2 kv heads x 64), o
    experts = (E * H * 2 * INTER + E * INTER * H) * LAYERS
    router = E * H * LAYERS
    other = SPEC.params - attention - experts - router  # embeddings, lm_head, norms
    expected = round(attention * NF4_BYTES_PER_PARAM) + (experts + router + other) * kept_bytes
    assert stored_weight_bytes(SPEC, plan, dtypes(plan)) == expected


def test_only_the_quantized_linears_are_dequantized():
    """bitsandbytes dequantizes a 4-bit weight for each op; the experts never were 4-bit."""
    plan = Plan(model="tiny-moe", method="qlora", device="80GB").validated()
    assert {lin.name for lin in SPEC.quantized_linears()} == {"q", "k", "v", "o"}
    # q_proj and o_proj (256 x 256) in bf16, not an expert's gate_up (2 x 128 x 256 = the same
    # here, so an expert-sized model shows it): widen the experts
    wide = spec_from_config({**CONFIG, "moe_intermediate_size": 1024}, "wide-moe")
    assert step_sizes(plan, wide).dequant == 2 * H * 256


@pytest.mark.parametrize(
    ("stack", "kept_bytes"),
    # TRL 1.16 calls no k-bit preparation (sft_trainer.py:805-912), LLaMA-Factory runs its own
    # (model_utils/checkpointing.py:163-205), Unsloth its own: the experts stay bf16 whatever
    # kbit_prep says; a Trainer script and axolotl run PEFT's
    [("trainer", 4), ("axolotl", 4), ("loop", 4), ("trl", 2), ("llama-factory", 2), ("unsloth", 2)],
)
def test_only_stacks_that_run_peft_preparation_upcast(stack, kept_bytes):
    plan = Plan(model="tiny-moe", method="qlora", kbit_prep=True, stack=stack, device="80GB")
    plan = plan.validated()
    experts = (E * H * 2 * INTER + E * INTER * H) * LAYERS
    no_prep = replace(plan, kbit_prep=False)
    upcast = stored_weight_bytes(SPEC, plan, dtypes(plan))
    assert upcast - stored_weight_bytes(SPEC, no_prep, dtypes(no_prep)) >= (
        experts * (kept_bytes - 2)
    )
    assert (upcast == stored_weight_bytes(SPEC, no_prep, dtypes(no_prep))) is (kept_bytes == 2)
