"""The probe without torch: what importing it loads, one file per rank, strict JSON lines, and
the first write failure warned once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
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


def _write_in_a_thread(writer: LogWriter, records: int) -> list[warnings.WarningMessage]:
    """The writer's calls, from a thread the test can give up on: a blocking open() of a FIFO
    would otherwise hang the test run instead of failing it."""
    caught: list[warnings.WarningMessage] = []

    def write() -> None:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for _ in range(records):
                writer.write({"kind": "step"})
        caught.extend(seen)

    thread = threading.Thread(target=write, daemon=True)
    thread.start()
    thread.join(60)  # a guard against a hang, not a speed check
    assert not thread.is_alive(), "the probe blocked on its log"
    return caught


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
@pytest.mark.parametrize("reader", [False, True])
@pytest.mark.parametrize("swapped", [False, True])
def test_a_fifo_is_refused_with_one_warning_and_never_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reader: bool, swapped: bool
):
    fifo = tmp_path / "run.rank0.jsonl"
    os.mkfifo(fifo)
    # With a reader, open() for writing would succeed: the type check must refuse it anyway.
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK) if reader else None
    if swapped:  # the FIFO appears between the check and open(): the open must not block
        real_stat = os.stat

        def stat(path: object, *args: object, **kwargs: object) -> os.stat_result:
            if str(path) == str(fifo):
                raise FileNotFoundError(path)
            return real_stat(path, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "stat", stat)
    try:
        writer = LogWriter(str(fifo))
        caught = _write_in_a_thread(writer, 3)
        assert len(caught) == 1
        message = str(caught[0].message)
        if swapped and not reader:  # O_NONBLOCK: a FIFO without a reader fails at once
            assert "cannot write" in message and "no such device or address" in message.lower()
        else:
            assert "is a FIFO (named pipe), not a regular file" in message
        if fd is not None:
            assert os.read(fd, 1) == b""  # nothing was written into the pipe
    finally:
        if fd is not None:
            os.close(fd)


def test_a_device_is_refused_with_one_warning(tmp_path: Path):
    link = tmp_path / "log.jsonl"
    link.symlink_to(os.devnull)  # through a symlink: the file's type is what counts
    caught = _write_in_a_thread(LogWriter(str(link)), 2)
    assert len(caught) == 1 and "is a character device, not a regular file" in str(
        caught[0].message
    )


def test_a_regular_file_is_appended(tmp_path: Path):
    path = tmp_path / "run.jsonl"
    path.write_text('{"kind":"run"}\n')
    writer = LogWriter(str(path))
    writer.write({"kind": "step"})
    writer.close()
    assert path.read_text().splitlines() == ['{"kind":"run"}', '{"kind":"step"}']
