"""--model: counts, catalogue ids, config files, safetensors headers, the HF cache, bad input."""

import json
import struct

import pytest

from trainmem.core.errors import PlanError
from trainmem.sources.resolve import cached_model_ids, resolve_model

CONFIG = {
    "model_type": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 100,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
}


def write_safetensors(path, tensors):
    header = {n: {"dtype": d, "shape": s, "data_offsets": [0, 0]} for n, (d, s) in tensors.items()}
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw)


@pytest.mark.parametrize(
    ("text", "params"), [("7B", 7e9), ("1.5b", 1.5e9), ("494M", 494e6), ("70e9", 70e9)]
)
def test_counts(text, params):
    spec = resolve_model(text)
    assert spec.params == params and spec.assumed and spec.source == "count"


@pytest.mark.parametrize("text", ["Qwen/Qwen2.5-7B", "qwen/qwen2.5-7b", "Qwen2.5-7B"])
def test_catalogue_ids(text):
    spec = resolve_model(text)
    assert spec.source == "catalogue" and spec.params == 7_615_616_512


def test_config_file_and_folder(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    by_file = resolve_model(str(tmp_path / "config.json"))
    by_folder = resolve_model(str(tmp_path))
    assert (
        by_file.params
        == by_folder.params
        == 100 * 64 + 2 * (64 * 64 * 2 + 2 * 64 * 32 + 3 * 64 * 128 + 2 * 64) + 64
    )


def test_safetensors_headers_give_exact_count_and_dtype(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    write_safetensors(tmp_path / "model-1.safetensors", {"a": ("F16", [10, 10])})
    write_safetensors(tmp_path / "model-2.safetensors", {"b": ("F16", [5]), "c": ("F16", [3, 2])})
    spec = resolve_model(str(tmp_path))
    assert spec.params == 111 and spec.dtype == "fp16" and spec.source == "safetensors"


def test_corrupt_safetensors_is_noted_not_fatal(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 2**40))
    spec = resolve_model(str(tmp_path))
    assert spec.source == "config" and "unreadable" in spec.notes[-1]


def test_hf_cache_lookup(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    snap = tmp_path / "models--acme--tiny" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(CONFIG))
    assert cached_model_ids() == ["acme/tiny"]
    spec = resolve_model("acme/tiny")
    assert spec.source == "hf-cache" and spec.layers == 2


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "cannot read"),
        ("[1, 2]", "JSON object"),
        (json.dumps({**CONFIG, "hidden_size": None}), "hidden_size"),
        (json.dumps({**CONFIG, "num_hidden_layers": -3}), "positive integer"),
        (json.dumps({**CONFIG, "num_key_value_heads": 3}), "multiple"),
    ],
)
def test_bad_configs_raise_one_line_plan_errors(tmp_path, content, message):
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(PlanError) as err:
        resolve_model(str(tmp_path / "config.json"))
    assert err.value.field == "model" and message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("text", ["nonsense-model", "acme/not-cached", "", "0B", "1e30"])
def test_unknown_models(text):
    with pytest.raises(PlanError):
        resolve_model(text)


def test_suggestions_for_typos():
    with pytest.raises(PlanError, match="did you mean"):
        resolve_model("Qwen/Qwen2.5-7")
