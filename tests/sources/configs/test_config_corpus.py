"""A corpus written in each framework's published style (corpus/: axolotl's examples/ and
deepspeed_configs/, an alignment-handbook-style TRL recipe with its accelerate config and
launch script), each read from its repository root as the docs say, field by field against
what the framework would run (the source of each expectation in a comment)."""

from pathlib import Path

import pytest

from trainmem.sources.configs import read_configs

CORPUS = Path(__file__).parent / "corpus"


@pytest.fixture
def root(monkeypatch):
    def at(name: str) -> Path:
        monkeypatch.chdir(CORPUS / name)
        return CORPUS / name

    return at


def test_axolotl_full_fine_tune_deepspeed_liger_packing(root):
    here = root("axolotl")
    plan = read_configs(["examples/fft-8b-deepspeed.yaml"])
    v = plan.values
    assert v["model"] == "NousResearch/Meta-Llama-3.1-8B"
    assert (v["stack"], v["method"], v["seq_len"], v["batch"], v["packing"]) == (
        "axolotl",
        "full",
        8192,
        1,
        True,
    )
    assert (v["grad_ckpt"], v["optimizer"], v["attn"], v["loss"]) == (
        True,
        "paged-adamw-8bit",
        "flash-attention-2",
        "fused",  # LigerPlugin + liger_fused_linear_cross_entropy
    )
    # deepspeed_configs/zero3_bf16.json from the working directory: ZeRO-3, its buckets auto
    assert (v["strategy"], v["zero"], v["offload"], v["overlap_comm"]) == ("zero", 3, "none", True)
    assert (v["reduce_bucket"], v["prefetch_bucket"], v["persistence_threshold"]) == (-1, -1, -1)
    assert v["max_live_params"] == 0
    ds = here / "deepspeed_configs" / "zero3_bf16.json"
    assert plan.origins["zero"] == f"{ds}:3 zero_optimization.stage"
    assert v["precision"] == "bf16"  # the engine casts to bf16; the ZeRO bf16 recipe
    # use_reentrant: false is axolotl's own default: not a note, not unknown
    assert not any("reentrant" in n or "unknown key" in n for n in plan.notes)
    assert sorted(u.split(" ", 1)[1].split(" (")[0] for u in plan.unmodelled) == [
        "liger_glu_activation",
        "liger_rms_norm",
        "liger_rope",
        "zero_optimization.stage3_max_reuse_distance",
        "zero_optimization.sub_group_size",
    ]


def test_axolotl_qlora_fsdp2(root):
    root("axolotl")
    plan = read_configs(["examples/qlora-fsdp2.yaml"])
    v = plan.values
    assert (v["model"], v["method"], v["quant"], v["double_quant"]) == (
        "Qwen/Qwen2.5-7B-Instruct",
        "qlora",
        "nf4",
        True,  # loaders/model.py:712-720
    )
    assert (v["lora_rank"], v["lora_alpha"], v["lora_dropout"], v["lora_targets"]) == (
        32,
        64.0,
        0.05,
        "linear",  # axolotl's lora_target_linear
    )
    assert (v["seq_len"], v["batch"], v["packing"], v["precision"]) == (
        2048,
        2,
        True,
        "bf16-mixed",
    )
    assert (v["strategy"], v["fsdp_version"], v["fsdp"], v["ram_efficient_loading"]) == (
        "fsdp",
        2,
        "full-shard",
        True,
    )
    assert v["kbit_prep"] is False  # QLoRA under FSDP skips prepare_model_for_kbit_training
    assert "offload" not in v and plan.unmodelled == ()


def test_trl_recipe_launched_by_its_script(root):
    here = root("trl")
    plan = read_configs(["recipes/launch.sh"])
    v = plan.values
    assert (v["stack"], v["model"], v["method"], v["seq_len"], v["batch"]) == (
        "trl",
        "Qwen/Qwen2.5-7B",
        "full",  # use_peft False (trl/trainer/model_config.py)
        2048,
        4,
    )
    assert (v["grad_ckpt"], v["attn"], v["packing"]) == (True, "flash-attention-2", False)
    assert (v["strategy"], v["zero"], v["gpus"], v["offload"]) == ("zero", 3, 8, "none")
    assert v["precision"] == "bf16"  # bf16 model (torch_dtype), DeepSpeed bf16
    recipe = here / "recipes" / "config_full.yaml"
    assert plan.origins["seq_len"] == f"{recipe}:24 max_length"
    assert (
        plan.origins["zero"] == f"{here / 'recipes' / 'zero3.yaml'}:9 deepspeed_config.zero_stage"
    )
