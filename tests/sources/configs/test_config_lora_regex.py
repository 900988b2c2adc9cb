"""A string target_modules is a regex PEFT full-matches against module paths (peft 0.21.2
tuners/tuners_utils.py:2370, :1521): read as the module types it adapts in every layer, in
axolotl's published style and TRL's, and checked against what PEFT itself adapts."""

from __future__ import annotations

import importlib.util
import re

import pytest

from tests.sources.configs.config_helpers import read
from trainmem.core.errors import PlanError

AXOLOTL = "base_model: Qwen/Qwen2.5-0.5B\nadapter: lora\nlora_target_modules: {}\n"
# axolotl examples/gemma3/gemma-3-4b-vision-qlora.yml, examples/gemma4/31b-qlora.yaml
GEMMA3 = (
    r"'model.language_model.layers.[\d]+.(mlp|cross_attn|self_attn).(up|down|gate|q|k|v|o)_proj'"
)
GEMMA4 = (
    r"'model.language_model.layers.[\d]+.(_checkpoint_wrapped_module.)?(mlp|self_attn)"
    r".(up|down|gate|q|k|v|o)_proj'"
)
# axolotl examples/ebft/qwen35-4b-ebft-structured.yaml: attention in every fourth layer
EBFT = (
    r'".*\\.layers\\.(3|7|11|15|19|23|27|31)\\.self_attn\\.(q|k|v|o)_proj'
    r'|.*\\.mlp\\.(gate|up|down)_proj"'
)


@pytest.mark.parametrize(
    ("pattern", "targets"),
    [
        (GEMMA3, "q,k,v,o,gate,up,down"),
        (GEMMA4, "q,k,v,o,gate,up,down"),
        (r"'model.layers.[\d]+.self_attn.(q|v)_proj'", "q,v"),
        (r"'.*\.(gate|up|down)_proj'", "gate,up,down"),
        ("all-linear", "all-linear"),
    ],
)
def test_axolotl_regex_targets_are_planned(tmp_path, pattern, targets):
    plan = read(tmp_path, "a.yml", AXOLOTL.format(pattern))
    assert plan.values["lora_targets"] == targets
    assert plan.origins["lora_targets"].endswith("a.yml:3 lora_target_modules")


def test_a_list_still_names_modules(tmp_path):
    plan = read(tmp_path, "a.yml", AXOLOTL.format("[q_proj, v_proj]"))
    assert plan.values["lora_targets"] == "q,v"


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (EBFT, "adapts q_proj, k_proj, v_proj, o_proj in some layers only"),
        ("q_proj", "PEFT full-matches a string against module paths"),
        ("'(a+)+b'", "nested or more than 4 unbounded repetitions"),
        ("'.*.*.*.*.*q_proj'", "nested or more than 4 unbounded repetitions"),
        ("'(unclosed'", "not a regular expression"),
    ],
)
def test_regex_targets_that_cannot_be_planned_say_why(tmp_path, pattern, message):
    with pytest.raises(PlanError) as err:
        read(tmp_path, "a.yml", AXOLOTL.format(pattern))
    text = str(err.value)
    assert message in text and "a.yml:3: lora_target_modules" in text and "\n" not in text


def test_trl_turns_a_one_item_list_into_a_regex(tmp_path):
    # trl/trainer/model_config.py:177-178: [x] becomes x, which PEFT full-matches
    yaml = "model_name_or_path: Qwen/Qwen2.5-0.5B\nuse_peft: true\nlora_target_modules: [{}]\n"
    plan = read(tmp_path, "sft.yaml", yaml.format(r"'.*\.(q|k)_proj'"))
    assert plan.values["lora_targets"] == "q,k"
    with pytest.raises(PlanError, match="matches no decoder linear layer"):
        read(tmp_path, "sft.yaml", yaml.format("q_proj"))
    two = read(tmp_path, "sft.yaml", yaml.format("q_proj, v_proj"))
    assert two.values["lora_targets"] == "q,v"


@pytest.mark.skipif(
    importlib.util.find_spec("peft") is None or importlib.util.find_spec("torch") is None,
    reason="compares with PEFT itself (the torch-tests extra)",
)
@pytest.mark.parametrize(
    "pattern",
    [r"model.layers.[\d]+.self_attn.(q|v)_proj", r".*\.(gate|up|down)_proj", r".*_proj"],
)
def test_the_types_read_are_the_ones_peft_adapts(tmp_path, pattern):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoConfig, AutoModelForCausalLM

    from tests.sources.tiny_model import CONFIG

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(**CONFIG))
    peft_model = get_peft_model(model, LoraConfig(r=2, target_modules=pattern))
    adapted = {
        re.sub(r"_proj$", "", name.rsplit(".", 1)[-1])
        for name, module in peft_model.named_modules()
        if hasattr(module, "lora_A") and name.endswith("_proj")
    }
    plan = read(tmp_path, "a.yml", AXOLOTL.format(f"'{pattern}'"))
    assert set(plan.values["lora_targets"].split(",")) == adapted
