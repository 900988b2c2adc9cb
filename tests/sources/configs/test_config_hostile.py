"""Hostile and broken training configs, generated here: alias bombs, control characters,
infinities and integers of hundreds of digits in every framework's length and size keys,
zero machines, empty command lines. Each is one PlanError line naming file, line and key;
never a traceback, an OverflowError, a hang, or a value silently replaced by a default."""

from __future__ import annotations

import pytest
from config_helpers import read, write

from trainmem.core.errors import PlanError
from trainmem.sources.configs import read_configs
from trainmem.sources.configs.loader import MAX_EXPANDED
from trainmem.sources.configs.merge import plan_from_config

DIGITS = "1" + "0" * 400  # float() of it raises OverflowError


def error(tmp_path, name: str, text: str) -> str:
    with pytest.raises(PlanError) as err:
        read(tmp_path, name, text)
    message = str(err.value)
    assert "\n" not in message and len(message) < 300, message
    return message


def command_error(text: str) -> str:
    with pytest.raises(PlanError) as err:
        read_configs([], [text])
    message = str(err.value)
    assert "\n" not in message and len(message) < 300, message
    return message


def test_a_merge_key_bomb_is_refused_before_pyyaml_copies_it(tmp_path):
    # PyYAML's merge keys copy what they merge while constructing: 3**20 pairs here.
    lines = ["m0: &m0 {k: 1}"]
    lines += [f"m{i}: &m{i} {{<<: [*m{i - 1}, *m{i - 1}, *m{i - 1}]}}" for i in range(1, 21)]
    path = write(tmp_path, "merge.yml", "\n".join(["base_model: x/y", *lines, ""]))
    with pytest.raises(PlanError, match=f"expand to over {MAX_EXPANDED:,} values"):
        read_configs([path])


def test_an_alias_bomb_in_a_field_is_refused_not_expanded_into_the_message(tmp_path):
    lines = ["a: &a [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    pairs = zip("abcdefgh", "bcdefghi", strict=True)
    lines += [f"{c}: &{c} [{', '.join([f'*{p}'] * 9)}]" for p, c in pairs]
    text = "\n".join(["base_model: x/y", *lines, "sequence_len: *i"])
    message = error(tmp_path, "axo.yml", text)
    assert "aliases expand to over" in message


def test_a_self_referring_alias_is_one_line(tmp_path):
    assert "an alias refers to itself" in error(tmp_path, "r.yml", "base_model: x\na: &a [*a]\n")


@pytest.mark.parametrize(("char", "code"), [("\x00", "0x00"), ("\x07", "0x07"), ("\x1b", "0x1b")])
def test_control_characters_in_yaml_name_the_line(tmp_path, char, code):
    message = error(tmp_path, "c.yml", f"base_model: x/y\nsequence_len: 512\nnote: a{char}b\n")
    assert message.endswith(f"c.yml:3: not valid YAML: control character {code}")


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        ("a.yml", "base_model: x/y\nsequence_len: .inf\n", "a.yml:2: sequence_len: inf is not"),
        ("a.yml", "base_model: x/y\nmicro_batch_size: .nan\n", "micro_batch_size: nan is not"),
        ("a.yml", f"base_model: x/y\nsequence_len: {DIGITS}\n", "sequence_len: a 1329-bit integer"),
        (
            "lf.yml",
            f"stage: sft\nfinetuning_type: lora\ncutoff_len: {DIGITS}\n",
            "lf.yml:3: cutoff_len: a 1329-bit integer",
        ),
        (
            "lf.yml",
            f"stage: sft\nfinetuning_type: lora\nlora_rank: {DIGITS}\n",  # once 2.0 * rank
            "lora_rank: a 1329-bit integer",
        ),
        ("t.yml", f"max_length: {DIGITS}\n", "t.yml:1: max_length: a 1329-bit integer"),
        ("t.yml", "max_length: '1e400'\n", "max_length: '1e400' is not a finite number"),
        ("t.yml", f"use_peft: true\nlora_alpha: {DIGITS}\n", "lora_alpha: a 1329-bit integer"),
        ("a.yml", f"base_model: x/y\n{DIGITS}: 1\n", None),  # a huge key is only a key
    ],
)
def test_numbers_from_yaml_are_checked_before_conversion(tmp_path, name, text, message):
    if message is None:
        assert read(tmp_path, name, text).values["model"] == "x/y"
    else:
        assert message in error(tmp_path, name, text)


