"""Unsloth scripts read as configs with ``ast``: values, their lines, Unsloth's defaults, what
is not a literal, unknown calls, and scripts that cannot be read."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from trainmem.core.errors import PlanError
from trainmem.core.plan import Plan
from trainmem.sources.configs import ConfigPlan, read_configs
from trainmem.sources.configs.unsloth_script import MAX_SCRIPT

NOTEBOOK = """\
from unsloth import FastLanguageModel, is_bfloat16_supported
from trl import SFTTrainer, SFTConfig

max_seq_length = 4096
model, tokenizer = FastLanguageModel.from_pretrained(
    model_name = "unsloth/Meta-Llama-3.1-8B-Instruct",
    max_seq_length = max_seq_length,
    dtype = None,
    load_in_4bit = True,
)
model = FastLanguageModel.get_peft_model(
    model,
    r = 32,
    target_modules = ["q_proj", "k_proj", "v_proj", "o_proj",
                      "gate_proj", "up_proj", "down_proj"],
    lora_alpha = 32,
    lora_dropout = 0,
    use_gradient_checkpointing = "unsloth",
)
trainer = SFTTrainer(
    model = model,
    train_dataset = dataset,
    args = SFTConfig(
        per_device_train_batch_size = 2,
        max_seq_length = max_seq_length,
        bf16 = is_bfloat16_supported(),
        optim = "adamw_8bit",
    ),
)
FastLanguageModel.for_inference(model)
"""


def read(tmp_path: Path, text: str, name: str = "train.py") -> ConfigPlan:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return read_configs([path])


def test_a_notebook_gives_each_value_with_its_line(tmp_path):
    plan = read(tmp_path, NOTEBOOK)
    v, o = plan.values, plan.origins
    assert v["stack"] == "unsloth" and v["model"] == "unsloth/Meta-Llama-3.1-8B-Instruct"
    assert o["model"].endswith("train.py:6 from_pretrained.model_name")
    assert (v["method"], v["quant"], v["double_quant"]) == ("qlora", "nf4", True)
    assert o["method"].endswith("train.py:9 from_pretrained.load_in_4bit")
    assert v["seq_len"] == 4096 and ":4 " in o["seq_len"]  # the bound name's line
    assert (v["lora_rank"], v["lora_alpha"], v["lora_dropout"]) == (32, 32, 0)
    assert o["lora_rank"].endswith("train.py:13 get_peft_model.r")
    assert v["lora_targets"] == "q,k,v,o,gate,up,down"
    assert (v["grad_ckpt"], v["ckpt_offload"]) == (True, True)
    assert v["batch"] == 2 and o["batch"].endswith("train.py:24 per_device_train_batch_size")
    assert v["optimizer"] == "adamw-8bit"
    assert v["precision"] == "bf16-mixed" and "dtype None" in o["precision"]
    assert any("SFTConfig.bf16 is not a literal" in n for n in plan.notes)
    assert any("FastLanguageModel.for_inference(...) is not read" in n for n in plan.notes)
    Plan.from_dict(dict(v)).validated()  # every value is a valid plan field


def test_unsloths_defaults_where_the_script_is_silent(tmp_path):
    plan = read(
        tmp_path,
        """\
        from unsloth import FastLanguageModel
        model, tok = FastLanguageModel.from_pretrained("unsloth/Qwen3-4B")
        model = FastLanguageModel.get_peft_model(model)
        """,
    )
    v, o = plan.values, plan.origins
    assert v["model"] == "unsloth/Qwen3-4B" and ":2 " in o["model"]  # positional
    assert v["method"] == "qlora" and "load_in_4bit True" in o["method"]
    assert (v["lora_rank"], v["lora_alpha"], v["lora_targets"]) == (16, 16.0, "all-linear")
    assert v["seq_len"] == 2048 and "loader.py" in o["seq_len"]
    assert (v["grad_ckpt"], v["ckpt_offload"]) == (True, True)
    assert 'use_gradient_checkpointing="unsloth"' in o["ckpt_offload"]


def test_plain_checkpointing_and_a_16_bit_base(tmp_path):
    plan = read(
        tmp_path,
        """\
        from unsloth import FastLanguageModel
        import torch
        m, t = FastLanguageModel.from_pretrained(
            model_name="unsloth/Llama-3.2-1B", load_in_4bit=False, dtype=torch.float16)
        m = FastLanguageModel.get_peft_model(m, r=8, use_gradient_checkpointing=True)
        """,
    )
    v = plan.values
    assert (v["method"], v["precision"]) == ("lora", "fp16-mixed")
    assert (v["grad_ckpt"], v["ckpt_offload"]) == (True, False)


def test_names_bound_twice_or_to_expressions_are_not_literals(tmp_path):
    plan = read(
        tmp_path,
        """\
        from unsloth import FastLanguageModel
        rank = 8
        rank = 16
        length = 1024 * 4
        m, t = FastLanguageModel.from_pretrained("x/y", max_seq_length=length)
        m = FastLanguageModel.get_peft_model(m, r=rank, **extra)
        """,
    )
    assert plan.values["lora_rank"] == 16 and "default" in plan.origins["lora_rank"]
    notes = " ".join(plan.notes)
    assert "train.py:6: get_peft_model.r is not a literal" in notes
    assert "from_pretrained.max_seq_length is not a literal" in notes
    assert "get_peft_model(**...) is not read" in notes


def test_the_script_is_never_run(tmp_path):
    marker = tmp_path / "ran"
    read(
        tmp_path,
        f"""\
        open({str(marker)!r}, "w").write("x")
        from unsloth import FastLanguageModel
        m, t = FastLanguageModel.from_pretrained("x/y")
        """,
    )
    assert not marker.exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("def f(:\n", "train.py:1: not valid Python"),
        ("import torch\n", "no FastLanguageModel.from_pretrained"),
        ("x = 1\0\n", "not valid Python"),
        ("(" * 5000 + ")" * 5000, "not valid Python"),
        (
            "from unsloth import FastLanguageModel\nm = FastLanguageModel.from_pretrained("
            '"x/y")\nm = FastLanguageModel.get_peft_model(m, use_gradient_checkpointing="x")\n',
            "is not 'unsloth', True or False",
        ),
        (
            "from unsloth import FastLanguageModel\nm = FastLanguageModel.from_pretrained("
            '"x/y", dtype="int4")\n',
            "is not a torch dtype",
        ),
    ],
)
def test_a_bad_script_is_one_line(tmp_path, text, message):
    with pytest.raises(PlanError) as err:
        read(tmp_path, text)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_huge_script_is_refused(tmp_path):
    with pytest.raises(PlanError):
        read(tmp_path, "#" * (MAX_SCRIPT + 1))
