"""The probe without torch: what importing it loads, one file per rank, strict JSON lines, and
the first write failure warned once."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from trainmem.probe.writer import ENV, LogWriter, rank_path


def test_importing_the_probe_loads_no_torch_transformers_or_dashboard():
    code = (
        "import sys, trainmem.probe\n"
        "heavy = {'torch', 'transformers', 'textual', 'rich', 'psutil', 'pynvml',"
        " 'huggingface_hub'}\n"
        "print(sorted(heavy & set(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    ("path", "rank", "expected"),
    [
        ("run.jsonl", 0, "run.rank0.jsonl"),
        ("logs/run.jsonl", 3, "logs/run.rank3.jsonl"),
        ("logs/run-{rank}.log", 2, "logs/run-2.log"),
        ("logs/run", 1, "logs/run.rank1"),
        (".hidden", 1, ".hidden.rank1"),
    ],
)
def test_one_file_per_rank(path: str, rank: int, expected: str):
    assert rank_path(path, rank) == expected


def test_the_environment_then_the_default_folder(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv(ENV, "/tmp/x/{rank}.jsonl")
    assert rank_path(None, 5) == "/tmp/x/5.jsonl"
    monkeypatch.delenv(ENV)
    assert rank_path(None, 0, "out") == "out/trainmem-run.rank0.jsonl"
    assert rank_path(None, 0) == "trainmem-run.rank0.jsonl"


def test_lines_are_strict_json_and_flushed(tmp_path: Path):
    writer = LogWriter(str(tmp_path / "a" / "log.jsonl"))
    writer.write({"kind": "step", "loss": float("nan"), "x": [float("inf")]})
    # flushed: readable before close
    assert json.loads((tmp_path / "a" / "log.jsonl").read_text()) == {
        "kind": "step",
        "loss": None,
        "x": [None],
    }
    writer.close()


def test_a_write_failure_is_warned_once_then_quiet(tmp_path: Path):
    writer = LogWriter(str(tmp_path))  # a directory: open() fails
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(5):
            writer.write({"kind": "step"})
    assert len(caught) == 1 and "trainmem probe: cannot write" in str(caught[0].message)
    assert writer.failed is not None
