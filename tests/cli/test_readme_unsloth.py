"""The README's Unsloth example is what the commands print: its train.py is written out, the
two commands run, and every line of the excerpt is found in their output."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainmem.cli.main import main

README = Path(__file__).resolve().parents[2] / "README.md"


def _example() -> tuple[str, list[list[str]], list[str]]:
    text = README.read_text(encoding="utf-8")
    part = text.split("With Unsloth, a notebook's script is the config.", 1)[1]
    blocks = re.findall(r"```(\w*)\n(.*?)```", part, flags=re.S)[:3]
    (_, script), (_, commands), (_, excerpt) = blocks
    argv = [line.split()[1:] for line in commands.splitlines() if line.strip()]
    return script, argv, [line for line in excerpt.splitlines() if line.strip()]


def test_readme_unsloth_example_is_what_plan_prints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    script, commands, excerpt = _example()
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    printed = []
    for argv in commands:
        assert main(argv) in (0, 1)
        printed += capsys.readouterr().out.splitlines()
    lines = [line.rstrip() for line in printed]
    missing = [line for line in excerpt if line not in lines]
    assert not missing, missing
