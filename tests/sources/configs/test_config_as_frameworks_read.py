"""Each bug class of issue 19, in a file written as the framework's own examples are: keys
read as the framework reads them (the source line beside each expectation)."""

import pytest
from config_helpers import read, write

from trainmem.core.errors import PlanError
from trainmem.sources.configs import read_configs

# axolotl's FSDP examples (examples/llama-3/*fsdp*.yaml at 067b021): the fsdp: list beside
# fsdp_config keys that keep accelerate's fsdp_ prefix.
AXOLOTL_FSDP_PREFIXED = """
base_model: meta-llama/Llama-3.1-8B
sequence_len: 4096
micro_batch_size: 1
gradient_checkpointing: true
fsdp:
  - full_shard
  - auto_wrap
fsdp_config:
  fsdp_limit_all_gathers: true
  fsdp_sync_module_states: true
  fsdp_offload_params: true
  fsdp_use_orig_params: false
  fsdp_cpu_ram_efficient_loading: true
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_transformer_layer_cls_to_wrap: LlamaDecoderLayer
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_activation_checkpointing: false
"""


def test_axolotl_fsdp_prefix_is_dropped_as_axolotl_does(tmp_path):
    # schemas/validation.py:1085-1103 strips fsdp_; setup_fsdp_envs (utils/trainer.py:591-622)
    # sets FSDP_OFFLOAD_PARAMS and FSDP_CPU_RAM_EFFICIENT_LOADING from the stripped keys
    plan = read(tmp_path, "fsdp.yml", AXOLOTL_FSDP_PREFIXED)
    v, name = plan.values, str(tmp_path / "fsdp.yml")
    assert (v["strategy"], v["fsdp_version"], v["fsdp"]) == ("fsdp", 1, "full-shard")
    assert (v["offload"], v["ram_efficient_loading"]) == ("params", True)
    assert plan.origins["offload"] == f"{name}:11 fsdp_config.fsdp_offload_params"
    assert plan.origins["fsdp"] == f"{name}:5 fsdp"  # the list's full_shard
    # a full fine-tune under FSDP and bf16 (auto): accelerate's mixed precision
    assert v["precision"] == "bf16-mixed"
    assert plan.unmodelled == ()  # fsdp_activation_checkpointing: false is off
    # fsdp_sharding_strategy becomes sharding_strategy, not an FSDPConfig field: dropped
    assert any("fsdp_sharding_strategy: ignored" in n for n in plan.notes)


def test_axolotl_fsdp2_selects_its_own_recipe(tmp_path):
    # fsdp_version 2: axolotl's own fsdp2_prepare_model (loaders/patch_manager.py:344-351)
    plan = read(
        tmp_path,
        "fsdp2.yml",
        """
        base_model: Qwen/Qwen2.5-7B
        fsdp_version: 2
        fsdp_config:
          offload_params: false
          reshard_after_forward: true
          fsdp_activation_checkpointing: true
          mixed_precision_policy: bf16
        """,
    )
    v = plan.values
    assert (v["stack"], v["fsdp_version"], v["fsdp"], v["precision"]) == (
        "axolotl",
        2,
        "full-shard",
        "bf16-mixed",
    )
    assert [u.split(" ", 1)[1] for u in plan.unmodelled] == [
        "fsdp_config.fsdp_activation_checkpointing (FSDP's own activation checkpointing)"
    ]
    # a schema field nothing passes on: named as having no effect, reduce_dtype stays auto
    assert "reduce_dtype" not in v
    assert any("mixed_precision_policy: no effect" in n for n in plan.notes)


def test_axolotl_fsdp2_refuses_fsdp1_words(tmp_path):
    with pytest.raises(PlanError, match="hybrid_shard is FSDP1's"):
        read(
            tmp_path,
            "h.yml",
            "base_model: x/y\nfsdp: [hybrid_shard]\nfsdp_version: 2\nfsdp_config:\n"
            "  offload_params: false\n",
        )


def test_trainer_fsdp_config_prefix_and_file(tmp_path, monkeypatch):
    # training_args.py:2781-2786: a JSON file opened from the working directory, fsdp_ dropped
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "fsdp.json", '{"fsdp_version": 1, "fsdp_cpu_offload": true}')
    plan = read(
        tmp_path,
        "args.json",
        '{"per_device_train_batch_size": 1, "bf16": true, "fsdp": "full_shard",'
        ' "fsdp_config": "fsdp.json"}',
    )
    v = plan.values
    assert (v["fsdp_version"], v["fsdp"], v["offload"]) == (1, "full-shard", "params")
    assert plan.origins["fsdp_version"] == f"{tmp_path / 'fsdp.json'}:1 fsdp_version"
    assert v["precision"] == "bf16-mixed"  # training_args.py:1614-1618 -> state.py:1014


