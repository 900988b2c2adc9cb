"""--model: counts, catalogue ids, config files, safetensors headers, the HF cache (in
huggingface_hub's real layout), revisions, bad input."""

import hashlib
import json
import os
import struct
import subprocess
import sys
import time

import pytest
from tiny_model import CONFIG as TINY_CONFIG

from trainmem.core.architecture import spec_from_config
from trainmem.core.errors import PlanError
from trainmem.sources.hf import hub_cache_dir, split_revision
from trainmem.sources.paths import downloaded_model_dir
from trainmem.sources.resolve import cached_model_ids, resolve_model

CONFIG = {**TINY_CONFIG, "torch_dtype": "bfloat16"}


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
    config_count = spec_from_config(CONFIG, "x").params
    write_safetensors(tmp_path / "model-1.safetensors", {"a": ("F16", [config_count, 1])})
    write_safetensors(tmp_path / "model-2.safetensors", {"b": ("F16", [5]), "c": ("F16", [3, 2])})
    spec = resolve_model(str(tmp_path))
    assert spec.params == config_count + 11 and spec.dtype == "fp16"
    assert spec.source == "safetensors"


def test_corrupt_safetensors_is_noted_not_fatal(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 2**40))
    spec = resolve_model(str(tmp_path))
    assert spec.source == "config" and "unreadable" in spec.notes[-1]


def write_cached(root, hf_id, sha, config, refs=("main",), age_s=0):
    """One snapshot in huggingface_hub's cache layout: blobs/, snapshots/<sha>/ (symlinks)
    and refs/<name> holding the sha."""
    repo = root / ("models--" + hf_id.replace("/", "--"))
    blob = repo / "blobs" / hashlib.sha1(f"{sha}-config".encode()).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_text(json.dumps(config))
    snap = repo / "snapshots" / sha
    snap.mkdir(parents=True)
    (snap / "config.json").symlink_to(os.path.relpath(blob, snap))
    for ref in refs:
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / ref).write_text(sha)
    when = time.time() - age_s
    for path in (blob, snap):
        os.utime(path, (when, when))
    return snap


OLD_SHA, NEW_SHA = "1" * 40, "2" * 40


