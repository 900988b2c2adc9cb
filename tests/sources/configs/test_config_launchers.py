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
    assert plan.values == {"zero": 2, "offload": "optimizer"}  # "auto" batch: the Trainer's
    assert plan.origins["zero"] == f"{name}:5 zero_optimization.stage"
    assert plan.unmodelled == (
        f"{name}:8 zero_optimization.reduce_bucket_size (auto = hidden_size² (transformers "
        "integrations/deepspeed.py:232))",
        f"{name}:9 zero_optimization.allgather_bucket_size",
        f"{name}:7 zero_optimization.overlap_comm",
    )


def test_deepspeed_defaults_and_literal_batch(tmp_path):
    plan = read(
        tmp_path, "d.json", '{"train_micro_batch_size_per_gpu": 4, "zero_optimization": {}}'
    )
    assert plan.values == {"zero": 0, "offload": "none", "batch": 4}
    assert plan.origins["zero"] == "DeepSpeed edaa722 default (deepspeed/runtime/zero/config.py:95)"


def test_zero3_parameter_offload_and_stage_1_bucket_note(tmp_path):
    plan = read(
        tmp_path,
        "z.json",
        '{"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme"},'
        ' "offload_optimizer": {"device": "cpu"}}}',
    )
    assert plan.values["offload"] == "params"
    assert plan.unmodelled[0].endswith("(NVMe offload: planned as CPU offload)")
    plan = read(tmp_path, "z1.json", '{"zero_optimization": {"stage": 1}}')
    assert "reduce_bucket_size 5e8" in plan.notes[0]


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
        "gpus": 16,
        "precision": "bf16-mixed",
        "zero": 2,
        "offload": "optimizer",
    }
    assert plan.origins["zero"] == (
        "accelerate 1.15.0 default (accelerate/utils/dataclasses.py:1238)"
    )
    assert plan.unmodelled == (
        f"{tmp_path / 'acc.yaml'}:7 num_machines (several nodes: planned per GPU)",
    )


def test_accelerate_fsdp_is_named_and_its_deepspeed_file_is_relative(tmp_path):
    plan = read(
        tmp_path,
        "fsdp.yaml",
        "distributed_type: FSDP\nnum_processes: 8\nfsdp_config:\n  fsdp_offload_params: true\n",
    )
    assert plan.values == {"gpus": 8}
    assert [u.split(" ", 1)[1] for u in plan.unmodelled] == [
        "distributed_type (FSDP sharding is not modelled (issue 10))",
        "fsdp_config.fsdp_offload_params",
    ]
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
