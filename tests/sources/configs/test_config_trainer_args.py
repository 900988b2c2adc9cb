"""TRL SFTConfig (YAML for `trl sft --config`) and plain TrainingArguments (JSON)."""

import json

import pytest
from config_helpers import read, write

from trainmem.core.errors import PlanError
from trainmem.sources.configs import read_configs


def test_trl_yaml_with_model_config_keys(tmp_path):
    plan = read(
        tmp_path,
        "sft.yaml",
        """
        model_name_or_path: Qwen/Qwen2.5-0.5B
        model_revision: v1
        dataset_name: trl-lib/Capybara
        max_length: 2048
        packing: true
        per_device_train_batch_size: 4
        gradient_checkpointing: false
        use_peft: true
        lora_r: 64
        lora_alpha: 128
        lora_dropout: 0.0
        lora_target_modules: all-linear
        load_in_4bit: true
        bnb_4bit_quant_type: nf4
        use_bnb_nested_quant: true
        optim: paged_adamw_32bit
        dtype: bfloat16
        attn_implementation: flex_attention
        learning_rate: 2.0e-4
        """,
    )
    assert plan.values == {
        "stack": "trl",
        "model": "Qwen/Qwen2.5-0.5B@v1",
        "method": "qlora",
        "quant": "nf4",
        "double_quant": True,
        "lora_rank": 64,
        "lora_alpha": 128.0,
        "lora_dropout": 0.0,
        "lora_targets": "all-linear",
        "seq_len": 2048,
        "batch": 4,
        "packing": True,
        "grad_ckpt": False,
        "precision": "bf16-mixed",
        "optimizer": "paged-adamw-32bit",
        "attn": "flex",
    }


def test_trl_defaults(tmp_path):
    plan = read(tmp_path, "sft.yaml", "model_name_or_path: x/y\nuse_peft: true\n")
    v, o = plan.values, plan.origins
    assert (v["seq_len"], v["batch"], v["grad_ckpt"], v["packing"]) == (1024, 8, True, False)
    assert (v["lora_rank"], v["lora_alpha"], v["lora_dropout"]) == (16, 32.0, 0.05)
    assert v["lora_targets"] == "q,v"  # PEFT's per-architecture default for Llama/Qwen
    # bf16 autocast over a model SFTTrainer loads in float32
    assert (v["precision"], v["base_dtype"]) == ("bf16-mixed", "fp32")
    assert o["seq_len"] == "TRL 1.16.0 default (trl/trainer/sft_config.py:202)"
    assert o["grad_ckpt"] == "TRL 1.16.0 default (trl/trainer/base_config.py:62)"
    assert o["batch"] == "TRL 1.16.0 default (transformers/training_args.py:777)"


def test_trl_full_fine_tune_loaded_in_bf16_is_pure_bf16(tmp_path):
    plan = read(
        tmp_path, "s.yaml", "model_name_or_path: x/y\nmodel_init_kwargs: {dtype: bfloat16}\n"
    )
    assert (plan.values["method"], plan.values["precision"]) == ("full", "bf16")


def test_training_arguments_json(tmp_path):
    args = {
        "output_dir": "out",
        "per_device_train_batch_size": 2,
        "gradient_checkpointing": True,
        "gradient_checkpointing_kwargs": {"offload": True},
        "bf16": True,
        "optim": "adamw_torch_4bit",
        "use_liger_kernel": True,
        "fsdp": "full_shard",
        "learning_rate": 1e-5,
    }
    path = write(tmp_path, "args.json", json.dumps(args, indent=1))
    plan = read_configs([path])
    assert plan.values == {
        "stack": "trainer",
        "batch": 2,
        "grad_ckpt": True,
        "ckpt_offload": True,
        "precision": "bf16-mixed",  # FSDP under bf16: accelerate's mixed precision
        "optimizer": "adamw-4bit",
        "loss": "fused",
        "strategy": "fsdp",
        "fsdp": "full-shard",
        "fsdp_version": 2,
    }
    assert plan.origins["batch"] == f"{path}:3 per_device_train_batch_size"
    assert plan.origins["fsdp"] == f"{path}:11 fsdp"
    assert plan.unmodelled == ()
    assert any("names no model" in n for n in plan.notes)


def test_training_arguments_defaults(tmp_path):
    plan = read(tmp_path, "a.json", '{"output_dir": "out"}')
    assert (plan.values["batch"], plan.values["grad_ckpt"]) == (8, False)
    assert plan.origins["grad_ckpt"] == (
        "transformers 5.24.0 default (transformers/training_args.py:1541-1542)"
    )
    assert "seq_len" not in plan.values and "method" not in plan.values  # the script's


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("beta: 0.1", "beta: a DPO/KTO key"),
        ("num_generations: 8", "num_generations: a GRPO/RLOO key"),
        ("max_seq_length: 512", "max_seq_length: was renamed max_length"),
        ("load_in_4bit: true", "load_in_4bit: a quantized base trains only with LoRA"),
        ("per_device_train_batch_size: [1]", "per_device_train_batch_size: [1] is not a whole"),
    ],
)
def test_errors(tmp_path, text, message):
    with pytest.raises(PlanError) as err:
        read(tmp_path, "s.yaml", f"model_name_or_path: x/y\n{text}\n")
    assert message in str(err.value) and f"{tmp_path / 's.yaml'}:2" in str(err.value)


def test_real_training_arguments_are_not_misspellings(tmp_path):
    # alignment-handbook recipes set per_device_eval_batch_size, a TrainingArguments field,
    # which once read as a misspelt per_device_train_batch_size
    plan = read(
        tmp_path,
        "sft.yaml",
        "model_name_or_path: x/y\nper_device_eval_batch_size: 16\neval_strategy: steps\n"
        "per_device_train_batchsize: 4\n",
    )
    assert [n for n in plan.notes if "unknown key" in n] == [
        f"{tmp_path / 'sft.yaml'}:4 per_device_train_batchsize: unknown key, ignored (did you "
        "mean per_device_train_batch_size?)"
    ]