def test_an_integer_pyyaml_cannot_convert_is_one_line(tmp_path):
    text = f"base_model: x/y\nsequence_len: 1{'0' * 5000}\n"  # over Python's 4,300 digits
    assert "not valid YAML: a value that cannot be read" in error(tmp_path, "a.yml", text)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("Infinity", "reduce_bucket_size: inf is not a finite number"),
        ("-Infinity", "reduce_bucket_size: -inf is not a finite number"),
        ("NaN", "reduce_bucket_size: nan is not a finite number"),
        ("1e400", "reduce_bucket_size: inf is not a finite number"),
        (DIGITS, "reduce_bucket_size: a 1329-bit integer is out of range"),
        ("5e8", None),
    ],
)
def test_deepspeed_sizes_infinity_and_huge(tmp_path, value, message):
    text = f'{{"zero_optimization": {{"stage": 2, "reduce_bucket_size": {value}}}}}'
    if message is None:
        assert read(tmp_path, "ds.json", text).values["reduce_bucket"] == 500_000_000
    else:
        assert message in error(tmp_path, "ds.json", text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("num_machines: 0\nnum_processes: 4\n", "num_machines: 0 is not a number of machines"),
        ("num_machines: -2\n", "num_machines: -2 is not a number of machines"),
        ("num_processes: 0\n", "num_processes: 0 is not a number of processes"),
        (f"num_processes: {DIGITS}\n", "num_processes: a 1329-bit integer"),
    ],
)
def test_accelerate_machine_and_process_counts(tmp_path, text, message):
    head = "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n"
    assert message in error(tmp_path, "acc.yaml", head + text)


def test_accelerate_unset_process_count_is_accelerates_own(tmp_path):
    # -1 is config_args.py's "not set" (SLURM passes it): no GPU count, no error.
    head = "compute_environment: LOCAL_MACHINE\ndistributed_type: MULTI_GPU\n"
    plan = read(tmp_path, "acc.yaml", head + "num_processes: -1\nnum_machines: 1\n")
    assert "gpus" not in plan.values and "nodes" not in plan.values


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("", "--from-args: is empty"),
        ("   ", "--from-args: is empty"),
        ("A=1 B=2", "--from-args: is empty"),
        ("train.py --config", "--from-args: --config names no file"),
        ("axolotl train", "`axolotl train` names no config file"),
        ("trl sft --max_length " + DIGITS, "max_length: a 401-digit integer is out of range"),
        ("deepspeed --num_gpus 1e400 train.py", "num_gpus: '1e400' is not a finite number"),
    ],
)
def test_command_lines(command, message):
    assert message in command_error(command)


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("torchrun --nnodes 0 --nproc_per_node 2 train.py", "--nnodes: 0 is outside"),
        ("accelerate launch --multi_gpu --num_machines 0 t.py", "num_machines: 0 is not"),
    ],
)
def test_zero_nodes_is_not_planned_as_one(command, message):
    # `x or 1` once turned these zeros into one node.
    with pytest.raises(PlanError) as err:
        plan_from_config(read_configs([], [command]), {})
    assert message in str(err.value)


def test_llamafactory_cli_train_with_key_value_arguments():
    # LLaMA-Factory reads sys.argv[1:] as --key value without a file (hparams/parser.py).
    config = read_configs([], ["llamafactory-cli train --cutoff_len 777 --finetuning_type lora"])
    assert config.values["seq_len"] == 777 and config.values["stack"] == "llama-factory"


