"""`trainmem-tui devices`: table, --json, --watch with --count/--log, errors, signals."""

from __future__ import annotations

import argparse
import csv
import errno
import functools
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import trainmem
from trainmem.cli import devices_cmd
from trainmem.cli.parser import Parser
from trainmem.devices import NvmlReader, Sampler, SystemReader
from trainmem.devices.fakes import FakeGpu, FakeNvml, FakeProc, FakePsutil, eight_gpu_machine

# Runs the command the way main.py wires it, without needing the other subcommands.
SCRIPT = """
import sys
from trainmem.cli.main import main  # the command as it runs: stdout failures are main's
raise SystemExit(main(sys.argv[1:]))
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


def test_a_log_cut_mid_record_keeps_new_records_whole(eight_gpus: None, tmp_path: Path) -> None:
    log = tmp_path / "cut.jsonl"
    log.write_text('{"timestamp": 1}\n{"timestamp": 2, "dev')  # a killed writer's last line
    assert run(["devices", "--json", "--log", str(log)]) == 0
    lines = log.read_text().splitlines()
    assert lines[:2] == ['{"timestamp": 1}', '{"timestamp": 2, "dev']
    assert json.loads(lines[2])["devices"]  # the new record is a line of its own
    assert run(["devices", "--json", "--log", str(log)]) == 0  # a whole log: no blank line
    assert len(log.read_text().splitlines()) == 4


@pytest.mark.parametrize(("name", "held"), [("other.csv", "a,b\n1,2\n"), ("x.jsonl", "\xff\x00\n")])
def test_a_log_never_goes_into_a_file_that_holds_something_else(
    eight_gpus: None, tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, held: str
) -> None:
    log = tmp_path / name
    log.write_text(held, encoding="latin-1")
    assert run(["devices", "--json", "--log", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a trainmem-tui devices" in err
    assert log.read_text(encoding="latin-1") == held


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--interval", "0"], "--interval: must be a number of seconds > 0"),
        (["--interval", "-1"], "> 0"),
        (["--interval", "soon"], "> 0"),
        (["--interval", "nan"], "> 0"),
        # past a thread wait's limit (~9.2e9 s) this was a traceback, then a hang
        (["--watch", "--count", "2", "--interval", "1e10"], "<= 86,400 (a day)"),
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


# -- hostile input: full disks, FIFOs, NaN, signals at any moment -----------------------------


def _strict_loads(line: str) -> object:
    def refuse(name: str) -> object:
        raise ValueError(f"non-standard JSON constant {name}")

    return json.loads(line, parse_constant=refuse)


def _disk_fills_on_call(monkeypatch: pytest.MonkeyPatch, n: int) -> list[int]:
    """Make the log's n-th write (1-based) land half its bytes, and every later one raise
    ENOSPC, as a filling disk does. Returns the list of call sizes."""
    real = os.write
    calls: list[int] = []

    def write(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        if len(calls) < n:
            return real(fd, data)
        if len(calls) == n:
            return real(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(devices_cmd, "_write", write)
    return calls


def _one_error_line(err: str) -> str:
    assert err.count("\n") == 1 and err.endswith("\n"), err
    assert err.startswith("trainmem-tui devices: error: ")
    assert "Traceback" not in err
    return err


def test_watch_log_disk_full_jsonl(
    eight_gpus: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = tmp_path / "run.jsonl"
    calls = _disk_fills_on_call(monkeypatch, 3)  # samples 1, 2 whole; 3 cut short
    argv = ["devices", "--watch", "--json", "--interval", "0.01", "--log", str(log)]
    assert run(argv) == 1
    err = _one_error_line(capsys.readouterr().err)
    assert "No space left on device" in err and "stopped after 2 sample(s)" in err
    assert len(calls) == 4  # the short write, then the rest of the record refused
    text = log.read_text()
    assert text.endswith("\n")  # the half record was cut off again
    assert [_strict_loads(line)["seq"] for line in text.splitlines()] == [1, 2]  # type: ignore[index]


def test_watch_log_disk_full_csv(
    eight_gpus: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = tmp_path / "run.csv"
    _disk_fills_on_call(monkeypatch, 4)  # the header, samples 1 and 2, then 3 cut short
    assert run(["devices", "--watch", "--interval", "0.01", "--log", str(log)]) == 1
    _one_error_line(capsys.readouterr().err)
    text = log.read_text()
    assert text.endswith("\n")
    rows = list(csv.DictReader(text.splitlines()))
    assert len(rows) == 2 * 9 and {r["seq"] for r in rows} == {"1", "2"}
    assert all(None not in r and None not in r.values() for r in rows)  # every row whole


def test_log_disk_full_without_watch(
    eight_gpus: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    log = tmp_path / "one.jsonl"
    log.write_text('{"earlier": true}\n')
    _disk_fills_on_call(monkeypatch, 1)
    assert run(["devices", "--json", "--log", str(log)]) == 1
    assert "No space left on device" in _one_error_line(capsys.readouterr().err)
    assert log.read_text() == '{"earlier": true}\n'  # the half sample was cut off


def _script(argv: list[str], *, preamble: str = "", timeout: float = 20, **kwargs: Any) -> Any:
    kwargs.setdefault("stdout", subprocess.PIPE)
    return subprocess.run(
        [sys.executable, "-c", preamble + SCRIPT, *argv],
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
        timeout=timeout,
        check=False,
        **kwargs,
    )


@pytest.mark.skipif(not hasattr(signal, "SIGXFSZ"), reason="needs RLIMIT_FSIZE (POSIX)")
def test_watch_log_real_short_write_at_file_size_limit(tmp_path: Path) -> None:
    """The kernel's own short write: RLIMIT_FSIZE lets a record half in, then EFBIG."""
    log = tmp_path / "run.jsonl"
    limit = 6000
    preamble = (
        "import resource, signal\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))\n"
    )
    argv = ["devices", "--watch", "--interval", "0.02", "--log", str(log)]
    done = _script(argv, preamble=preamble)
    assert done.returncode == 1, done.stderr
    assert "File too large" in _one_error_line(done.stderr)
    text = log.read_text()
    assert 0 < len(text.encode()) <= limit and text.endswith("\n")
    seqs = [_strict_loads(line)["seq"] for line in text.splitlines()]  # type: ignore[index]
    assert seqs == list(range(1, len(seqs) + 1))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize(
    "argv",
    [["--json"], [], ["--watch", "--interval", "0.01", "--count", "2"], ["--watch", "--json"]],
)
def test_stdout_full_is_one_line_exit_1(argv: list[str]) -> None:
    with open("/dev/full", "w") as full:
        done = _script(["devices", *argv], stdout=full)
    assert done.returncode == 1, done.stderr
    assert "cannot write to stdout: No space left on device" in _one_error_line(done.stderr)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_log_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "log.jsonl"
    os.mkfifo(fifo)
    start = time.monotonic()
    done = _script(["devices", "--watch", "--log", str(fifo)])  # a hang fails at timeout=20
    assert done.returncode == 2 and time.monotonic() - start < 15
    assert "it is a FIFO; give a regular file" in _one_error_line(done.stderr)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_fifo_appearing_after_the_check_does_not_hang(tmp_path: Path) -> None:
    """The second guard: os.stat saw nothing (the FIFO is made in between), the non-blocking
    open fails at once for want of a reader."""
    fifo = tmp_path / "log.csv"
    os.mkfifo(fifo)
    preamble = (
        "import os\n"
        "from trainmem.cli import devices_cmd\n"
        "class _Os:\n"
        "    def __getattr__(self, name): return getattr(os, name)\n"
        "    def stat(self, path): raise FileNotFoundError(path)\n"
        "devices_cmd.os = _Os()\n"
    )
    done = _script(["devices", "--watch", "--log", str(fifo)], preamble=preamble)
    assert done.returncode == 2
    assert "cannot open log" in _one_error_line(done.stderr)


