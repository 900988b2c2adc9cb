"""Parameter counts from the architecture match what transformers builds from each config."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmem.core.architecture import (
    LIMITS,
    MAX_COUNT,
    MAX_PARAMS,
    MIN_COUNT,
    spec_from_config,
    spec_from_count,
)
from trainmem.core.errors import PlanError
from trainmem.core.estimator import estimate
from trainmem.core.plan import METHODS, Plan
from trainmem.core.states import trainable_matrices
from trainmem.sources import catalog

ENTRIES = catalog.catalog()
TINY = {  # a small Llama: 2 layers, hidden 512, MHA
    "model_type": "llama",
    "hidden_size": 512,
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "intermediate_size": 1024,
    "vocab_size": 1000,
}


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.name for e in ENTRIES])
def test_catalogue_count_matches_transformers(entry):
    spec = entry.spec()
    assert abs(spec.params - entry.transformers_params) <= 0.001 * entry.transformers_params
    # In practice the count is exact for every catalogued architecture.
    assert spec.params == entry.transformers_params


def test_catalogue_is_broad():
    ids = {e.hf_id for e in ENTRIES}
    for needed in ("Qwen/Qwen3-30B-A3B", "openai/gpt-oss-20b", "mistralai/Mixtral-8x7B-v0.1"):
        assert needed in ids


def test_gqa_head_dim_and_bias_change_the_count():
    base = {**TINY, "tie_word_embeddings": False}
    mha = spec_from_config(base, "mha")
    # hand count: embed + head 2*1000*512; per layer q,k,v,o 4*512*512 + mlp 3*512*1024 + 2 norms
    per_layer = 4 * 512 * 512 + 3 * 512 * 1024 + 2 * 512
    assert mha.params == 2 * 1000 * 512 + 2 * per_layer + 512
    gqa = spec_from_config({**base, "num_key_value_heads": 2}, "gqa")
    assert mha.params - gqa.params == 2 * 2 * 512 * (512 - 128)
    tied = spec_from_config({**base, "tie_word_embeddings": True}, "tied")
    assert mha.params - tied.params == 1000 * 512
    qwen2 = spec_from_config({**base, "model_type": "qwen2"}, "qwen2")
    assert qwen2.params - mha.params == 2 * (512 + 512 + 512)  # q, k, v biases


def test_moe_active_params():
    mixtral = catalog.find("mistralai/Mixtral-8x7B-v0.1").spec()
    # Mixtral paper: ~13B active with top-2 of 8 experts (12.88B counting embeddings).
    assert 12.8e9 < mixtral.active_params < 12.95e9


def test_count_assumes_dimensions_and_keeps_the_count():
    spec = spec_from_count(7_000_000_000, "7B")
    assert spec.assumed and spec.params == 7_000_000_000
    assert abs(spec.architecture_params - 7e9) / 7e9 < 0.01
    assert "assumed" in spec.notes[0]


@pytest.mark.parametrize(
    ("hf_id", "expected"),
    [
        # PEFT's print_trainable_parameters for r=16 on all linear layers.
        ("meta-llama/Llama-3.1-8B", 41_943_040),
        ("Qwen/Qwen2.5-7B", 40_370_176),
        # Phi-3 fuses qkv_proj and gate_up_proj: one adapter pair each
        ("microsoft/Phi-3-mini-4k-instruct", 25_165_824),
    ],
)
def test_lora_adapter_counts(hf_id, expected):
    spec = catalog.find(hf_id).spec()
    mats = trainable_matrices(spec, Plan(model=hf_id, lora_rank=16).validated())
    assert sum(m.numel for m in mats) == expected


@pytest.mark.parametrize(
    ("hf_id", "targets", "expected"),
    [
        # measured with peft 0.21 / transformers 5.24 (bench/results/measure-cpu-moe.json):
        # all-linear adapts the fused 3-D experts (rank doubled on gate_up) and the router
        ("Qwen/Qwen3-30B-A3B", "all-linear", 996_507_648),
        ("Qwen/Qwen3-30B-A3B", "attention", 13_369_344),
        ("mistralai/Mixtral-8x7B-v0.1", "all-linear", 359_665_664),
        # gpt-oss: neither its router nor its experts are adapted by all-linear
        ("openai/gpt-oss-20b", "all-linear", 7_962_624),
    ],
)
def test_moe_lora_adapter_counts(hf_id, targets, expected):
    spec = catalog.find(hf_id).spec()
    plan = Plan(model=hf_id, lora_rank=16, lora_targets=targets).validated()
    assert sum(m.numel for m in trainable_matrices(spec, plan)) == expected


# -- bad config values and the assumed shapes of small counts --------------------------------


def test_limits_are_far_above_every_catalogue_model():
    for entry in ENTRIES:
        cfg = entry.config.get("text_config") or entry.config
        for key, (_, hi) in LIMITS.items():
            value = cfg.get(key)
            assert value is None or value * 50 <= hi, (entry.name, key)
        # MAX_PARAMS is set ~50x above the largest published model (architecture.py), the same
        # margin as the fields': 1000x would refuse any model over 100B (gpt-oss-120b, 235B MoE)
        assert entry.transformers_params * 50 <= MAX_PARAMS


@pytest.mark.parametrize(
    ("changed", "message"),
    [
        ({"hidden_size": True}, "'hidden_size' must be a positive integer up to 1,048,576"),
        ({"hidden_size": "512"}, "(got '512')"),
        ({"hidden_size": 512.5}, "(got 512.5)"),
        ({"hidden_size": float("nan")}, "(got nan)"),
        ({"vocab_size": 10**400}, "(got a 1329-bit integer)"),
        ({"head_dim": 0}, "'head_dim' must be a positive integer"),
        ({"num_attention_heads": 1024}, "each head would be 0 wide"),
        ({"num_experts": 4, "num_experts_per_tok": 5}, "exceeds the number of experts (4)"),
        ({"num_experts": 4}, "lacks 'num_experts_per_tok'"),
        ({"num_experts": -1}, "'num_experts' must be an integer from 0 up to 65,536"),
        ({"tie_word_embeddings": "false"}, "'tie_word_embeddings' must be true or false"),
        ({"final_logit_softcapping": [30]}, "must be a number or null"),
        ({"model_type": {"a": 1}}, "'model_type' must be a string"),
        ({"text_config": "gemma"}, "'text_config' must be an object"),
        ({"hidden_size": 2**20, "num_hidden_layers": 100}, "over the 100T this planner accepts"),
    ],
)
def test_config_values_are_checked(changed, message):
    with pytest.raises(PlanError) as err:
        spec_from_config({**TINY, **changed}, "bad")
    assert err.value.field == "model" and message in err.value.message
    assert "\n" not in str(err.value)


def test_integral_floats_and_nulls_are_accepted():
    spec = spec_from_config({**TINY, "hidden_size": 512.0, "head_dim": None}, "ok")
    assert spec.hidden == 512 and isinstance(spec.hidden, int) and spec.head_dim == 64


@pytest.mark.parametrize("count", [MIN_COUNT - 1, MAX_COUNT + 1])
def test_counts_outside_the_range_are_refused(count):
    with pytest.raises(PlanError, match=r"outside 1M\.\.5T"):
        spec_from_count(count, "x")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.integers(MIN_COUNT, MAX_COUNT) | st.integers(MIN_COUNT, 200_000_000))
def test_assumed_shapes_fit_any_count(count):
    """Small counts (--model 2M) get a scaled-down shape: every part positive, the parts
    adding up to the count, and no negative component under any method."""
    spec = spec_from_count(count, "x")
    assert spec.params == count and spec.intermediate >= 1 and spec.vocab >= 256
    assert abs(spec.architecture_params - count) <= 0.002 * count
    assert spec.layers * spec.layer_weight_elements < count  # QLoRA's unquantized rest >= 0
    for method in METHODS:
        est = estimate(Plan(model="x", method=method).validated(), spec)
        assert all(c.bytes >= 0 for c in est.components), (method, est.components)
        assert all(total >= 0 for total in est.phases.values())


def test_a_smollm3_config_without_the_tie_key_is_tied_as_its_config_class_says():
    """SmolLM3Config's tie_word_embeddings defaults to True (transformers 5.24
    configuration_smollm3.py); HuggingFaceTB/SmolLM3-3B's config.json leaves the key out."""
    entry = catalog.find("HuggingFaceTB/SmolLM3-3B")
    assert entry is not None
    config = dict(entry.config)
    config.pop("tie_word_embeddings", None)
    spec = spec_from_config(config, "own-smollm3")
    assert spec.tied_embeddings and spec.params == 3_075_098_624
    assert not any("not modelled exactly" in n for n in spec.notes)


def test_a_lora_rank_past_the_hidden_size_is_said_to_add_nothing():
    spec = catalog.find("Qwen/Qwen2.5-7B").spec()
    notes = " ".join(estimate(Plan(lora_rank=65536).validated(), spec).notes)
    assert "LoRA rank 65,536 is above the hidden size 3,584" in notes
    assert "above the hidden size" not in " ".join(
        estimate(Plan(lora_rank=256).validated(), spec).notes
    )


def test_a_plan_peft_refuses_names_a_hostile_model_type_escaped_and_short():
    """config.json's model_type reaches the refusal note: no raw escape, no unbounded text."""
    config = dict(catalog.find("mistralai/Mixtral-8x7B-v0.1").config)
    config["model_type"] = "moe\x1b[2J" + "x" * 10_000
    spec = spec_from_config(config, "hostile")
    notes = estimate(Plan(method="lora", lora_targets="down").validated(), spec).notes
    refused = [n for n in notes if n.startswith("PEFT refuses")]
    assert refused and "\x1b" not in refused[0] and len(refused[0]) < 200
