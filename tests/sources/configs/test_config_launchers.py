"""DeepSpeed JSON and accelerate config YAML, alone and named by a training config."""

import pytest
from config_helpers import read, write

from trainmem.core.errors import PlanError
from trainmem.sources.configs import read_configs

DS = """{
  "train_micro_batch_size_per_gpu": "auto",
  "bf16": {"enabled": "auto"},
  "zero_optimization": {
    "stage": 2,
    "offload_optimizer": {"device": "cpu", "pin_memory": true},
    "overlap_comm": true,
    "reduce_bucket_size": "auto",
    "allgather_bucket_size": 500000000
  }
}
"""


def test_deepspeed_json(tmp_path):
    plan = read(tmp_path, "ds.json", DS)
    name = tmp_path / "ds.json"
    assert plan.values == {  # "auto" batch: the Trainer's
        "zero": 2,
        "strategy": "zero",
        "offload": "optimizer",
        "reduce_bucket": -1,  # "auto": hidden_size², filled by the Trainer
        "overlap_comm": True,
    }
    assert plan.origins["zero"] == f"{name}:5 zero_optimization.stage"
    assert plan.origins["reduce_bucket"] == f"{name}:8 zero_optimization.reduce_bucket_size"
    assert plan.unmodelled == (f"{name}:9 zero_optimization.allgather_bucket_size",)


def test_deepspeed_stage3_sizes(tmp_path):
    plan = read(
        tmp_path,
        "z3.json",
        '{"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 5e7,'
        ' "stage3_max_live_parameters": 1e9, "stage3_param_persistence_threshold": "auto"}}',
    )
    assert plan.values["prefetch_bucket"] == 50_000_000
    assert plan.values["max_live_params"] == 1_000_000_000
    assert plan.values["persistence_threshold"] == -1
    with pytest.raises(PlanError, match="not a size"):
        read(tmp_path, "bad.json", '{"zero_optimization": {"reduce_bucket_size": "big"}}')


def test_deepspeed_defaults_and_literal_batch(tmp_path):
    plan = read(
        tmp_path, "d.json", '{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {}}'
    )
    assert plan.values == {"zero": 0, "strategy": "zero", "offload": "none", "batch": 4}
    assert plan.origins["zero"] == "DeepSpeed edaa722 default (deepspeed/runtime/zero/config.py:95)"


def test_zero3_parameter_offload(tmp_path):
    plan = read(
        tmp_path,
        "z.json",
        '{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"},'
        ' "offload_optimizer": {"device": "cpu"}}}',
    )
    assert plan.values["offload"] == "params"
    assert plan.unmodelled[0].endswith("(NVMe offload: planned as CPU offload)")


def test_accelerate_deepspeed_plugin(tmp_path):
    plan = read(
        tmp_path,
        "acc.yaml",
        """
        compute_environment: LOCAL_MACHINE
        distributed_type: DEEPSPEED
        deepspeed_config:
          offload_optimizer_device: cpu
          zero3_init_flag: false
        mixed_precision: bf16
        num_machines: 2
        num_processes: 16
        """,
    )
    assert plan.values == {
        "gpus": 8,  # num_processes counts both machines
        "nodes": 2,
        "precision": "bf16",  # the DeepSpeed engine casts the model to bf16, no autocast
        "strategy": "zero",
        "zero": 2,
        "offload": "optimizer",
    }
    assert plan.origins["zero"] == (
        "accelerate 1.15.0 default (accelerate/utils/dataclasses.py:1238)"
    )
    assert plan.unmodelled == ()


def test_accelerate_fsdp_plugin_and_its_deepspeed_file_is_relative(tmp_path):
    plan = read(
        tmp_path,
        "fsdp.yaml",
        "distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_offload_params: true\n"
        "  fsdp_cpu_ram_efficient_loading: true\n  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n",
    )
    assert plan.values == {
        "gpus": 8,
        "strategy": "fsdp",
        "fsdp_version": 1,  # accelerate's default
        "fsdp": "full-shard",
        "offload": "params",
        "ram_efficient_loading": True,
    }
    assert plan.unmodelled == ()  # one unit per decoder layer is what the plan counts
    sized = read(
        tmp_path,
        "sized.yaml",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n"
        "  fsdp_activation_checkpointing: false\n",
    )
    assert [u.split(" ", 1)[1] for u in sized.unmodelled] == [
        "fsdp_config.fsdp_auto_wrap_policy ('SIZE_BASED_WRAP'; planned as one unit per layer)"
    ]  # and activation checkpointing that is off is not named
    v2 = read(
        tmp_path,
        "v2.yaml",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 2\n"
        "  fsdp_reshard_after_forward: false\n",
    )
    assert (v2.values["fsdp_version"], v2.values["fsdp"]) == (2, "shard-grad-op")
    v1 = read(
        tmp_path,
        "v1.yaml",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_sharding_strategy: HYBRID_SHARD\n",
    )
    assert v1.values["fsdp"] == "hybrid-shard"
    (tmp_path / "c").mkdir()
    write(tmp_path / "c", "ds.json", '{"zero_optimization": {"stage": 3}}')
    path = write(
        tmp_path / "c",
        "acc.yaml",
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: ds.json\n",
    )
    assert read_configs([path]).values["zero"] == 3


def test_training_config_keys_rank_above_the_launcher_and_later_files_win(tmp_path):
    acc = write(
        tmp_path,
        "acc.yaml",
        "distributed_type: MULTI_GPU\nnum_processes: 4\nmixed_precision: fp16\n",
    )
    axo = write(tmp_path, "axo.yml", "base_model: x/y\nbf16: true\nmicro_batch_size: 2\n")
    plan = read_configs([axo, acc])
    assert plan.values["precision"] == "bf16" and plan.values["gpus"] == 4
    assert plan.origins["precision"] == f"{axo}:2 bf16"
    assert plan.notes == (
        f"precision: {axo}:2 bf16 ('bf16') is used over {acc}:3 mixed_precision ('fp16-mixed')",
    )
    later = write(tmp_path, "b.yml", "base_model: x/y\nmicro_batch_size: 5\n")
    assert read_configs([axo, later]).values["batch"] == 5


def test_bad_stage(tmp_path):
    with pytest.raises(PlanError) as err:
        read(tmp_path, "s.json", '{\n "zero_optimization": {\n  "stage": 4\n }\n}')
    assert str(err.value) == (
        f"--from: {tmp_path / 's.json'}:3: zero_optimization.stage: 4 is not a ZeRO stage "
        "(0, 1, 2 or 3)"
    )
