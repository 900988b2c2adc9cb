"""Command lines and shell scripts as the frameworks run them: llamafactory-cli's own
--key value arguments and torchrun environment, LLaMA-Factory's train.sh (accelerate launch
of src/train.py with a YAML), TRL's --accelerate_config, scripts never executed."""

import importlib.util
from pathlib import Path

import pytest
from config_helpers import write

from trainmem.core.errors import PlanError
from trainmem.sources.configs import read_configs

ACCELERATE_FSDP = """
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: FSDP
downcast_bf16: 'no'
fsdp_config:
  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP
  fsdp_backward_prefetch: BACKWARD_PRE
  fsdp_forward_prefetch: false
  fsdp_cpu_ram_efficient_loading: true
  fsdp_offload_params: false
  fsdp_sharding_strategy: FULL_SHARD
  fsdp_state_dict_type: FULL_STATE_DICT
  fsdp_sync_module_states: true
  fsdp_use_orig_params: true
machine_rank: 0
main_training_function: main
mixed_precision: bf16  # or fp16
num_machines: 1  # the number of nodes
num_processes: 2  # the number of GPUs in all nodes
rdzv_backend: static
same_network: true
use_cpu: false
"""
LF_QLORA = """
### model
model_name_or_path: meta-llama/Llama-3.1-8B-Instruct
quantization_bit: 4
trust_remote_code: true

### method
stage: sft
do_train: true
finetuning_type: lora
lora_rank: 8
lora_target: all

### dataset
dataset: identity,alpaca_en_demo
template: llama3
cutoff_len: 2048

### train
per_device_train_batch_size: 1
gradient_accumulation_steps: 8
bf16: true
"""
TRAIN_SH = """
#!/bin/bash
# DO NOT use GPTQ/AWQ model in FSDP+QLoRA

CUDA_VISIBLE_DEVICES=0,1 accelerate launch \\
    --config_file examples/accelerate/fsdp_config.yaml \\
    src/train.py examples/extras/fsdp_qlora/llama3_lora_sft.yaml
"""


@pytest.fixture
def lf_root(tmp_path, monkeypatch):
    """A LLaMA-Factory checkout's layout, with the working directory at its root."""
    (tmp_path / "examples" / "accelerate").mkdir(parents=True)
    (tmp_path / "examples" / "extras" / "fsdp_qlora").mkdir(parents=True)
    write(tmp_path / "examples" / "accelerate", "fsdp_config.yaml", ACCELERATE_FSDP)
    write(tmp_path / "examples" / "extras" / "fsdp_qlora", "llama3_lora_sft.yaml", LF_QLORA)
    write(tmp_path / "examples" / "extras" / "fsdp_qlora", "train.sh", TRAIN_SH)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _expect_fsdp_qlora(plan, root):
    v = plan.values
    assert (v["stack"], v["model"], v["method"], v["quant"]) == (
        "llama-factory",
        "meta-llama/Llama-3.1-8B-Instruct",
        "qlora",
        "nf4",
    )
    assert (v["seq_len"], v["batch"], v["lora_rank"], v["lora_targets"]) == (
        2048,
        1,
        8,
        "all-linear",
    )
    assert (v["strategy"], v["fsdp_version"], v["fsdp"], v["gpus"]) == ("fsdp", 1, "full-shard", 2)
    assert v["ram_efficient_loading"] is True and v["precision"] == "bf16-mixed"
    accelerate = root / "examples" / "accelerate" / "fsdp_config.yaml"
    assert plan.origins["gpus"] == f"{accelerate}:19 num_processes"
    yaml = root / "examples" / "extras" / "fsdp_qlora" / "llama3_lora_sft.yaml"
    assert plan.origins["seq_len"] == f"{yaml}:16 cutoff_len"


def test_accelerate_launch_of_src_train_py_reads_both_files(lf_root):
    command = (
        "CUDA_VISIBLE_DEVICES=0,1 accelerate launch --config_file "
        "examples/accelerate/fsdp_config.yaml src/train.py "
        "examples/extras/fsdp_qlora/llama3_lora_sft.yaml"
    )
    _expect_fsdp_qlora(read_configs([], [command]), lf_root)


def test_the_train_sh_script_is_read_never_run(lf_root):
    plan = read_configs(["examples/extras/fsdp_qlora/train.sh"])
    _expect_fsdp_qlora(plan, lf_root)