def test_a_document_of_that_many_values_is_not_called_an_alias_bomb(tmp_path):
    keys = "\n".join(f"k{i}: 1" for i in range(MAX_EXPANDED // 2 + 1))  # keys and values
    message = error(tmp_path, "many.yml", f"base_model: x/y\n{keys}\n")
    assert f"holds over {MAX_EXPANDED:,} values" in message and "alias" not in message


@pytest.mark.parametrize(
    ("name", "text", "key"),
    [
        ("self.yml", "base_model: x/y\ndeepspeed: ./self.yml\n", "deepspeed"),  # axolotl
        ("lf.yml", "model_name_or_path: x/y\nfinetuning_type: lora\ndeepspeed: lf.yml\n", ""),
        ("ta.json", '{"per_device_train_batch_size": 2, "deepspeed": "ta.json"}', ""),
        (
            "acc.yml",
            "distributed_type: DEEPSPEED\ndeepspeed_config:\n  deepspeed_config_file: acc.yml\n",
            "",
        ),
    ],
)
def test_a_config_that_names_itself_is_one_line_not_a_recursion(tmp_path, name, text, key):
    message = error(tmp_path, name, text)
    assert "already being read" in message and key in message


def test_two_configs_that_name_each_other_are_one_line(tmp_path):
    write(tmp_path, "b.yml", "base_model: x/y\ndeepspeed: a.yml\n")
    message = error(tmp_path, "a.yml", "base_model: x/y\ndeepspeed: b.yml\n")
    assert "a.yml is already being read" in message
    write(tmp_path, "c.yml", "per_device_train_batch_size: 2\ndeepspeed: c.yml\n")
    assert "already being read" in command_error(f"trl sft --config {tmp_path / 'c.yml'}")


@pytest.mark.parametrize("device", ["nonee", "gpu", "true", "5"])
def test_accelerate_refuses_an_offload_device_deepspeed_would_refuse(tmp_path, device):
    text = (
        "distributed_type: DEEPSPEED\nnum_processes: 8\ndeepspeed_config:\n  zero_stage: 3\n"
        f"  offload_optimizer_device: {device}\n"
    )
    assert "is not none, cpu or nvme" in error(tmp_path, "acc.yml", text)


def test_a_config_of_millions_of_values_is_refused_before_it_is_parsed(tmp_path):
    """JSON had no bound at all (a 4 MiB file of 2M values planned in 7 s); YAML's came after
    libyaml had composed every value (12 s)."""
    values = ",".join(["1"] * 500_000)
    assert "holds over 100,000 values" in error(
        tmp_path, "args.json", f'{{"per_device_train_batch_size": 2, "a": [{values}]}}'
    )
    assert "holds over 100,000 values" in error(
        tmp_path, "ax.yml", f"base_model: x/y\na: [{values}]\n"
    )


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ('{"zero_optimization": {"stage": 3, "offload_optimizer": "cpu"}}', "not a block of keys"),
        ('{"zero_optimization": "x", "train_batch_size": 8}', "not a block of keys"),
        (
            '{"zero_optimization": {"stage": 2}, "fp16": {"enabled": true}, '
            '"bf16": {"enabled": true}}',
            "both enabled",
        ),
    ],
)
def test_deepspeed_blocks_of_the_wrong_type_are_refused_not_read_as_absent(tmp_path, text, needle):
    assert needle in error(tmp_path, "ds.json", text)


@pytest.mark.parametrize(
    "option", ["--model_name_or_path", "--per_device_train_batch_size", "--deepspeed"]
)
def test_an_option_that_needs_a_value_given_bare_is_one_line(option):
    """HfArgumentParser refuses it; read as True it planned a model named 'True', or no
    DeepSpeed at all."""
    text = f"python train.py --model_name_or_path x/y --per_device_train_batch_size 2 {option}"
    assert f"{option}: is given without a value" in command_error(text)


def test_a_bad_option_is_named_by_the_flag_that_gave_it(tmp_path):
    """A command line's option is --from-args' (not '--from: --from-args: ...'); a file's key
    stays --from's, with its line, also where a command line names the file."""
    text = "trl sft --model_name_or_path x/y --per_device_train_batch_size 1.5"
    assert command_error(text) == (
        "--from-args: --per_device_train_batch_size: '1.5' is not a whole number"
    )
    (tmp_path / "ok.yaml").write_text("model_name_or_path: x/y\n")
    over = f"trl sft --config {tmp_path / 'ok.yaml'} --per_device_train_batch_size 1.5"
    assert command_error(over).startswith("--from-args: --per_device_train_batch_size: ")
    (tmp_path / "sft.yaml").write_text("model_name_or_path: x/y\nmax_length: 1.5\n")
    in_file = f"trl sft --config {tmp_path / 'sft.yaml'}"
    assert command_error(in_file).startswith("--from: ") and "sft.yaml:2: max_length" in (
        command_error(in_file)
    )


def test_an_empty_from_path_names_no_file_not_the_current_folder():
    with pytest.raises(PlanError, match="names no file"):
        read_configs([""])
