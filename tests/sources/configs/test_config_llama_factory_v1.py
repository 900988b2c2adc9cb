"""LLaMA-Factory v1 YAML (examples/v1/**, run with USE_V1=1): its keys, its defaults and
its own training loop, never read as axolotl (micro_batch_size) or LLaMA-Factory v0."""

import pytest
from config_helpers import read, write

from trainmem.core.errors import PlanError
from trainmem.sources.configs import read_configs

# examples/v1/train_lora/train_lora_sft.yaml
LORA = """
model: Qwen/Qwen3-4B
model_class: llm
peft_config:
  name: lora
  r: 16
  lora_alpha: 32
  lora_dropout: 0.05
  target_modules: all
kernel_config:
  name: auto
dist_config:
  name: fsdp2
  dcp_path: null
train_dataset: data/v1_sft_demo.yaml
output_dir: ./outputs/test_lora
micro_batch_size: 1
cutoff_len: 2048
learning_rate: 1.0e-4
max_steps: 10
sample_backend: hf
max_new_tokens: 128
"""


def test_lora_example_is_read_as_v1(tmp_path):
    plan = read(tmp_path, "lora.yaml", LORA)
    name = tmp_path / "lora.yaml"
    assert plan.values == {
        "stack": "loop",
        "model": "Qwen/Qwen3-4B",
        "method": "lora",
        "lora_rank": 16,
        "lora_alpha": 32.0,
        "lora_dropout": 0.05,
        "lora_targets": "all-linear",
        "seq_len": 2048,
        "batch": 1,
        "grad_ckpt": True,
        "optimizer": "adamw-foreach",
        "strategy": "fsdp",
        "fsdp_version": 2,
        "fsdp": "full-shard",
        "precision": "bf16-mixed",
    }
    assert plan.origins["batch"] == f"{name}:16 micro_batch_size"
    assert plan.origins["lora_rank"] == f"{name}:5 peft_config.r"
    assert plan.origins["grad_ckpt"] == (
        "LLaMA-Factory v1 ff6d4d1 default (src/llamafactory/v1/config/training_args.py:73-76)"
    )
    assert plan.origins["precision"].startswith(
        "LLaMA-Factory v1 ff6d4d1 default (src/llamafactory/v1/config/training_args.py:61-64"
    )
    assert plan.unmodelled == (
        f"{name}: LLaMA-Factory v1's loss: a contiguous fp32 copy of the shifted logits beside "
        "the fp32 logits (src/llamafactory/v1/core/base_trainer.py:240-243), one more than "
        "planned",
    )
    assert not any("unknown key" in n for n in plan.notes)


def test_defaults_without_dist_config(tmp_path):
    full = read(tmp_path, "full.yaml", "model: x/y\nmicro_batch_size: 2\nbf16: true\n")
    v = full.values
    # model_engine.py:207: the whole model in fp32, and nothing autocasts outside FSDP2
    assert (v["method"], v["precision"], v["seq_len"], v["stack"]) == ("full", "fp32", 2048, "loop")
    assert "strategy" not in v
    assert any("bf16: no effect without dist_config fsdp2" in n for n in full.notes)
    lora = read(tmp_path, "l.yaml", "model: x/y\npeft_config:\n  name: lora\n")
    assert (lora.values["lora_rank"], lora.values["lora_alpha"]) == (8, 16.0)  # peft.py:38-40
    assert (lora.values["precision"], lora.values["base_dtype"]) == ("bf16-mixed", "16-bit")
    assert lora.values["batch"] == 1  # training_args.py:33-36


def test_quantized_lora(tmp_path):
    plan = read(
        tmp_path,
        "q.yaml",
        "model: x/y\npeft_config:\n  name: lora\nquant_config:\n  name: bnb\n"
        "  quantization_bit: 4\n",
    )
    v = plan.values
    assert (v["method"], v["quant"], v["double_quant"], v["kbit_prep"]) == (
        "qlora",
        "nf4",
        True,
        False,  # v1 never runs prepare_model_for_kbit_training
    )


def test_deepspeed_dist_config_reads_the_named_file(tmp_path, monkeypatch):
    # examples/v1/train_full/train_full_deepspeed.yaml, run from the repository root
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").mkdir()
    write(tmp_path / "examples", "ds_z3.json", '{"zero_optimization": {"stage": 3}}')
    path = write(
        tmp_path,
        "ds.yaml",
        "model: x/y\nmodel_class: llm\ndist_config:\n  name: deepspeed\n"
        "  config_file: examples/ds_z3.json\nmicro_batch_size: 1\n",
    )
    v = read_configs([path]).values
    # deepspeed_utils.py:55-78: bf16 unless the DeepSpeed file disables it
    assert (v["strategy"], v["zero"], v["precision"]) == ("zero", 3, "bf16")


@pytest.mark.parametrize(
    ("yaml", "named"),
    [
        ("cp_size: 2\ncp_mode: ulysses", "u.yaml:3 cp_size (context parallelism over 2 GPUs"),
        ("batching_strategy: padding_free", "u.yaml:3 batching_strategy ('padding_free'"),
        ("optim_config:\n  name: muon", "u.yaml:4 optim_config.name (optimizer 'muon'"),
        ("kernel_config:\n  name: liger_kernel", "u.yaml:4 kernel_config.name (kernels liger"),
        ("dist_config:\n  name: fsdpturbo\n  ep_size: 16", "u.yaml:4 dist_config.name ('fsdp"),
    ],
)
def test_unmodelled_keys_are_named(tmp_path, yaml, named):
    plan = read(tmp_path, "u.yaml", f"model: x/y\nmicro_batch_size: 1\n{yaml}\n")
    assert any(named in u for u in plan.unmodelled), plan.unmodelled


@pytest.mark.parametrize(
    ("yaml", "message"),
    [
        (
            "peft_config:\n  name: freeze\n  freeze_trainable_layers: 2",
            "u.yaml:4: peft_config.name: 'freeze' is not planned (lora, or no peft_config)",
        ),
        ("quant_config:\n  name: bnb", "u.yaml:3: quant_config: a quantized model trains only"),
        ("pref_beta: 0.1", "u.yaml:3: pref_beta: a DPO key"),
        ("model_class: cls", "u.yaml:3: model_class: 'cls' is not planned (llm)"),
    ],
)
def test_not_planned_is_one_line(tmp_path, yaml, message):
    with pytest.raises(PlanError) as err:
        read(tmp_path, "u.yaml", f"model: x/y\nmicro_batch_size: 1\n{yaml}\n")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_llamafactory_cli_with_use_v1(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "lora.yaml", LORA)
    plan = read_configs(
        [], ["USE_V1=1 NPROC_PER_NODE=4 llamafactory-cli sft lora.yaml micro_batch_size=2"]
    )
    v = plan.values
    assert (v["stack"], v["method"], v["gpus"], v["batch"]) == ("loop", "lora", 4, 2)
