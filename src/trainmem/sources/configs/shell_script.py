"""A shell script that launches training (LLaMA-Factory's examples/*/train.sh, a cluster's
run.sh): its training command lines read as --from-args reads one, never executed.

Only what a reader can do without running anything: lines joined at a trailing backslash,
comments dropped (shlex, as the shell treats ``#`` at a word's start), the script's own plain
assignments (``NAME=value``, ``export NAME=value``) substituted into ``$NAME`` and
``${NAME}``; anything else in ``$`` (``$(...)``, ``$1``, a variable the script does not set)
is left as written and named in a note. A command is a training command when it runs
accelerate launch, torchrun, deepspeed, ``python -m torch.distributed.run``,
``llamafactory-cli train``, ``axolotl train`` or ``trl sft``; a script must hold exactly one.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from trainmem.core.errors import PlanError
from trainmem.sources import files
from trainmem.sources.configs.common import FIELD, ConfigPlan

MAX_SCRIPT = 256 * 2**10  # a launch script is a few lines
MAX_LINES = 5_000
SUFFIXES = (".sh", ".bash")
_ASSIGN = re.compile(r"(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(\S*)\s*")
_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))")
_OPERATORS = frozenset({"&&", "||", ";", "|", "&"})
_TRAINING = (
    ("accelerate", "launch"),
    ("torchrun",),
    ("deepspeed",),
    ("python", "-m", "torch.distributed.run"),
    ("python3", "-m", "torch.distributed.run"),
    ("llamafactory-cli", "train"),
    ("lmf", "train"),
    ("axolotl", "train"),
    ("trl", "sft"),
)
ReadCommand = Callable[[str, "Path | None", str], ConfigPlan]


def is_script(path: Path) -> bool:
    return path.suffix in SUFFIXES


def read_file(path: Path, read_command: ReadCommand) -> ConfigPlan:
    name = files.show(path)
    try:
        text = files.read_text(path, limit=MAX_SCRIPT, what="shell script")
    except files.FileReadError as exc:
        raise PlanError(FIELD, str(exc)) from None
    found, notes = training_commands(text, name)
    if not found:
        raise PlanError(
            FIELD,
            f"{name}: no training command (accelerate launch, torchrun, deepspeed, "
            "llamafactory-cli train, axolotl train or trl sft) in the script",
        )
    if len(found) > 1:
        lines = ", ".join(str(line) for line, _ in found[:10])
        raise PlanError(
            FIELD,
            f"{name}: {len(found)} training commands (lines {lines}); give the one to plan "
            "with --from-args",
        )
    line, command = found[0]
    plan = read_command(command, None, f"{name}:{line}")
    return replace(plan, notes=(*notes, *plan.notes))


def training_commands(text: str, name: str) -> tuple[list[tuple[int, str]], list[str]]:
    """(line, command) of each training command, and the notes on what was left as written."""
    variables: dict[str, str] = {}
    found: list[tuple[int, str]] = []
    notes: list[str] = []
    for line, logical in _logical_lines(text, name):
        assigned = _ASSIGN.fullmatch(logical.strip())
        if assigned and "$(" not in logical and "`" not in logical:
            value = _expand(assigned.group(2), variables, [], f"{name}:{line}")
            try:
                words = shlex.split(value)
            except ValueError:
                words = [value]
            variables[assigned.group(1)] = words[0] if len(words) == 1 else value
            continue
        unset: list[str] = []
        expanded = _expand(logical, variables, unset, f"{name}:{line}")
        try:
            tokens = shlex.split(expanded, comments=True)
        except ValueError as exc:
            raise PlanError(FIELD, f"{name}:{line}: cannot split the line: {exc}") from None
        for command in _commands(tokens):
            if _is_training(command):
                found.append((line, shlex.join(command)))
                notes.extend(
                    f"{name}:{line}: ${var} is not set in the script; left as written"
                    for var in dict.fromkeys(unset)
                )
    return found, notes


def _logical_lines(text: str, name: str) -> list[tuple[int, str]]:
    """Lines joined at a trailing backslash, each with the number of its first line."""
    out: list[tuple[int, str]] = []
    pending: list[str] = []
    start = 0
    lines = text.splitlines()
    if len(lines) > MAX_LINES:
        raise PlanError(FIELD, f"{name}: over {MAX_LINES:,} lines; a launch script is a few")
    for number, raw in enumerate(lines, 1):
        if not pending:
            start = number
        if raw.endswith("\\") and not raw.lstrip().startswith("#"):
            pending.append(raw[:-1])
            continue
        pending.append(raw)
        out.append((start, " ".join(pending)))
        pending = []
    if pending:
        out.append((start, " ".join(pending)))
    return out


def _expand(text: str, variables: dict[str, str], unset: list[str], where: str) -> str:
    """``text`` with the script's variables substituted; a line that would grow past
    MAX_SCRIPT is refused as it grows (``A=$B$B`` twenty times over is a megabyte, forty a
    terabyte)."""
    grown = len(text)

    def sub(match: re.Match[str]) -> str:
        nonlocal grown
        var = match.group(1) or match.group(2)
        if var not in variables:
            unset.append(var)
            return match.group(0)
        value = shlex.quote(variables[var]) if variables[var] else "''"
        grown += len(value)
        if grown > MAX_SCRIPT:
            raise PlanError(
                FIELD, f"{where}: its variables expand to over {MAX_SCRIPT // 2**10} KiB"
            )
        return value

    return _VAR.sub(sub, text)


def _commands(tokens: list[str]) -> list[list[str]]:
    """The simple commands of a line, split at && || ; | & (also a word's trailing ;)."""
    out: list[list[str]] = [[]]
    for token in tokens:
        if token in _OPERATORS:
            out.append([])
        elif token.endswith(";") and len(token) > 1:
            out[-1].append(token[:-1])
            out.append([])
        else:
            out[-1].append(token)
    return [c for c in out if c]


def _is_training(command: list[str]) -> bool:
    words = list(command)
    while words and _ASSIGN.fullmatch(words[0]):  # VAR=value before the command
        words.pop(0)
    return any(tuple(words[: len(head)]) == head for head in _TRAINING)


__all__ = ["MAX_SCRIPT", "is_script", "read_file", "training_commands"]
