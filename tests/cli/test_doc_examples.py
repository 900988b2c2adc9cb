"""Every output the README and docs/ show is what the commands print today.

A page marks what is checked, in Markdown that renders as before:
- a code block after ``<!-- file: NAME -->`` is written to NAME in the folder the page's
  examples run in (a later block of the same name replaces it);
- an output block whose first lines are ``$ trainmem-tui ...`` (``\\`` continues a line) runs
  those commands; one after ``<!-- checked -->`` runs the ``trainmem-tui`` lines of the
  nearest ``sh`` block above it.

The block's other lines must be the commands' output: a line ``...`` stands for lines left out
and ``...`` inside a line for part of it; every other run of lines is found together, in
order, so an excerpt cannot quietly drop a line or reorder them."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from trainmem.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
FILE = re.compile(r"<!-- file: ([\w.-]+) -->\s*$")
GAP = "..."


@dataclass
class Example:
    page: str
    line: int
    commands: list[list[str]]
    expected: list[str]
    files: dict[str, str] = field(default_factory=dict)


def _commands(lines: list[str]) -> tuple[list[list[str]], list[str]]:
    """The ``$``-led commands at the top of a block (continued by a trailing backslash) and
    the lines after them."""
    commands: list[list[str]] = []
    rest = list(lines)
    while rest and rest[0].startswith("$ "):
        text = rest.pop(0)[2:]
        while text.endswith("\\") and rest:
            text = text[:-1] + " " + rest.pop(0).strip()
        commands.append(shlex.split(text, comments=True)[1:])
    return commands, rest


def _examples(page: Path) -> list[Example]:
    text = page.read_text(encoding="utf-8")
    files: dict[str, str] = {}
    shell: list[list[str]] = []
    found: list[Example] = []
    for block in BLOCK.finditer(text):
        lang, body = block.group(1), block.group(2)
        before = text[: block.start()].rstrip().splitlines()
        marker = before[-1] if before else ""
        line = text.count("\n", 0, block.start()) + 1
        named = FILE.search(marker)
        if named:
            files[named.group(1)] = body
        elif lang in ("sh", "bash"):
            shell = [
                shlex.split(cmd, comments=True)[1:]
                for cmd in body.replace("\\\n", " ").splitlines()
                if cmd.startswith("trainmem-tui ")
            ]
        elif not lang:
            commands, rest = _commands(body.splitlines())
            if not commands and marker.strip() == "<!-- checked -->":
                commands = shell
                assert commands, f"{page.name}:{line}: <!-- checked --> with no sh block above"
            if commands:
                found.append(Example(page.name, line, commands, rest, dict(files)))
    return found


EXAMPLES = [example for page in PAGES for example in _examples(page)]


def _matches(pattern: str, line: str) -> bool:
    if GAP not in pattern:
        return pattern == line
    return re.fullmatch(".*".join(map(re.escape, pattern.split(GAP))), line) is not None


def _missing(expected: list[str], printed: list[str]) -> str | None:
    """The first run of expected lines not found together in ``printed`` after the run
    before it, or None."""
    runs: list[list[str]] = [[]]
    for line in expected:
        if line.strip() == GAP:
            runs.append([])
        elif line.strip():
            runs[-1].append(line.rstrip())
    at = 0
    for run in filter(None, runs):
        starts = range(at, len(printed) - len(run) + 1)
        hit = next(
            (i for i in starts if all(_matches(p, printed[i + k]) for k, p in enumerate(run))),
            None,
        )
        if hit is None:
            return "\n".join(run)
        at = hit + len(run)
    return None


def test_the_pages_have_checked_examples() -> None:
    # the marks are found: a changed convention must not check nothing
    assert {e.page for e in EXAMPLES} >= {"README.md", "configs.md", "planning.md"}


@pytest.mark.parametrize("example", EXAMPLES, ids=[f"{e.page}:{e.line}" for e in EXAMPLES])
def test_a_documented_output_is_what_the_commands_print(
    example: Example,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name, body in example.files.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "200")
    printed: list[str] = []
    for argv in example.commands:
        code = main(argv)
        out = capsys.readouterr()
        assert code in (0, 1), (argv, out.err)  # 1: the plan does not fit; 2 is an error
        # the notes and warnings on stderr follow what stdout printed
        text = out.out.splitlines() + out.err.splitlines()
        printed += [line.rstrip() for line in text if line.strip()]
    missing = _missing(example.expected, printed)
    assert missing is None, f"not printed as shown:\n{missing}\n--- printed:\n" + "\n".join(printed)


def test_an_excerpt_must_say_where_it_leaves_lines_out() -> None:
    printed = ["a", "b", "c", "d"]
    assert _missing(["a", "b"], printed) is None
    assert _missing(["a", "c"], printed) == "a\nc"  # b left out without a "..."
    assert _missing(["a", "...", "c"], printed) is None
    assert _missing(["c", "...", "a"], printed) == "a"  # out of order
    assert _missing(["x ... z"], ["x y z"]) is None and _missing(["x ... z"], ["x y"]) is not None


CHOICES = re.compile(r"(--[a-z0-9-]+) ([\w.-]+(?:\\?\|[\w.-]+)+)")


def test_every_list_of_a_flags_choices_is_the_parsers() -> None:
    # "--stack a|b|c" in a page names every choice the flag takes (its default may be left
    # out), and none it does not: a new stack or optimizer must reach the docs
    import argparse

    from trainmem.cli.plan_args import add_plan_arguments

    parser = argparse.ArgumentParser()
    add_plan_arguments(parser)
    flags = {
        option: ({str(c) for c in action.choices}, str(action.default))
        for action in parser._actions
        if action.choices
        for option in action.option_strings
    }
    listed = [
        (page.name, flag, set(values.replace("\\|", "|").split("|")))
        for page in PAGES
        for flag, values in CHOICES.findall(page.read_text(encoding="utf-8"))
    ]
    assert any(flag == "--stack" for _, flag, _ in listed)
    for page, flag, values in listed:
        choices, default = flags[flag]
        assert values <= choices and choices - values <= {default}, (page, flag, values)
