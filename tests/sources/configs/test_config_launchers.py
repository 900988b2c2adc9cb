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
    # zero/config.py:113 reduce_bucket_size gt=0; a prefetch bucket of 0 is allowed (ge=0)
    with pytest.raises(PlanError, match="reduce_bucket_size: 0 is below 1"):
        read(tmp_path, "zero.json", '{"zero_optimization": {"reduce_bucket_size": 0}}')
    plan = read(tmp_path, "nopf.json", '{"zero_optimization": {"stage3_prefetch_bucket_size": 0}}')
    assert plan.values["prefetch_bucket"] == 0


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


def test_nvme_parameters_alone_get_one_note_not_two_that_disagree(tmp_path):
    plan = read(
        tmp_path,
        "z.json",
        '{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"}}}',
    )
    assert plan.values["offload"] == "none"
    (note,) = plan.unmodelled  # was also "NVMe offload: planned as CPU offload"
    assert "planned as no offload" in note


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


# axolotl's deepspeed_configs/zero3_bf16_cpuoffload_params.json, as bigstral-ds-zero3.yaml
# names it: parameters offloaded, the optimizer not
PARAMS_ONLY = """{
  "zero_optimization": {
    "stage": 3,
    "offload_param": {"device": "cpu", "pin_memory": true},
    "overlap_comm": true
  },
  "bf16": {"enabled": true}
}
"""


def test_parameter_offload_alone_is_planned_as_no_offload(tmp_path):
    # the plan's params moves the optimizer too; DeepSpeed keeps master, states and gradient
    # partitions on the GPU without offload_optimizer (stage3.py:328, :1107-1120)
    plan = read(tmp_path, "z3.json", PARAMS_ONLY)
    name = tmp_path / "z3.json"
    assert (plan.values["zero"], plan.values["offload"]) == (3, "none")
    assert plan.origins["offload"] == f"{name}:4 zero_optimization.offload_param.device"
    assert plan.unmodelled == (
        f"{name}:4 zero_optimization.offload_param.device (parameters offloaded without the "
        "optimizer: planned as no offload, their 16-bit partition counted on the GPU (over by "
        "2 bytes a parameter / GPUs), where the master, optimizer states and gradients stay)",
    )
    accelerate = read(
        tmp_path,
        "acc.yaml",
        "distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: 3\n"
        "  offload_optimizer_device: none\n  offload_param_device: cpu\n",
    )
    assert accelerate.values["offload"] == "none"
    assert accelerate.unmodelled[0].startswith(
        f"{tmp_path / 'acc.yaml'}:5 deepspeed_config.offload_param_device (parameters offloaded"
    )


@pytest.mark.parametrize("stage", [1, 2])
def test_parameter_offload_below_stage_3_is_ignored_as_deepspeed_does(tmp_path, stage):
    # only stage 3's optimizer reads zero_config.offload_param (engine.py
    # _configure_zero_optimizer): a stage-2 file with both blocks is a valid DeepSpeed config
    text = (
        f'{{\n "zero_optimization": {{\n  "stage": {stage},\n'
        '  "offload_optimizer": {"device": "cpu"},\n  "offload_param": {"device": "cpu"}\n }\n}'
    )
    plan = read(tmp_path, "z.json", text)
    assert plan.values["offload"] == "optimizer"
    assert plan.unmodelled == (
        f"{tmp_path / 'z.json'}:5 zero_optimization.offload_param.device (read by ZeRO-3 only: "
        f"DeepSpeed ignores it at stage {stage})",
    )
    accelerate = read(
        tmp_path,
        "acc.yaml",
        f"distributed_type: DEEPSPEED\ndeepspeed_config:\n  zero_stage: {stage}\n"
        "  offload_optimizer_device: cpu\n  offload_param_device: cpu\n",
    )
    assert accelerate.values["offload"] == "optimizer"


@pytest.mark.parametrize(
    ("keys", "offload", "origin"),
    [
        ('"cpu_offload": true', "optimizer", "3 zero_optimization.cpu_offload"),
        ('"cpu_offload": true, "cpu_offload_param": true', "params", "3 zero_optimization."),
        ('"cpu_offload": false', "none", "DeepSpeed edaa722 default"),
    ],
)
def test_deprecated_cpu_offload_switches(tmp_path, keys, offload, origin):
    # zero/config.py:181-188, :202-210: cpu_offload is offload_optimizer on the CPU,
    # cpu_offload_param offload_param
    text = f'{{\n "zero_optimization": {{\n  "stage": 3, {keys}\n }}\n}}'
    plan = read(tmp_path, "old.json", text)
    assert plan.values["offload"] == offload
    assert origin in plan.origins["offload"]


def test_deprecated_switch_beside_its_block_is_refused(tmp_path):
    text = (
        '{\n "zero_optimization": {\n  "stage": 2,\n  "cpu_offload": true,\n'
        '  "offload_optimizer": {"device": "cpu"}\n }\n}'
    )
    with pytest.raises(PlanError) as err:
        read(tmp_path, "both.json", text)
    assert str(err.value) == (
        f"--from: {tmp_path / 'both.json'}:4: zero_optimization.cpu_offload: deprecated for "
        "offload_optimizer, which is given too: DeepSpeed refuses both"
    )


def test_accelerate_parallelism_config_is_named(tmp_path):
    # TRL's examples/accelerate_configs/context_parallel_2gpu.yaml and alst_ulysses_4gpu.yaml
    cp = read(
        tmp_path,
        "cp.yaml",
        """
        distributed_type: FSDP
        num_processes: 2
        fsdp_config:
          fsdp_version: 2
        parallelism_config:
          parallelism_config_dp_replicate_size: 1
          parallelism_config_dp_shard_size: 1
          parallelism_config_tp_size: 1
          parallelism_config_cp_size: 2
        """,
    )
    assert cp.unmodelled == (
        f"{tmp_path / 'cp.yaml'}:9 parallelism_config.parallelism_config_cp_size (context "
        "parallelism over 2 GPUs, each holding part of the sequence; planned whole)",
    )
    sp = read(
        tmp_path,
        "sp.yaml",
        """
        distributed_type: DEEPSPEED
        deepspeed_config:
          zero_stage: 3
        num_processes: 4
        parallelism_config:
          parallelism_config_dp_shard_size: 2
          parallelism_config_sp_size: 2
          parallelism_config_sp_backend: deepspeed
        """,
    )
    assert [u.split(" ", 1)[1] for u in sp.unmodelled] == [
        "parallelism_config.parallelism_config_sp_size (ALST/Ulysses sequence parallelism over "
        "2 GPUs; planned with the whole sequence)",
        "parallelism_config.parallelism_config_dp_shard_size (sharding over 2 GPUs; planned "
        "over every GPU)",
    ]
