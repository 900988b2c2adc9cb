"""Parameter counts from the architecture match what transformers builds from each config."""

import pytest

from trainmem.core.architecture import spec_from_config, spec_from_count
from trainmem.core.plan import Plan
from trainmem.core.states import trainable_matrices
from trainmem.sources import catalog

ENTRIES = catalog.catalog()


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
    base = {
        "model_type": "llama",
        "hidden_size": 512,
        "num_hidden_layers": 2,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "intermediate_size": 1024,
        "vocab_size": 1000,
        "tie_word_embeddings": False,
    }
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