@pytest.mark.parametrize("where", ["dir", "device"])
def test_directory_or_device_log_is_refused(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path) if where == "dir" else os.devnull
    if where == "device" and not os.path.exists("/dev/null"):
        pytest.skip("needs /dev/null")
    assert run(["devices", "--watch", "--count", "1", "--log", path]) == 2
    err = _one_error_line(capsys.readouterr().err)
    assert f"it is a {'directory' if where == 'dir' else 'device'}" in err


def test_nan_becomes_null_in_json_and_empty_in_csv(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake_gpu = FakeNvml([FakeGpu(power_mw=float("nan"))])
    nvml = NvmlReader(module=fake_gpu, register_atexit=False)
    fake = functools.partial(Sampler, nvml=nvml, system=SystemReader(FakePsutil()), apple=False)
    monkeypatch.setattr(devices_cmd, "Sampler", fake)
    jsonl, table = tmp_path / "run.jsonl", tmp_path / "run.csv"
    assert run(["devices", "--json", "--log", str(jsonl)]) == 0
    printed = capsys.readouterr().out
    assert "NaN" not in printed and _strict_loads(printed)["devices"][0]["power_w"] is None  # type: ignore[index]
    assert _strict_loads(jsonl.read_text())["devices"][0]["power_w"] is None  # type: ignore[index]
    argv = ["devices", "--watch", "--json", "--interval", "0.01", "--count", "1"]
    assert run([*argv, "--log", str(table)]) == 0
    line = capsys.readouterr().out
    assert _strict_loads(line)["devices"][0]["power_w"] is None  # type: ignore[index]
    assert next(csv.DictReader(table.open()))["power_w"] == ""
    assert run(["devices", "--watch", "--interval", "0.01", "--count", "1"]) == 0
    assert "nan" not in capsys.readouterr().out.lower()


def test_dumps_is_strict() -> None:
    assert devices_cmd.dumps({"a": [float("nan"), float("-inf"), 1.5, (2, float("inf"))]}) == (
        '{"a": [null, null, 1.5, [2, null]]}'
    )


def test_watch_stops_when_interrupted_before_its_handlers(
    eight_gpus: None, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A Ctrl+C that reached main() earlier but whose KeyboardInterrupt Python swallowed."""
    from trainmem.cli import main as cli_main

    monkeypatch.setattr(cli_main, "_interrupted", True)
    start = time.monotonic()
    assert run(["devices", "--watch", "--interval", "0.01"]) == 0
    assert time.monotonic() - start < 5
    assert capsys.readouterr().err == ""


def test_watch_stops_on_sigint_while_the_sampler_is_built(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """SIGINT while psutil / NVML are imported (inside Sampler's constructor): no traceback,
    the watch ends at once with exit 0 and an empty, fsynced log."""
    nvml = NvmlReader(module=eight_gpu_machine(), register_atexit=False)

    def slow_sampler(*args: Any, **kwargs: Any) -> Sampler:
        os.kill(os.getpid(), signal.SIGINT)  # handled on the main thread: sets the stop
        return Sampler(*args, nvml=nvml, system=SystemReader(FakePsutil()), apple=False, **kwargs)

    monkeypatch.setattr(devices_cmd, "Sampler", slow_sampler)
    log = tmp_path / "run.jsonl"
    # --count bounds the watch: a SIGINT that never arrives (a suite started as a background
    # job, whose shell ignores SIGINT) fails the test at once instead of hanging the suite
    argv = ["devices", "--watch", "--interval", "0.05", "--count", "20", "--log", str(log)]
    assert run(argv) == 0
    assert log.read_text() == ""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_sigint_at_any_moment_of_start_up() -> None:
    """`python -m trainmem devices --watch`, SIGINT from the first instant to a second in:
    it always ends within 2 s, with no traceback. Exit 0 once the watch is set up, 130 while
    Python is still importing, or death by SIGINT before Python's own handler exists."""
    env = _env()
    for delay in (0.0, 0.1, 0.2, 0.3, 0.45, 0.6, 0.8, 1.0):
        proc = subprocess.Popen(
            [sys.executable, "-m", "trainmem", "devices", "--watch", "--interval", "0.2"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        try:
            time.sleep(delay)
            proc.send_signal(signal.SIGINT)
            sent = time.monotonic()
            _, err = proc.communicate(timeout=10)
            took = time.monotonic() - sent
        finally:
            proc.kill()
            proc.wait()
        # CPython's own start-up, before any of our code runs, reports itself this way: a
        # fatal init error, or a traceback with no frame of ours (runpy, site, importlib).
        if err.startswith("Fatal Python error: init_") or (
            "Traceback" in err and "trainmem" not in err
        ):
            continue
        assert "Traceback" not in err and "Exception ignored" not in err, (delay, err)
        assert proc.returncode in (0, 130, -signal.SIGINT), (delay, proc.returncode, err)
        assert took < 2, (delay, took)


@pytest.mark.parametrize("fails", [False, True])
def test_log_is_fsynced_on_stop(
    fails: bool,
    eight_gpus: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    synced: list[int] = []

    def fsync(fd: int) -> None:
        synced.append(fd)
        if fails:
            raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", fsync)
    log = tmp_path / "run.jsonl"
    argv = ["devices", "--watch", "--interval", "0.01", "--count", "2", "--log", str(log)]
    assert run(argv) == (1 if fails else 0)
    assert len(synced) == 1
    err = capsys.readouterr().err
    if fails:
        assert "Input/output error" in _one_error_line(err)
    else:
        assert err == ""
    assert len(log.read_text().splitlines()) == 2


def test_table_shows_hostile_process_and_device_names_visibly(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A process's command line and user come from the OS, a GPU's name from the driver:
    rich markup in them is shown as typed and escapes as \\xNN, never acted on."""
    from trainmem.devices.fakes import FakeProcess

    gpu = FakeGpu(name="H100 [/]", processes=[FakeProcess(pid=4242, used_bytes=2**30)])
    hostile = FakeProc(
        name="[bold]py", username="[/]\x1b[2J", cmdline=("python", "\x1b]0;pwned\x07", "[/x]")
    )
    nvml = NvmlReader(module=FakeNvml([gpu]), register_atexit=False)
    ps = FakePsutil(processes={4242: hostile})
    fake = functools.partial(Sampler, nvml=nvml, system=SystemReader(ps), apple=False)
    monkeypatch.setattr(devices_cmd, "Sampler", fake)
    monkeypatch.setenv("COLUMNS", "200")
    assert run(["devices"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out
    assert "H100 [/]" in out and "[bold]py" in out and "\\x1b]0;pwned\\x07" in out