def test_a_script_with_variables_and_continuations(tmp_path):
    # examples/train_lora/qwen3_lora_sft.sh: a variable, `set -x`, one long command
    path = write(
        tmp_path,
        "qwen_lora_sft.sh",
        """
        #!/bin/bash

        set -x

        MODEL_PATH=Qwen/Qwen2.5-7B-Instruct

        llamafactory-cli train \\
            --model_name_or_path ${MODEL_PATH} \\
            --trust_remote_code \\
            --stage sft \\
            --do_train \\
            --finetuning_type lora \\
            --lora_rank 8 \\
            --lora_target all \\
            --dataset identity,alpaca_en_demo \\
            --cutoff_len 2048 \\
            --output_dir saves/$RUN_NAME \\
            --per_device_train_batch_size 1 \\
            --bf16 \\
            --ddp_timeout 180000000  # comments end the line
        """,
    )
    plan = read_configs([path])
    v = plan.values
    assert (v["stack"], v["model"], v["method"], v["seq_len"], v["batch"]) == (
        "llama-factory",
        "Qwen/Qwen2.5-7B-Instruct",
        "lora",
        2048,
        1,
    )
    assert (v["lora_rank"], v["lora_targets"], v["precision"]) == (8, "all-linear", "bf16-mixed")
    assert plan.origins["seq_len"] == f"{path}:7 --cutoff_len"
    assert f"{path}:7: $RUN_NAME is not set in the script; left as written" in plan.notes


def test_llamafactory_cli_arguments_are_llama_factorys(tmp_path):
    # not TRL's (method full, max_length 1024, rank 16): LLaMA-Factory's hparams
    plan = read_configs(
        [],
        [
            "FORCE_TORCHRUN=1 NPROC_PER_NODE=4 llamafactory-cli train --model_name_or_path "
            "Qwen/Qwen2.5-7B --finetuning_type lora --cutoff_len 4096 --bf16"
        ],
    )
    v = plan.values
    assert (v["stack"], v["method"], v["seq_len"], v["lora_rank"]) == (
        "llama-factory",
        "lora",
        4096,
        8,
    )
    assert v["gpus"] == 4  # launcher.py:66 NPROC_PER_NODE
    assert plan.origins["gpus"] == "--from-args NPROC_PER_NODE"
    devices = read_configs(
        [], ["CUDA_VISIBLE_DEVICES=0,1,2 llamafactory-cli train --model_name_or_path x/y"]
    )
    assert devices.values["gpus"] == 3  # one process per visible device


def test_script_without_or_with_two_training_commands(tmp_path):
    none = write(tmp_path, "prep.sh", "#!/bin/sh\npython scripts/download.py\necho done\n")
    with pytest.raises(PlanError, match="no training command"):
        read_configs([none])
    two = write(
        tmp_path,
        "two.sh",
        "trl sft --model_name_or_path x/y\ncd out && trl sft --model_name_or_path x/z\n",
    )
    with pytest.raises(PlanError, match=r"2 training commands \(lines 1, 2\)"):
        read_configs([two])


def test_a_script_is_bounded(tmp_path):
    big = write(tmp_path, "big.sh", "# x\n" * 6000)
    with pytest.raises(PlanError, match="over 5,000 lines"):
        read_configs([big])
    unbalanced = write(tmp_path, "q.sh", "trl sft --model_name_or_path 'x/y\n")
    with pytest.raises(PlanError, match=r"q.sh:1: cannot split the line"):
        read_configs([unbalanced])
    # each variable twice the last: 300 bytes that expand to 2**40 characters by line 41
    doubling = "A0=x\n" + "".join(f"A{i}=$A{i - 1}$A{i - 1}\n" for i in range(1, 41))
    bomb = write(tmp_path, "bomb.sh", doubling + "trl sft --model_name_or_path $A40\n")
    with pytest.raises(PlanError, match=r"bomb.sh:\d+: its variables expand to over 256 KiB"):
        read_configs([bomb])


