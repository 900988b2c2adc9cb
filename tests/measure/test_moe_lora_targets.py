"""Which MoE parameters PEFT adapts, by the plan's targets, against a real get_peft_model on
tiny models of each MoE model_type (transformers 5 fuses the experts into 3-D parameters; PEFT
0.22 reaches them through target_parameters on some models only): the estimate's trainable
count must be PEFT's to the parameter, and where PEFT refuses the targets the estimate must
say so."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

from trainmem.core.architecture import spec_from_config  # noqa: E402
from trainmem.core.estimator import estimate  # noqa: E402
from trainmem.core.plan import Plan  # noqa: E402
from trainmem.core.precision import dtypes  # noqa: E402
from trainmem.core.states import model_states, peft_refusal  # noqa: E402

pytestmark = pytest.mark.torch

COMMON = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 100,
    "head_dim": 16,
    "num_experts_per_tok": 2,
}
MODELS = {
    "qwen3_moe": {"moe_intermediate_size": 32, "num_experts": 4},
    "qwen2_moe": {
        "moe_intermediate_size": 32,
        "num_experts": 4,
        "shared_expert_intermediate_size": 64,
    },
    "mixtral": {"num_local_experts": 4},
}
# the plan's targets -> PEFT's target_modules
TARGETS = {
    "all-linear": "all-linear",
    "q,k,v,o,gate,up,down": [f"{m}_proj" for m in ("q", "k", "v", "o", "gate", "up", "down")],
    "attention": ["q_proj", "k_proj", "v_proj", "o_proj"],
    "linear": None,  # axolotl's lora_target_linear: the names of every nn.Linear but lm_head
}


def linear_names(model) -> list[str]:
    """What axolotl 067b021 passes for lora_target_linear (loaders/adapter.py:54-71)."""
    names = {
        n.rsplit(".", 1)[-1] for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)
    }
    return sorted(names - {"lm_head"})


@pytest.mark.parametrize("targets", list(TARGETS))
@pytest.mark.parametrize("model_type", list(MODELS))
def test_trainable_parameters_are_peft_s(model_type, targets):
    config = {"model_type": model_type, **COMMON, **MODELS[model_type]}
    spec = spec_from_config(config, "tiny")
    plan = Plan(model="tiny", method="lora", lora_rank=4, lora_targets=targets).validated()
    hf = transformers.AutoConfig.for_model(**config)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers.AutoModelForCausalLM.from_config(hf)
        modules = TARGETS[targets] or linear_names(model)
        wrapped = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=modules))
    real = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    assert model_states(spec, plan, dtypes(plan)).trainable_params == real


# target lists PEFT may refuse: one half of the fused gate_up, or nothing this model has
REFUSABLE = ["q,gate", "up,down", "down", "gate,up"]


@pytest.mark.parametrize("targets", REFUSABLE)
@pytest.mark.parametrize("model_type", list(MODELS))
def test_a_plan_peft_refuses_says_so(model_type, targets):
    config = {"model_type": model_type, **COMMON, **MODELS[model_type]}
    spec = spec_from_config(config, "tiny")
    plan = Plan(model="tiny", method="lora", lora_rank=4, lora_targets=targets).validated()
    model = transformers.AutoModelForCausalLM.from_config(
        transformers.AutoConfig.for_model(**config)
    )
    names = [f"{t}_proj" for t in targets.split(",")]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=names))
    except ValueError as refused:  # NoMatchingPeftModuleError is a ValueError
        assert peft_refusal(spec, plan), refused
        assert peft_refusal(spec, plan) in estimate(plan, spec).notes
    else:
        assert peft_refusal(spec, plan) is None
