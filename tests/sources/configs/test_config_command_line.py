"""Training command lines given with --from-args."""

import pytest
from config_helpers import write

from trainmem.core.errors import PlanError
from trainmem.sources.configs import read_configs


def test_trl_sft_command():
    plan = read_configs(
        [],
        [
            "trl sft --model_name_or_path Qwen/Qwen2.5-0.5B --dataset_name trl-lib/Capybara "
            "--per_device_train_batch_size=4 --max_length 4096 --use_peft --lora_r 32 "
            "--lora_target_modules q_proj k_proj v_proj o_proj --no_gradient_checkpointing "
            "--learning_rate 2e-4"
        ],
    )
    v = plan.values
    assert (v["stack"], v["model"], v["method"]) == ("trl", "Qwen/Qwen2.5-0.5B", "lora")
    assert (v["batch"], v["seq_len"], v["lora_rank"], v["grad_ckpt"]) == (4, 4096, 32, False)
    assert v["lora_targets"] == "q,k,v,o"
    assert plan.origins["batch"] == "--from-args --per_device_train_batch_size"
    assert plan.origins["grad_ckpt"] == "--from-args --gradient_checkpointing"


def test_accelerate_launch_with_deepspeed_options():
    plan = read_configs(
        [],
        [
            "accelerate launch --num_processes 8 --mixed_precision bf16 --use_deepspeed "
            "--zero_stage 3 --offload_param_device cpu --offload_optimizer_device cpu train.py "
            "--per_device_train_batch_size 2 --bf16 --output_dir out"
        ],
    )
    v = plan.values
    assert (v["gpus"], v["zero"], v["offload"], v["batch"]) == (8, 3, "params", 2)
    assert v["stack"] == "trainer" and v["precision"] == "bf16"
    assert plan.origins["zero"] == "--from-args --deepspeed_config.zero_stage"


def test_torchrun_and_accelerate_config_file(tmp_path, monkeypatch):
    plan = read_configs([], ["torchrun --nproc_per_node=4 --nnodes 2 run_clm.py --block_size 512"])
    # gpus is per node; --nnodes is the plan's nodes
    assert (plan.values["gpus"], plan.values["nodes"], plan.values["seq_len"]) == (4, 2, 512)
    assert plan.origins["nodes"] == "--from-args --nnodes"
    assert plan.unmodelled == ()
    write(tmp_path, "acc.yaml", "distributed_type: MULTI_GPU\nnum_processes: 2\n")
    monkeypatch.chdir(tmp_path)  # paths on a command line are the shell's
    plan = read_configs([], ["accelerate launch --config_file acc.yaml train.py --optim sgd"])
    assert (plan.values["gpus"], plan.values["optimizer"]) == (2, "sgd")


def test_config_file_with_overrides(tmp_path, monkeypatch):
    write(tmp_path, "sft.yaml", "model_name_or_path: x/y\nmax_length: 512\n")
    write(tmp_path, "lf.yaml", "model_name_or_path: x/y\nfinetuning_type: lora\ncutoff_len: 256\n")
    monkeypatch.chdir(tmp_path)
    plan = read_configs([], ["trl sft --config sft.yaml --max_length 768"])
    assert plan.values["seq_len"] == 768 and plan.origins["seq_len"] == "--from-args --max_length"
    assert plan.origins["model"] == f"{tmp_path / 'sft.yaml'}:1 model_name_or_path"
    plan = read_configs([], ["llamafactory-cli train lf.yaml cutoff_len=1024"])
    assert plan.values["seq_len"] == 1024 and plan.values["stack"] == "llama-factory"


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("trl dpo --model_name_or_path x/y", "`trl dpo` is not planned"),
        ("trl sft --model_name_or_path 'x/y", "cannot split the command line"),
        ("", "is empty"),
        ("accelerate config", "only `accelerate launch ...` is read"),
        ("trl sft --per_device_train_batch_size four", "'four' is not a whole number"),
    ],
)
def test_errors(command, message):
    with pytest.raises(PlanError) as err:
        read_configs([], [command])
    assert message in str(err.value) and "\n" not in str(err.value)


def test_digit_groups_read_as_python_reads_them():
    """HfArgumentParser converts with int() and float(), which read PEP 515's ``1_000``."""
    plan = read_configs(
        [],
        [
            "trl sft --model_name_or_path Qwen/Qwen2.5-0.5B --per_device_train_batch_size 1_6 "
            "--max_length 4_096 --use_peft --lora_r 3_2 --lora_alpha 6_4.0"
        ],
    )
    v = plan.values
    assert (v["batch"], v["seq_len"], v["lora_rank"], v["lora_alpha"]) == (16, 4096, 32, 64.0)
    for text in ("1__6", "_16", "16_", "1_6.5"):  # what int() refuses stays refused
        with pytest.raises(PlanError, match="not a whole number"):
            read_configs(
                [], [f"trl sft --model_name_or_path x/y --per_device_train_batch_size {text}"]
            )
