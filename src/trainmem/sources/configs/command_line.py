"""A training command line (`--from-args "..."`) as a document: the launcher's options
(accelerate launch, torchrun, deepspeed) and the program's ``--key value`` arguments.

The program decides the reader: `trl sft` is TRL's; `llamafactory-cli train FILE` and
`axolotl train FILE` read FILE with the command's keys on top; `mlx_lm.lora` and
`python -m mlx_lm lora` are mlx-lm's (its --config FILE under its options); any other
script (train.py, ``-m module``) takes HfArgumentParser-style arguments, read as
TrainingArguments (TRL's when it has a TRL key). ``--config FILE`` (TRL) is read the same way.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from trainmem.core.errors import PlanError
from trainmem.core.units import shown

NAME = "--from-args"
# Launcher options that take no value (accelerate/commands/launch.py, torchrun, deepspeed).
_SWITCHES = frozenset(
    {
        "--multi_gpu",
        "--use_deepspeed",
        "--use_fsdp",
        "--use_megatron_lm",
        "--cpu",
        "--tpu",
        "--no_python",
        "--debug",
        "--quiet",
        "-q",
        "--same_network",
        "--zero3_init_flag",
        "--standalone",
        "--no_local_rank",
    }
)
_LAUNCHERS = ("accelerate", "torchrun", "deepspeed")
# HfArgumentParser adds --no_<name> for bool fields that default to True.
_NEGATABLE = frozenset({"gradient_checkpointing", "activation_checkpointing", "bf16", "packing"})


@dataclass
class Command:
    launcher: str = ""  # accelerate, torchrun, deepspeed or ""
    launcher_args: dict[str, Any] = field(default_factory=dict)
    program: str = ""  # "trl sft", "llamafactory-cli train", "axolotl train", a script
    config_file: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)  # VAR=value before the command


# A script's first argument naming a YAML or JSON file is its config, as LLaMA-Factory's
# src/train.py reads it (hparams/parser.py:117-124 read_args; the rest key=value overrides).
CONFIG_SUFFIXES = (".yaml", ".yml", ".json")


# The training programs run without a launcher or python (each CLI's console script).
_PROGRAMS = frozenset({"trl", "llamafactory-cli", "lmf", "axolotl", "mlx_lm", "mlx_lm.lora"})


def parse(text: str, name: str = NAME) -> Command:
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise PlanError(name, f"cannot split the command line: {exc}") from None
    env: dict[str, str] = {}
    while tokens and "=" in tokens[0] and not tokens[0].startswith("-"):
        var, _, value = tokens.pop(0).partition("=")  # VAR=value before the command
        env[var] = value
    if not tokens:
        raise PlanError(
            name, 'is empty; give the training command, e.g. "trl sft --model_name_or_path ..."'
        )
    cmd = Command(env=env)
    if tokens[0] in ("python", "python3") and tokens[1:3] == ["-m", "torch.distributed.run"]:
        tokens = ["torchrun", *tokens[3:]]
    if tokens[0] in _LAUNCHERS:
        cmd.launcher = tokens.pop(0)
        if cmd.launcher == "accelerate":
            if not tokens or tokens[0] != "launch":
                raise PlanError(name, "accelerate: only `accelerate launch ...` is read")
            tokens.pop(0)
        tokens = _launcher_options(tokens, cmd.launcher_args)
    by_python = bool(tokens) and tokens[0] in ("python", "python3")
    if by_python:
        tokens.pop(0)
    if tokens and tokens[0] == "-m":
        tokens.pop(0)
        by_python = True
    if not tokens:
        raise PlanError(name, "names no program after the launcher")
    head = tokens.pop(0)
    if not (cmd.launcher or by_python or head.endswith(".py") or head in _PROGRAMS):
        # `--from-args "ls -la"` read as TrainingArguments would plan the defaults, and a
        # launch guard (--check) would pass on it
        raise PlanError(
            name,
            f"{shown(head, 80)} is no training program: give the command that trains "
            '(e.g. "trl sft ...", "accelerate launch train.py ...", "python train.py ...")',
        )
    if head in ("trl", "llamafactory-cli", "axolotl", "lmf", "mlx_lm") and tokens:
        head = f"{head} {tokens.pop(0)}"
        if (
            head.split()[0] in ("llamafactory-cli", "lmf", "axolotl")
            and tokens
            and not tokens[0].startswith("-")
        ):
            cmd.config_file = tokens.pop(0)
    elif tokens and not tokens[0].startswith("-") and tokens[0].endswith(CONFIG_SUFFIXES):
        cmd.config_file = tokens.pop(0)
    cmd.program = head
    cmd.args = _program_args(tokens)
    config = cmd.args.pop("config", None)
    if config is not None and cmd.config_file is None:
        if not isinstance(config, str) or not config.strip():  # `--config` with no file
            raise PlanError(name, "--config names no file")
        cmd.config_file = config
    if head == "axolotl train" and not cmd.config_file:  # axolotl's CLI requires one
        raise PlanError(name, "`axolotl train` names no config file")
    return cmd


def _launcher_options(tokens: list[str], out: dict[str, Any]) -> list[str]:
    """Consume the launcher's options; returns the tokens from the program on."""
    while tokens and tokens[0].startswith("-") and tokens[0] != "-m":
        option = tokens.pop(0)
        name, eq, value = option.partition("=")
        key = name.lstrip("-").replace("-", "_")
        if eq:
            out[key] = value
        elif name in _SWITCHES or not tokens or tokens[0].startswith("-"):
            out[key] = True
        else:
            out[key] = tokens.pop(0)
    return tokens


def _program_args(tokens: list[str]) -> dict[str, Any]:
    args: dict[str, Any] = {}
    while tokens:
        token = tokens.pop(0)
        if not token.startswith("-"):
            key, eq, value = token.partition("=")
            if eq:  # llamafactory-cli's key=value overrides
                args[key.replace("-", "_")] = value
            continue
        name, eq, value = token.partition("=")
        key = name.lstrip("-").replace("-", "_")
        if eq:
            args[key] = value
        elif tokens and not tokens[0].startswith("--"):
            values = [tokens.pop(0)]
            while tokens and not tokens[0].startswith("-"):  # nargs="+": target modules
                values.append(tokens.pop(0))
            args[key] = values[0] if len(values) == 1 else values
        elif key.startswith("no_") and key[3:] in _NEGATABLE:
            args[key[3:]] = False
        else:
            args[key] = True
    return args


__all__ = ["NAME", "Command", "parse"]
