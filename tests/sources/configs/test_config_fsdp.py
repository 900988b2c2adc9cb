"""FSDP in the training configs themselves: axolotl's fsdp_config and the Trainer's fsdp /
fsdp_config, mapped to the sharding fields with their frameworks' defaults."""

import pytest
from config_helpers import read

from trainmem.core.errors import PlanError

AXOLOTL = """
base_model: Qwen/Qwen2.5-7B
sequence_len: 2048
fsdp_version: 2
fsdp_config:
  offload_params: true
  cpu_ram_efficient_loading: true
  reshard_after_forward: false
  activation_checkpointing: true
"""


def test_axolotl_fsdp_config(tmp_path):
    plan = read(tmp_path, "fsdp.yml", AXOLOTL)
    v = plan.values
    assert (v["strategy"], v["fsdp_version"], v["fsdp"]) == ("fsdp", 2, "shard-grad-op")
    assert v["offload"] == "params" and v["ram_efficient_loading"] is True
    assert plan.origins["fsdp"].endswith("fsdp_config.reshard_after_forward")
    assert any("fsdp_config.activation_checkpointing" in u for u in plan.unmodelled)


def test_axolotl_fsdp_defaults(tmp_path):
    plan = read(tmp_path, "fsdp.yml", "base_model: Qwen/Qwen2.5-7B\nfsdp_config: {}\n")
    assert "strategy" not in plan.values  # an empty fsdp_config is not FSDP
    words = "base_model: Qwen/Qwen2.5-7B\nfsdp: [full_shard]\nfsdp_config: {}\n"
    plan = read(tmp_path, "fsdp.yml", words)  # beside an fsdp: list it is, with defaults
    assert (plan.values["strategy"], plan.values["fsdp_version"]) == ("fsdp", 1)
    assert not any("without fsdp_config" in u for u in plan.unmodelled)
    plan = read(
        tmp_path, "fsdp.yml", "base_model: Qwen/Qwen2.5-7B\nfsdp_config:\n  offload_params: false\n"
    )
    assert (plan.values["fsdp_version"], plan.values["fsdp"]) == (1, "full-shard")
    assert "validation.py:1124-1129" in plan.origins["fsdp_version"]  # axolotl pins FSDP1


def test_trainer_fsdp_words_and_config(tmp_path):
    plan = read(
        tmp_path,
        "args.json",
        '{"per_device_train_batch_size": 2, "fsdp": "hybrid_shard offload auto_wrap",'
        ' "fsdp_config": {"version": 1, "cpu_ram_efficient_loading": true}}',
    )
    v = plan.values
    assert (v["strategy"], v["fsdp_version"], v["fsdp"]) == ("fsdp", 1, "hybrid-shard")
    assert v["offload"] == "params" and v["ram_efficient_loading"] is True


def test_trainer_fsdp_true_defaults_to_fsdp2_full_shard(tmp_path):
    plan = read(tmp_path, "args.json", '{"per_device_train_batch_size": 2, "fsdp": true}')
    assert (plan.values["fsdp_version"], plan.values["fsdp"]) == (2, "full-shard")
    assert "training_args.py:2826" in plan.origins["fsdp_version"]


def test_an_unknown_fsdp_word_is_one_line(tmp_path):
    with pytest.raises(PlanError, match="'shard_everything' is not an FSDP option"):
        read(
            tmp_path, "args.json", '{"per_device_train_batch_size": 2, "fsdp": "shard_everything"}'
        )


def test_axolotl_qlora_under_fsdp_skips_kbit_prep(tmp_path):
    plan = read(
        tmp_path,
        "q.yml",
        "base_model: Qwen/Qwen2.5-7B\nadapter: qlora\nload_in_4bit: true\n"
        "lora_target_linear: true\nfsdp_config:\n  fsdp_version: 2\n",
    )
    assert plan.values["kbit_prep"] is False and "under FSDP" in plan.origins["kbit_prep"]


ARGS = '{"per_device_train_batch_size": 1, "fsdp": "full_shard", "fsdp_config": '


@pytest.mark.parametrize(
    ("written", "read_as"),
    [("BACKWARD_PRE", "backward-pre"), ("backward_post", "backward-post"), ("NO_PREFETCH", "none")],
)
def test_fsdp1_backward_prefetch_from_the_trainer_and_accelerate(tmp_path, written, read_as):
    args = read(
        tmp_path,
        "args.json",
        ARGS + f'{{"version": 1, "fsdp_backward_prefetch": "{written}"}}}}',
    )
    assert args.values["backward_prefetch"] == read_as
    assert args.origins["backward_prefetch"].endswith("fsdp_config.fsdp_backward_prefetch")
    launch = read(
        tmp_path,
        "accelerate.yaml",
        "distributed_type: FSDP\nfsdp_config:\n  fsdp_version: 1\n"
        f"  fsdp_backward_prefetch: {written}\n",
    )
    assert launch.values["backward_prefetch"] == read_as


def test_backward_prefetch_is_fsdp1s_and_checked(tmp_path):
    fsdp2 = read(
        tmp_path,
        "args.json",
        ARGS + '{"backward_prefetch": "BACKWARD_PRE"}}',
    )
    assert "backward_prefetch" not in fsdp2.values  # FSDP2 prefetches whatever it says
    with pytest.raises(PlanError, match="'SOMETIMES' is not BACKWARD_PRE, BACKWARD_POST"):
        read(
            tmp_path,
            "args.json",
            ARGS + '{"version": 1, "backward_prefetch": "SOMETIMES"}}',
        )
    axolotl = read(
        tmp_path,
        "fsdp.yml",
        "base_model: Qwen/Qwen2.5-7B\nfsdp_config:\n  fsdp_backward_prefetch: BACKWARD_PRE\n",
    )
    assert "backward_prefetch" not in axolotl.values
    assert any("fsdp_backward_prefetch: ignored" in n for n in axolotl.notes)
