"""The catalogue's models answer to their instruct checkpoints and re-uploads offline, with
the exact count of the architecture they share, and the committed file is the script's."""

import importlib.util
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from trainmem.cli.main import main
from trainmem.core.errors import PlanError
from trainmem.sources import catalog
from trainmem.sources.resolve import resolve_model

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT.parent / "shared" / "reference" / "models.json"  # CI: beside the clone

# (id a config or command line names, the catalogue model it is, its exact parameter count)
OFFLINE = [
    ("Qwen/Qwen2.5-7B-Instruct", None, 7_615_616_512),  # its own entry: context 32768
    ("Qwen/Qwen2.5-1.5B-Instruct", "Qwen/Qwen2.5-1.5B", 1_543_714_304),
    ("meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B", 8_030_261_248),
    ("meta-llama/Meta-Llama-3.1-8B", "meta-llama/Llama-3.1-8B", 8_030_261_248),
    ("meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B", 8_030_261_248),
    ("mistralai/Mistral-7B-Instruct-v0.3", "mistralai/Mistral-7B-v0.3", 7_248_023_552),
    ("mistralai/Mistral-7B-Instruct-v0.1", "mistralai/Mistral-7B-v0.1", 7_241_732_096),
    ("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.1-70B", 70_553_706_496),
    ("meta-llama/Llama-3.2-3B-Instruct", "meta-llama/Llama-3.2-3B", 3_212_749_824),
    ("unsloth/Meta-Llama-3.1-8B-bnb-4bit", "meta-llama/Llama-3.1-8B", 8_030_261_248),
    ("unsloth/llama-3-8b-bnb-4bit", "meta-llama/Meta-Llama-3-8B", 8_030_261_248),
    ("unsloth/Qwen2.5-7B-Instruct-bnb-4bit", "Qwen/Qwen2.5-7B-Instruct", 7_615_616_512),
    ("unsloth/gemma-2-9b-it", "google/gemma-2-9b", 9_241_705_984),
    ("google/gemma-2-2b-it", "google/gemma-2-2b", 2_614_341_888),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-8B", "meta-llama/Llama-3.1-8B", 8_030_261_248),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", "Qwen/Qwen2.5-32B", 32_763_876_352),
    ("unsloth/Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B", 30_532_122_624),
    ("HuggingFaceTB/SmolLM2-1.7B-Instruct", "HuggingFaceTB/SmolLM2-1.7B", 1_711_376_384),
    ("allenai/OLMo-2-1124-7B-Instruct", "allenai/OLMo-2-1124-7B", 7_298_617_344),
    ("unsloth/gpt-oss-20b", "openai/gpt-oss-20b", 20_914_757_184),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mistralai/Mixtral-8x7B-v0.1", 46_702_792_704),
    # own entries: their config.json stops at 32768 (the base's: 131072); keras-hub's exact counts
    ("Qwen/Qwen2.5-14B-Instruct", None, 14_770_033_664),
    ("Qwen/Qwen2.5-32B-Instruct", None, 32_763_876_352),
    ("Qwen/Qwen2.5-72B-Instruct", None, 72_706_203_648),
    ("Qwen/Qwen2.5-Coder-32B", None, 32_763_876_352),
    ("Qwen/Qwen2.5-Coder-14B-Instruct", "Qwen/Qwen2.5-Coder-14B", 14_770_033_664),
    ("Qwen/Qwen2.5-Coder-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", 7_615_616_512),
    ("Qwen/Qwen2.5-Coder-1.5B", "Qwen/Qwen2.5-1.5B", 1_543_714_304),
    ("Qwen/Qwen3-8B-Base", "Qwen/Qwen3-8B", 8_190_735_360),
    ("Qwen/Qwen3-30B-A3B-Base", "Qwen/Qwen3-30B-A3B", 30_532_122_624),
    ("Qwen/Qwen3-235B-A22B", None, 235_093_634_560),
    ("Qwen/Qwen3-235B-A22B-Thinking-2507", "Qwen/Qwen3-235B-A22B-Instruct-2507", 235_093_634_560),
    ("Qwen/Qwen3-4B-Instruct-2507", "Qwen/Qwen3-4B-Thinking-2507", 4_022_468_096),
    ("deepseek-ai/DeepSeek-R1-Distill-Llama-70B", "meta-llama/Llama-3.1-70B", 70_553_706_496),
    # MXFP4 experts: the Hub's BF16 + U8 totals with the scales taken out (build_catalog.py)
    ("openai/gpt-oss-120b", None, 116_829_156_672),
    # tied 200064-row embedding (a config.json copy), partial rotary
    ("microsoft/Phi-4-mini-instruct", None, 3_836_021_760),
    ("unsloth/Phi-4-mini-instruct-bnb-4bit", "microsoft/Phi-4-mini-instruct", 3_836_021_760),
    # no tie_word_embeddings in its config.json: SmolLM3Config's default (tied)
    ("HuggingFaceTB/SmolLM3-3B", None, 3_075_098_624),
    # config.json copies; the 128k one differs in context only
    ("microsoft/Phi-3-medium-4k-instruct", None, 13_960_238_080),
    ("microsoft/Phi-3-medium-128k-instruct", None, 13_960_238_080),
    ("unsloth/Phi-3-medium-4k-instruct", "microsoft/Phi-3-medium-4k-instruct", 13_960_238_080),
    # untied, unlike Qwen2.5-1.5B: the saved index's total_parameters
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", None, 1_777_088_000),
    (
        "unsloth/DeepSeek-R1-Distill-Qwen-1.5B-bnb-4bit",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        1_777_088_000,
    ),
    # the safetensors index's total_size / 2 bytes
    ("mistralai/Mistral-Small-24B-Instruct-2501", None, 23_572_403_200),
    (
        "unsloth/Mistral-Small-24B-Instruct-2501",
        "mistralai/Mistral-Small-24B-Instruct-2501",
        23_572_403_200,
    ),
]


