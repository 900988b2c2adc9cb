"""`trainmem-tui devices`: table, --json, --watch with --count/--log, errors, signals."""

from __future__ import annotations

import argparse
import csv
import functools
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import trainmem
from trainmem.cli import devices_cmd
from trainmem.cli.parser import Parser
from trainmem.devices import NvmlReader, Sampler, SystemReader
from trainmem.devices.fakes import FakeNvml, FakeProc, FakePsutil, eight_gpu_machine

# Runs the command the way main.py wires it, without needing the other subcommands.
SCRIPT = """
import sys
from trainmem.cli.parser import Parser
from trainmem.cli import devices_cmd
parser = Parser(prog="trainmem-tui")
devices_cmd.add_parser(parser.add_subparsers(dest="command", parser_class=Parser))
args = parser.parse_args(sys.argv[1:])
raise SystemExit(args.run(args))
"""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = Parser(prog="trainmem-tui")
    devices_cmd.add_parser(parser.add_subparsers(dest="command", parser_class=Parser))
    return parser.parse_args(argv)


@pytest.fixture
def eight_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    nvml = NvmlReader(module=eight_gpu_machine(), register_atexit=False)
    ps = FakePsutil(processes={1000: FakeProc(cmdline=("torchrun", "train.py"))})
    fake = functools.partial(Sampler, nvml=nvml, system=SystemReader(ps), apple=False)
    monkeypatch.setattr(devices_cmd, "Sampler", fake)


def run(argv: list[str]) -> int:
    args = parse(argv)
    return int(args.run(args))


def test_json(eight_gpus: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["devices", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["id"] for d in data["devices"]][-1] == "system"
    assert data["nvml"]["available"] is True


def test_table(eight_gpus: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["devices"]) == 0
    out = capsys.readouterr().out
    assert "NVIDIA H100 80GB HBM3" in out and "System RAM" in out
    assert "torchrun train.py" in out and "MIG: 2 instance(s)" in out
    assert "driver 550.54.15" in out


def test_table_without_nvml(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    nvml = NvmlReader(module=FakeNvml(init_error=12), register_atexit=False)
    fake = functools.partial(Sampler, nvml=nvml, system=SystemReader(FakePsutil()), apple=False)
    monkeypatch.setattr(devices_cmd, "Sampler", fake)
    assert run(["devices"]) == 0
    out = capsys.readouterr().out
    assert "System RAM" in out and "NVML not available: NVML library not found" in out


def test_watch_count_jsonl(
    eight_gpus: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run.jsonl"
    log.write_text('{"earlier": true}\n')  # appended to, never truncated
    assert run(["devices", "--watch", "--interval", "0.01", "--count", "3", "--log", str(log)]) == 0
    lines = log.read_text().splitlines()
    assert len(lines) == 4 and json.loads(lines[0]) == {"earlier": True}
    samples = [json.loads(line) for line in lines[1:]]
    assert [s["seq"] for s in samples] == [1, 2, 3]
    assert all(len(s["devices"]) == 9 for s in samples)
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["time", "device", "used"]
    assert len(out) == 1 + 3 * 9


def test_watch_json_stdout(eight_gpus: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["devices", "--watch", "--json", "--interval", "0.01", "--count", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [1, 2]


def test_watch_csv(eight_gpus: None, tmp_path: Path) -> None:
    log = tmp_path / "run.CSV"
    for _ in range(2):  # the header is written once
        assert (
            run(["devices", "--watch", "--interval", "0.01", "--count", "2", "--log", str(log)])
            == 0
        )
    rows = list(csv.DictReader(log.open()))
    assert len(rows) == 2 * 2 * 9
    assert rows[0]["id"] == "gpu0" and rows[0]["kind"] == "gpu" and int(rows[0]["total_bytes"]) > 0
    assert rows[8]["id"] == "system"


def test_log_without_watch_writes_one_sample(eight_gpus: None, tmp_path: Path) -> None:
    log = tmp_path / "one.jsonl"
    assert run(["devices", "--json", "--log", str(log)]) == 0
    assert len(log.read_text().splitlines()) == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--interval", "0"], "--interval: must be a number of seconds > 0"),
        (["--interval", "-1"], "> 0"),
        (["--interval", "soon"], "> 0"),
        (["--interval", "nan"], "> 0"),
        (["--watch", "--count", "0"], "--count: must be a whole number >= 1"),
        (["--bogus"], "unrecognized arguments"),
    ],
)
def test_bad_flags_exit_2_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        run(["devices", *argv])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--count", "2"], "--interval and --count need --watch"),
        (["--interval", "2"], "--interval and --count need --watch"),
        (["--log", "/nonexistent-dir/x.jsonl"], "cannot open log"),
    ],
)
def test_usage_errors_exit_2(
    eight_gpus: None, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["devices", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("trainmem-tui devices: error: ") and message in err
    assert err.count("\n") == 1


def _env() -> dict[str, str]:
    src = str(Path(trainmem.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_watch_stops_cleanly_on_signal(tmp_path: Path, sig: signal.Signals) -> None:
    log = tmp_path / "run.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            SCRIPT,
            "devices",
            "--watch",
            "--interval",
            "0.05",
            "--log",
            str(log),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if log.exists() and len(log.read_text().splitlines()) >= 2:
                break
            time.sleep(0.05)
        else:
            pytest.fail("no samples logged")
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=10)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    text = log.read_text()
    assert text.endswith("\n")  # the last sample is complete
    seqs = [json.loads(line)["seq"] for line in text.splitlines()]
    assert seqs == list(range(1, len(seqs) + 1))
    assert "system" in out


@pytest.mark.skipif(
    importlib.util.find_spec("trainmem.cli.plan_cmd") is None, reason="plan_cmd not written yet"
)
def test_python_dash_m_devices_json() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "trainmem", "devices", "--json"],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert any(d["kind"] == "system" for d in data["devices"])
    assert set(data["nvml"]) >= {"available", "reason", "driver_version"}