def test_trainer_hybrid_shard_needs_fsdp1(tmp_path):
    # _apply_legacy_fsdp_to_config raises for hybrid_shard at version 2 (the default)
    with pytest.raises(PlanError, match="hybrid_shard is FSDP1's"):
        read(tmp_path, "a.json", '{"per_device_train_batch_size": 1, "fsdp": "hybrid_shard"}')


LF_FULL = """
### model
model_name_or_path: Qwen/Qwen2.5-7B-Instruct

### method
stage: sft
do_train: true
finetuning_type: full
deepspeed: examples/deepspeed/ds_z3_config.json  # choices: [ds_z0_config.json, ...]

### train
per_device_train_batch_size: 1
bf16: true
"""
DS_Z3 = """
{
  "train_micro_batch_size_per_gpu": "auto",
  "bf16": {"enabled": "auto"},
  "zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": "auto"}
}
"""


def test_named_files_are_opened_from_the_working_directory(tmp_path, monkeypatch):
    # LLaMA-Factory's examples run from its repository root: the path is the working
    # directory's (TrainingArguments -> accelerate/utils/deepspeed.py:141 os.path.exists)
    (tmp_path / "examples" / "deepspeed").mkdir(parents=True)
    (tmp_path / "examples" / "train_full").mkdir()
    ds = write(tmp_path / "examples" / "deepspeed", "ds_z3_config.json", DS_Z3)
    write(tmp_path / "examples" / "train_full", "qwen_full_sft.yaml", LF_FULL)
    monkeypatch.chdir(tmp_path)
    plan = read_configs(["examples/train_full/qwen_full_sft.yaml"])
    assert (plan.values["strategy"], plan.values["zero"]) == ("zero", 3)
    assert plan.origins["zero"] == f"{ds}:4 zero_optimization.stage"  # the file used
    assert plan.values["precision"] == "bf16"  # the DeepSpeed engine casts, no autocast
    assert not any("working directory" in n for n in plan.notes)
    # from elsewhere the framework would not find it: read beside the config, and said so
    monkeypatch.chdir(tmp_path / "examples")
    write(tmp_path / "examples" / "train_full", "ds.json", DS_Z3)
    beside = write(
        tmp_path / "examples" / "train_full", "b.yaml", "stage: sft\ndeepspeed: ds.json\n"
    )
    plan = read_configs([beside])
    assert plan.values["zero"] == 3
    assert plan.notes[-1:] == (
        f"{beside}:2 deepspeed: ds.json is not in the working directory, where the framework "
        f"opens it; read {beside.parent / 'ds.json'} beside {beside} instead (run from "
        f"{beside.parent} for the framework to find it)",
    )


def test_named_files_are_regular_files_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ds.json").mkdir()
    path = write(tmp_path, "a.yml", "base_model: x/y\ndeepspeed: ds.json\n")
    with pytest.raises(PlanError, match="is a directory"):
        read_configs([path])


@pytest.mark.parametrize(
    ("yaml", "why"),
    [
        ("lisa_n_layers: 4\nlisa_step_interval: 20", "LISA layer-wise sampling"),
        ("tiled_mlp: true", "ALST tiled MLP"),
    ],
)
def test_axolotl_keys_that_change_memory_are_named(tmp_path, yaml, why):
    plan = read(tmp_path, "a.yml", f"base_model: x/y\n{yaml}\n")
    assert any(why in u for u in plan.unmodelled)


def test_tiled_mlp_off_is_not_named(tmp_path):
    assert read(tmp_path, "a.yml", "base_model: x/y\ntiled_mlp: false\n").unmodelled == ()


def test_adamw_torch_8bit_is_torchaos_8bit_adamw(tmp_path):
    # transformers OptimizerNames.ADAMW_TORCH_8BIT -> torchao AdamW8bit (trainer_optimizer.py)
    plan = read(tmp_path, "a.yml", "base_model: x/y\noptimizer: adamw_torch_8bit\n")
    assert plan.values["optimizer"] == "adamw-8bit" and plan.unmodelled == ()
    assert any("torchao's AdamW8bit" in n for n in plan.notes)