def test_a_script_is_never_executed(tmp_path):
    marker = tmp_path / "ran"
    path = write(
        tmp_path,
        "t.sh",
        f"touch {marker}\nX=$(touch {marker})\ntrl sft --model_name_or_path $(touch {marker})\n",
    )
    with pytest.raises(PlanError, match=r"model_name_or_path: .* is not text"):
        read_configs([path])  # the literal words of $(...), never its output
    assert not marker.exists()


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="TRL is not installed")
def test_trl_accelerate_config_by_bundled_name(tmp_path, monkeypatch):
    # trl/cli/accelerate_config.py: a file first, else trl/accelerate_configs/NAME.yaml
    monkeypatch.chdir(tmp_path)
    plan = read_configs(
        [],
        ["trl sft --model_name_or_path Qwen/Qwen2.5-0.5B --accelerate_config zero2 --bf16"],
    )
    v = plan.values
    assert (v["strategy"], v["zero"], v["gpus"], v["offload"]) == ("zero", 2, 8, "none")
    spec = importlib.util.find_spec("trl")
    bundled = Path(spec.submodule_search_locations[0]) / "accelerate_configs" / "zero2.yaml"
    assert plan.origins["zero"] == f"{bundled}:8 deepspeed_config.zero_stage"
    # ZeRO-2 under bf16: DeepSpeed casts TRL's fp32-loaded model to bf16
    assert v["precision"] == "bf16"
    # a file of that name in the working directory comes first, as TRL checks is_file()
    write(tmp_path, "zero2", "distributed_type: MULTI_GPU\nnum_processes: 3\n")
    local = read_configs([], ["trl sft --model_name_or_path x/y --accelerate_config zero2"])
    assert (local.values["gpus"], local.values.get("strategy")) == (3, None)
    with pytest.raises(PlanError, match="neither a file nor a config bundled with TRL"):
        read_configs([], ["trl sft --model_name_or_path x/y --accelerate_config zero9"])
    with pytest.raises(PlanError, match="no such file"):
        read_configs([], ["trl sft --model_name_or_path x/y --accelerate_config ../x.yaml"])


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="TRL is not installed")
def test_trl_accelerate_config_in_the_config_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write(tmp_path, "sft.yaml", "model_name_or_path: x/y\naccelerate_config: fsdp2\n")
    plan = read_configs([], ["trl sft --config sft.yaml --num_processes 4"])
    v = plan.values
    assert (v["strategy"], v["fsdp_version"], v["gpus"]) == ("fsdp", 2, 4)
    assert plan.origins["gpus"] == "--from-args --num_processes"


def test_a_plans_file_given_as_a_config_says_where_it_opens(tmp_path):
    plans = write(tmp_path, "plans.toml", '[[plans]]\nname = "a"\nmodel = "Qwen/Qwen2.5-7B"\n')
    with pytest.raises(PlanError, match=r"plans.toml: a .toml file is a trainmem plans file"):
        read_configs([plans])


@pytest.mark.parametrize("command", ["ls -la", "./train --lr 1e-4", "echo trl sft"])
def test_a_command_that_runs_no_training_program_is_refused(command):
    # read as TrainingArguments it would plan the defaults, and `--check` would pass on it
    from trainmem.sources.configs.detect import read_command

    with pytest.raises(PlanError, match="is no training program"):
        read_command(command)


def test_a_config_naming_a_file_with_a_nul_byte_says_which_key(tmp_path):
    config = write(
        tmp_path,
        "a.yaml",
        "base_model: Qwen/Qwen2.5-0.5B\nadapter: lora\nlora_target_linear: true\n"
        'deepspeed: "a\\u0000b.json"\n',
    )
    with pytest.raises(PlanError, match=r"a.yaml:4 deepspeed: no such file: .*a\\x00b\.json"):
        read_configs([config])


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="TRL is not installed")
def test_trl_yaml_accelerate_config_is_read_by_from_as_by_trl_sft(tmp_path, monkeypatch):
    # TRL's docs (clis.md): `trl sft --config sft.yaml` with accelerate_config in the YAML;
    # --from reads the file as `trl sft --config` does (cli/commands/training.py)
    monkeypatch.chdir(tmp_path)
    path = write(
        tmp_path,
        "sft.yaml",
        "model_name_or_path: Qwen/Qwen2.5-0.5B\ndataset_name: stanfordnlp/imdb\n"
        "accelerate_config: zero2\n",
    )
    by_file = read_configs([path])
    by_command = read_configs([], ["trl sft --config sft.yaml"])
    v = by_file.values
    assert (v["strategy"], v["zero"], v["gpus"], v["precision"]) == ("zero", 2, 8, "bf16")
    assert v == by_command.values
    assert by_file.unmodelled == by_command.unmodelled