def test_hf_cache_lookup(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    write_cached(tmp_path, "acme/tiny", OLD_SHA, CONFIG)
    assert cached_model_ids() == ["acme/tiny"]
    spec = resolve_model("acme/tiny")
    assert spec.source == "hf-cache" and spec.layers == 2


def test_refs_main_wins_over_a_newer_snapshot(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    write_cached(tmp_path, "acme/tiny", OLD_SHA, CONFIG, age_s=3600)
    write_cached(tmp_path, "acme/tiny", NEW_SHA, {**CONFIG, "num_hidden_layers": 4}, refs=("dev",))
    assert resolve_model("acme/tiny").layers == 2  # refs/main, not the newest by mtime
    assert resolve_model(f"acme/tiny@{NEW_SHA}").layers == 4  # a commit
    assert resolve_model("acme/tiny@dev").layers == 4  # a branch, through refs/dev
    with pytest.raises(PlanError, match="unknown model"):
        resolve_model("acme/tiny@v9")  # never another snapshot for an unknown revision


def test_a_catalogue_id_at_a_revision_is_looked_up_not_pinned(tmp_path, monkeypatch):
    """The catalogue holds one revision: another is the cache's or the download's, and where
    neither has it the error says so (not 'unknown model' for a catalogue id)."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setenv("TRAINMEM_CACHE_DIR", str(tmp_path / "downloads"))
    with pytest.raises(PlanError, match=r"at revision 'v2' is neither in the Hugging Face cache"):
        resolve_model("Qwen/Qwen2.5-7B@v2")
    write_cached(tmp_path, "Qwen/Qwen2.5-7B", NEW_SHA, CONFIG, refs=("v2",))
    assert resolve_model("Qwen/Qwen2.5-7B@v2").source == "hf-cache"
    assert resolve_model("Qwen/Qwen2.5-7B").source == "catalogue"


def test_cached_ids_need_a_config_at_main(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    write_cached(tmp_path, "acme/tiny", OLD_SHA, CONFIG)
    write_cached(tmp_path, "acme/pinned", NEW_SHA, CONFIG, refs=())  # a commit only
    (tmp_path / "datasets--acme--data" / "snapshots").mkdir(parents=True)
    (tmp_path / "models--acme--broken").mkdir()  # no snapshots: a scan warning, not an error
    assert cached_model_ids() == ["acme/tiny"]
    assert resolve_model(f"acme/pinned@{NEW_SHA}").source == "hf-cache"


def test_a_refs_file_no_commit_hash_fits_is_not_read(tmp_path, monkeypatch):
    """huggingface_hub reads refs/main whole: a sparse 64 GiB one raised MemoryError (a
    traceback), and a FIFO there would block; such a ref counts as not cached."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    write_cached(tmp_path, "acme/tiny", OLD_SHA, CONFIG)
    write_cached(tmp_path, "acme/fifo", NEW_SHA, CONFIG, refs=())
    ref = tmp_path / "models--acme--tiny" / "refs" / "main"
    with ref.open("r+b") as f:
        f.truncate(64 * 2**30)  # sparse: no disk taken
    (tmp_path / "models--acme--fifo" / "refs").mkdir()
    os.mkfifo(tmp_path / "models--acme--fifo" / "refs" / "main")
    assert cached_model_ids() == []
    with pytest.raises(PlanError, match="unknown model"):
        resolve_model("acme/tiny")


def test_no_cache_folder_means_no_ids(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "absent"))
    assert cached_model_ids() == []


@pytest.mark.parametrize(
    ("env", "where"),
    [
        ({"HF_HUB_CACHE": "~/hf-cache"}, "home/hf-cache"),
        ({"HF_HUB_CACHE": "$MY_DISK/hub"}, "disk/hub"),
        ({"HF_HOME": "~/hf-home"}, "home/hf-home/hub"),
        ({"XDG_CACHE_HOME": "$MY_DISK/xdg"}, "disk/xdg/huggingface/hub"),
    ],
)
def test_cache_location_expands_home_and_variables(tmp_path, monkeypatch, env, where):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("MY_DISK", str(tmp_path / "disk"))
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    write_cached(tmp_path / where, "acme/tiny", OLD_SHA, CONFIG)
    assert hub_cache_dir() == tmp_path / where
    assert resolve_model("acme/tiny").source == "hf-cache"
    assert cached_model_ids() == ["acme/tiny"]


def test_downloaded_stub_per_revision(tmp_path):
    folder = downloaded_model_dir("acme/tiny", "abc123")
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    counted = spec_from_config(CONFIG, "tiny").params + 5  # headers: the config's count + 5
    write_safetensors(folder / "model.safetensors", {"a": ("BF16", [counted])})
    spec = resolve_model("acme/tiny@abc123")
    assert spec.source == "downloaded" and spec.params == counted
    with pytest.raises(PlanError):
        resolve_model("acme/tiny")  # main was never downloaded


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("org/m@rev", ("org/m", "rev")),
        ("org/m@refs/pr/1", ("org/m", "refs/pr/1")),
        ("org/m", ("org/m", None)),
        ("org/m@", ("org/m", None)),
    ],
)
def test_split_revision(text, expected):
    assert split_revision(text) == expected


def test_resolving_counts_and_catalogue_ids_imports_no_huggingface_hub():
    code = (
        "import sys; from trainmem.sources.resolve import resolve_model; "
        "resolve_model('7B'); resolve_model('Qwen/Qwen2.5-7B'); "
        "print(any(m.split('.')[0] == 'huggingface_hub' for m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not valid JSON"),
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