def test_use_reentrant_is_read_not_an_unknown_key(tmp_path):
    # the Trainer stack checkpoints non-reentrant; use_reentrant true is named precisely
    plan = read(
        tmp_path,
        "sft.yaml",
        "model_name_or_path: x/y\ngradient_checkpointing: true\n"
        "gradient_checkpointing_kwargs:\n  use_reentrant: true\n",
    )
    assert not any("unknown key" in n for n in plan.notes)
    assert any(
        "reentrant checkpointing, planned as the trl stack's non-reentrant" in n for n in plan.notes
    )
    same = read(
        tmp_path,
        "a.yml",
        "base_model: x/y\ngradient_checkpointing: true\n"
        "gradient_checkpointing_kwargs:\n  use_reentrant: false\n",
    )
    assert same.notes == () and same.unmodelled == ()  # axolotl's own default (base.py:608)
    int8 = read(
        tmp_path,
        "q.yml",
        "base_model: x/y\nadapter: lora\nload_in_8bit: true\nlora_target_linear: true\n"
        "gradient_checkpointing: true\ngradient_checkpointing_kwargs: {use_reentrant: true}\n",
    )
    assert any("LLM.int8 inputs" in u for u in int8.unmodelled)


@pytest.mark.parametrize(
    ("yaml", "precision"),
    [
        # utils/config/__init__.py:190-196 and core/builders/base.py:270-278
        ("bfloat16: true", "bf16"),  # bf16 model; autocast over bf16 weights adds nothing
        ("bfloat16: true\nadapter: lora\nlora_target_linear: true", "bf16-mixed"),
        ("bf16: true\nfsdp_config:\n  offload_params: false", "bf16-mixed"),
        ("bf16: full", "bf16"),  # bf16 weights; the Trainer's bf16 stays off
        ("bf16: false", "fp32"),
        ("fp16: true", "fp16"),  # fp16 weights (load dtype), fp16 autocast
        ("bf16: false\nfp16: true\nfsdp_config:\n  version: 2", "fp16-mixed"),
    ],
)
def test_axolotl_precision_is_load_dtype_and_autocast(tmp_path, yaml, precision):
    assert read(tmp_path, "p.yml", f"base_model: x/y\n{yaml}\n").values["precision"] == precision


def test_deepspeed_json_precision(tmp_path):
    # bf16.enabled / fp16.enabled: the engine casts the parameters (engine.py)
    bf16 = read(
        tmp_path, "b.json", '{"zero_optimization": {"stage": 2}, "bf16": {"enabled": true}}'
    )
    assert bf16.values["precision"] == "bf16"
    fp16 = read(
        tmp_path, "f.json", '{"zero_optimization": {"stage": 2}, "fp16": {"enabled": true}}'
    )
    assert fp16.values["precision"] == "fp16"
    auto = read(
        tmp_path, "a.json", '{"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}'
    )
    assert "precision" not in auto.values  # the Trainer's bf16 decides


def test_trl_fp32_model_under_deepspeed_is_cast(tmp_path, monkeypatch):
    # TRL loads an id in fp32 and autocasts; DeepSpeed casts that model to bf16 instead
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "z2.json", '{"zero_optimization": {"stage": 2}, "bf16": {"enabled": "auto"}}')
    plan = read(
        tmp_path,
        "sft.yaml",
        "model_name_or_path: x/y\nuse_peft: true\ndeepspeed: z2.json\n",
    )
    assert (plan.values["precision"], plan.values["base_dtype"]) == ("bf16", "16-bit")
    assert "DeepSpeed casts the parameters" in plan.origins["precision"]


def test_accelerate_fsdp_mixed_precision_over_a_bf16_training_config(tmp_path):
    # LLaMA-Factory-style: accelerate FSDP config with mixed_precision bf16 and a training
    # config with bf16: true (a full fine-tune whose model loads in 16 bits)
    acc = write(
        tmp_path,
        "fsdp.yaml",
        "distributed_type: FSDP\nmixed_precision: bf16\nnum_processes: 2\n"
        "fsdp_config:\n  fsdp_version: 2\n",
    )
    args = write(
        tmp_path, "args.json", '{"per_device_train_batch_size": 1, "bf16": true, "output_dir": "o"}'
    )
    plan = read_configs([acc, args], ())
    assert plan.values["precision"] == "bf16"  # method unknown (TrainingArguments): as read
    full = write(tmp_path, "full.yml", "base_model: x/y\nbf16: true\n")
    plan = read_configs([acc, full])
    assert plan.values["precision"] == "bf16-mixed"
    assert plan.origins["precision"] == f"{full}:2 bf16 under FSDP with {acc}:2 mixed_precision"


def test_dotted_lora_targets_are_their_suffix(tmp_path):
    # axolotl's llama-4 examples list self_attn.q_proj ...: PEFT matches the path's suffix
    plan = read(
        tmp_path,
        "l.yml",
        "base_model: x/y\nadapter: lora\nlora_target_modules:\n  - self_attn.q_proj\n"
        "  - self_attn.v_proj\n  - mlp.down_proj\n",
    )
    assert plan.values["lora_targets"] == "q,v,down"