@pytest.mark.parametrize(("hf_id", "model", "params"), OFFLINE, ids=[o[0] for o in OFFLINE])
def test_instruct_and_reupload_ids_resolve_offline_exactly(monkeypatch, hf_id, model, params):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    spec = resolve_model(hf_id)
    assert spec.params == params and spec.source == "catalogue" and spec.hf_id == hf_id
    entry = catalog.find(hf_id)
    if model is None:
        assert entry.alias_of is None and entry in catalog.catalog()
    else:
        base = catalog.find(model)
        assert base in catalog.catalog() and entry.config == base.config
        assert any(hf_id in n for n in spec.notes)  # says whose config it is


def test_the_ids_of_the_issue_plan_from_a_config_file(tmp_path, capsys):
    for hf_id in ("Qwen/Qwen2.5-7B-Instruct", "meta-llama/Llama-3.3-70B-Instruct"):
        config = tmp_path / "lora.yaml"
        config.write_text(f"model_name_or_path: {hf_id}\nfinetuning_type: lora\nstage: sft\n")
        assert main(["plan", "--from", str(config), "--device", "80GB", "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["model"]["params"] > 0


def _bare(spec):
    return replace(spec, name="", hf_id=None, notes=())


def test_every_alias_is_its_model_under_another_name():
    seen = set()
    for entry in catalog.catalog():
        for alias in catalog._entries()[catalog.catalog().index(entry)][1]:
            assert alias["sources"] and alias["evidence"] in ("config", "template", "re-upload")
            assert alias["hf_id"].lower() not in seen
            seen.add(alias["hf_id"].lower())
            view = catalog.find(alias["hf_id"])
            assert view.hf_id == alias["hf_id"]
            if view.quantized in ("awq", "gptq"):
                continue
            assert _bare(view.spec()) == _bare(entry.spec())
    assert len(seen) == len(catalog.alias_names()) > 100


def test_a_bnb_4bit_reupload_says_to_plan_it_as_qlora(capsys):
    args = ["plan", "--model", "unsloth/Meta-Llama-3.1-8B-bnb-4bit", "--device", "24GB"]
    assert main([*args, "--json"]) == 0
    notes = json.loads(capsys.readouterr().out)["notes"]
    assert any("pre-quantized to bitsandbytes 4-bit" in n and "--method qlora" in n for n in notes)
    assert catalog.find("unsloth/Meta-Llama-3.1-8B-bnb-4bit").quantized == "bnb-4bit"
    assert catalog.find("unsloth/Meta-Llama-3.1-8B").quantized is None  # its 16-bit upload


def test_an_awq_reupload_is_refused_in_one_line(capsys):
    with pytest.raises(PlanError, match="AWQ 4-bit checkpoint"):
        resolve_model("casperhansen/llama-3-8b-instruct-awq")
    code = main(["plan", "--model", "casperhansen/llama-3-8b-instruct-awq", "--device", "24GB"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and "--method qlora" in err


def test_the_families_users_ask_for_are_present():
    for hf_id in (
        "meta-llama/Llama-3.1-8B",
        "meta-llama/Llama-3.2-1B",
        "meta-llama/Llama-3.3-70B-Instruct",
        "Qwen/Qwen2.5-7B",
        "Qwen/Qwen3-8B",
        "Qwen/Qwen3-30B-A3B",
        "google/gemma-2-9b",
        "google/gemma-3-4b-it",
        "mistralai/Mistral-7B-v0.3",
        "mistralai/Mistral-Nemo-Base-2407",
        "mistralai/Mixtral-8x7B-v0.1",
        "microsoft/Phi-3-mini-4k-instruct",
        "microsoft/phi-4",
        "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B",
        "HuggingFaceTB/SmolLM2-135M",
        "allenai/OLMo-2-1124-7B",
        "openai/gpt-oss-20b",
        "openai/gpt-oss-120b",
        "Qwen/Qwen2.5-Coder-7B-Instruct",
        "Qwen/Qwen3-235B-A22B",
        "microsoft/Phi-4-mini-instruct",
        "microsoft/Phi-3-medium-4k-instruct",
        "HuggingFaceTB/SmolLM3-3B",
        "mistralai/Mistral-Small-24B-Instruct-2501",
    ):
        assert catalog.find(hf_id) is not None, hf_id


def test_aliases_do_not_shadow_the_models_own_names():
    for entry in catalog.catalog():
        assert catalog.find(entry.hf_id) is entry
        assert catalog.find(entry.hf_id.split("/")[-1]) is entry


@pytest.mark.skipif(not REFERENCE.is_file(), reason=f"no reference configs at {REFERENCE}")
@pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None,
    reason="the build counts parameters with transformers (the torch-tests extra)",
)
def test_the_committed_catalogue_is_the_scripts_output():
    script = ROOT / "scripts" / "build_catalog.py"
    done = subprocess.run(
        [sys.executable, str(script), str(REFERENCE), "--check"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stdout + done.stderr
