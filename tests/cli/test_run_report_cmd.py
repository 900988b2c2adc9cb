"""`run-report` and `calibrate` end to end: text and JSON, the calibration round trip through
the state folder, and one-line exit-2 errors for bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "probe"))
from fake_run_logs import MiB, run_record, step_record, write_log

from trainmem.cli.main import main
from trainmem.sources.calibration import (
    CalibrationFileError,
    calibration_path,
    load_calibrations,
    load_calibrations_or_warn,
)


def _cuda_log(tmp_path: Path, name: str = "run.rank0.jsonl", rank: int = 0) -> Path:
    steps = [
        step_record(1, reserved=120 * MiB, context=300 * MiB),
        step_record(2, reserved=130 * MiB, context=450 * MiB),
    ]
    return write_log(tmp_path / name, run_record(rank=rank, world=2), steps)


def _json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(list(args)) == 0
    return json.loads(capsys.readouterr().out)


def test_text_report_has_a_column_per_rank(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    paths = [str(_cuda_log(tmp_path, f"run.rank{r}.jsonl", rank=r)) for r in (0, 1)]
    assert main(["run-report", *paths]) == 0
    out = capsys.readouterr().out
    rank_row = next(line for line in out.splitlines() if line.startswith("rank"))
    assert rank_row.split() == ["rank", "0", "of", "2", "1", "of", "2"]
    assert "allocated observed" in out and "100.0 MiB" in out
    assert "plan: tiny-llama: full, bf16, seq 128 x batch 2" in out


def test_json_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    doc = _json(capsys, "run-report", str(_cuda_log(tmp_path)), "--json")
    (rank,) = doc["ranks"]
    assert rank["device_peak"]["observed_bytes"] == 130 * MiB + 450 * MiB  # step 2
    assert rank["runtime"]["CUDA context"] == 600 * MiB  # built-in: CUDA 12.8, nothing calibrated


def test_calibration_round_trip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], isolated_state: Path
):
    log = str(_cuda_log(tmp_path))
    assert main(["calibrate", log]) == 0
    out = capsys.readouterr().out
    assert out.startswith("NVIDIA H100 80GB HBM3: CUDA context 450.0 MiB (from nvml)")
    # a 2-GPU run: the 582 MiB NCCL's buffers are modelled at would leave no context at all
    assert "the context includes NCCL's buffers: the 582 MiB of NCCL buffers" in out
    assert calibration_path().parent == isolated_state
    (cal,) = load_calibrations().values()
    assert (cal.context_bytes, cal.run, cal.steps) == (450 * MiB, "run.rank0.jsonl", 2)
    assert cal.reserve_fraction == pytest.approx(130 / 100 - 1)

    calibrated = _json(capsys, "run-report", log, "--json")["ranks"][0]
    plain = _json(capsys, "run-report", log, "--json", "--no-calibration")["ranks"][0]
    assert calibrated["runtime"]["CUDA context"] == 450 * MiB
    assert plain["runtime"]["CUDA context"] == 600 * MiB
    assert calibrated["allocated"] == plain["allocated"]  # never the allocated estimate
    assert "calibrated from run.rank0.jsonl" in " ".join(calibrated["notes"])


def test_a_broken_calibration_file_is_reported_and_kept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('{"format": 1, "gpus": {"x": {"context_bytes": -1}}}')
    assert main(["calibrate", str(_cuda_log(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "context_bytes -1 is not a byte count (left as it is)" in err
    assert path.read_text() == '{"format": 1, "gpus": {"x": {"context_bytes": -1}}}'
    # A report judges it as absent, with one warning (never silently, never an error).
    assert main(["run-report", str(_cuda_log(tmp_path))]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("trainmem-tui run-report: warning: ")
    assert "context_bytes -1 is not a byte count" in err and "built-in figures" in err
    assert main(["run-report", str(_cuda_log(tmp_path)), "--no-calibration"]) == 0
    assert capsys.readouterr().err == ""


def test_calibrating_keeps_the_other_gpus_and_the_keys_it_does_not_know(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    other = {"context_bytes": 1, "reserve_fraction": 0.1, "steps": 3, "my_note": "keep"}
    path.write_text(json.dumps({"format": 1, "gpus": {"NVIDIA L4": other}, "extra": "keep me"}))
    assert main(["calibrate", str(_cuda_log(tmp_path))]) == 0
    doc = json.loads(path.read_text())
    assert doc["extra"] == "keep me" and doc["gpus"]["NVIDIA L4"] == other  # as written
    assert set(doc["gpus"]) == {"NVIDIA L4", "NVIDIA H100 80GB HBM3"}
    # a value that is not what its key means is refused, never rewritten as another
    broken = json.dumps({"format": 1, "gpus": {"NVIDIA L4": {**other, "steps": "many"}}})
    path.write_text(broken)
    capsys.readouterr()
    assert main(["calibrate", str(_cuda_log(tmp_path))]) == 2
    assert "steps 'many' is not a count of steps (left as it is)" in capsys.readouterr().err
    assert path.read_text() == broken


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (None, "no such run log: "),
        ("", "is empty"),
        ('{"format": 9, "kind": "run"}\n', "format 9, written by a newer trainmem"),
        ("garbage\n", "line 1 is not a JSON object"),
    ],
)
def test_bad_logs_are_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, says: str
):
    path = tmp_path / "run.jsonl"
    if content is not None:
        path.write_text(content)
    for command in ("run-report", "calibrate"):
        assert main([command, str(path)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"trainmem-tui {command}: error: ") and says in err
        assert err.count("\n") == 1


def test_calibrate_refuses_a_cpu_log(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = write_log(tmp_path / "cpu.jsonl", run_record(device="cpu"), [step_record(1)])
    assert main(["calibrate", str(path)]) == 2
    assert "calibration is for CUDA" in capsys.readouterr().err
    assert not calibration_path().exists()


def test_no_path_is_a_usage_error(capsys: pytest.CaptureFixture[str]):
    with pytest.raises(SystemExit) as exc:
        main(["run-report"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_plan_judges_a_calibrated_gpu_on_its_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], isolated_state: Path
):
    args = ["plan", "--model", "0.5B", "--device", "h100-80gb", "--json"]
    before = _json(capsys, *args)["fit"][0]
    assert main(["calibrate", str(_cuda_log(tmp_path))]) == 0  # 450 MiB context, 30% reserve
    capsys.readouterr()
    after = _json(capsys, *args)["fit"][0]
    built_in = _json(capsys, *args, "--no-calibration")["fit"][0]
    assert built_in == before
    assert after["required_bytes"] != before["required_bytes"]


# -- a base path, as given to TRAINMEM_RUN_LOG -------------------------------------------------
def test_the_base_path_reads_every_rank(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], isolated_state: Path
):
    for r in (0, 1):
        _cuda_log(tmp_path, f"run.rank{r}.jsonl", rank=r)
    doc = _json(capsys, "run-report", str(tmp_path / "run.jsonl"), "--json")
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    assert main(["calibrate", str(tmp_path / "run.jsonl")]) == 0
    assert capsys.readouterr().out.count("NVIDIA H100 80GB HBM3: CUDA context") == 2


# -- closed pipes ------------------------------------------------------------------------------
def test_a_closed_pipe_ends_quietly(tmp_path: Path):
    steps = [step_record(i) for i in range(1, 2001)]  # JSON far larger than a pipe's buffer
    log = write_log(tmp_path / "run.rank0.jsonl", run_record(), steps)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainmem", "run-report", str(log), "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(10)  # `| head -c 10`: read a little, then close the pipe
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait() == 141 and err == ""  # 128 + SIGPIPE, and no traceback


# -- hostile and broken values -----------------------------------------------------------------
def test_nan_and_infinity_in_a_record_give_strict_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = _cuda_log(tmp_path)
    text = path.read_text().replace('"duration_s": 0.5', '"duration_s": NaN', 1)
    text = text.replace('"world_size": 2', '"world_size": Infinity', 1)
    path.write_text(text.replace('"free_bytes": 64424509440', '"free_bytes": ' + "9" * 400, 1))
    doc = _json(capsys, "run-report", str(path), "--json")
    (rank,) = doc["ranks"]
    assert rank["world_size"] == 1 and rank["per_step"][0]["free_bytes"] is None


def _hostile_log(tmp_path: Path, gpu: str) -> Path:
    record = run_record(gpu=gpu)
    record["plan"]["bogus\x1b]52;c;aGk=\x07"] = 1  # an unknown key, named in a note
    steps = [step_record(1), {**step_record(2), "error": "OOM\x1b[2J\x1b]0;title\x07"}]
    return write_log(tmp_path / "evil\x1b[31m.jsonl", record, steps)


def test_escape_sequences_in_a_log_never_reach_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    log = _hostile_log(tmp_path, "NVIDIA\x1b[2J H100\x9b31m")
    assert main(["run-report", str(log)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out
    assert "NVIDIA\\x1b[2J H100\\x9b31m" in out and "OOM\\x1b[2J" in out
    assert "evil\\x1b[31m.jsonl" in out and "bogus\\x1b]52;c;aGk=\\x07" in out
    doc = _json(capsys, "run-report", str(log), "--json")  # JSON stays exact
    assert doc["ranks"][0]["device"]["name"] == "NVIDIA\x1b[2J H100\x9b31m"


def test_calibrate_refuses_a_gpu_name_with_control_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    log = _hostile_log(tmp_path, "NVIDIA\x1b]0;pwned\x07H100")
    assert main(["calibrate", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds control characters" in err
    assert "\x1b" not in err and "\\x1b]0;pwned\\x07" in err
    assert not calibration_path().exists()


@pytest.mark.parametrize(
    ("steps", "says"),
    [
        # The allocator reserved 100x its allocated peak: fragmentation, not a ratio.
        (
            [step_record(i, allocated=10 * MiB, reserved=1000 * MiB) for i in (1, 2)],
            "reserve_fraction 99.0",
        ),
        # A context of 2^60 bytes (an exabyte): more than the GPU, and than any GPU made.
        ([step_record(1), step_record(2, context=2**60)], "is more than the GPU's"),
        # A context beside the reserved peak larger than this run's 80 GiB device.
        (
            [step_record(1), step_record(2, context=79 * 2**30, reserved=2 * 2**30)],
            "is more than the GPU's",
        ),
    ],
)
def test_calibrate_refuses_an_implausible_run_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], steps: list, says: str
):
    log = write_log(tmp_path / "run.rank0.jsonl", run_record(), steps)
    assert main(["calibrate", str(log)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and says in err and "nothing stored" in err
    assert not calibration_path().exists()


def test_a_context_beyond_2_to_the_64_is_not_read_as_a_figure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    # NVML's figure of 10^30 bytes is no figure: the device's free memory stands in.
    steps = [step_record(1), step_record(2, context=10**30)]
    log = write_log(tmp_path / "run.rank0.jsonl", run_record(), steps)
    assert main(["calibrate", str(log), "--json"]) == 0
    (stored,) = json.loads(capsys.readouterr().out)
    assert stored["context_from"] == "device free memory"
    assert stored["context_bytes"] < 80 * 2**30


POISONED = {
    "NVIDIA H100 80GB HBM3": {"context_bytes": 10**30, "reserve_fraction": 0.1, "run": "a"},
    "NVIDIA A100-SXM4-80GB": {"context_bytes": 500 * MiB, "reserve_fraction": 99.0, "run": "b"},
    "NVIDIA L4": {"context_bytes": 400 * MiB, "reserve_fraction": 0.2, "run": "good.jsonl"},
}


def test_a_poisoned_calibration_file_never_stops_a_plan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    path = calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"format": 1, "gpus": POISONED})
    path.write_text(text)
    for device in ("24GB", "h100-80gb"):
        assert main(["plan", "--model", "0.5B", "--device", device, "--json"]) == 0
        captured = capsys.readouterr()
        json.loads(captured.out)
        assert captured.err.count("\n") <= 1  # at most the one warning
    assert main(["run-report", str(_cuda_log(tmp_path))]) == 0
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "warning:" in err and "(and 1 more)" in err
    assert main(["calibrate", str(_cuda_log(tmp_path))]) == 2  # never written over
    assert "left as it is" in capsys.readouterr().err
    assert path.read_text() == text


def test_loading_keeps_the_good_gpus_of_a_partly_broken_file():
    path = calibration_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"format": 1, "gpus": POISONED}))
    found, warning = load_calibrations_or_warn()
    assert list(found) == ["NVIDIA L4"] and found["NVIDIA L4"].run == "good.jsonl"
    assert warning is not None and "\n" not in warning and "(and 1 more)" in warning
    path.write_text("{not json")
    assert load_calibrations_or_warn()[0] == {}
    with pytest.raises(CalibrationFileError):
        load_calibrations()


def test_the_device_row_names_an_mps_device(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    path = write_log(tmp_path / "mps.jsonl", run_record(device="mps"), [step_record(1)])
    assert main(["run-report", str(path)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("device "))
    assert row.split(None, 1)[1] == "Apple MPS"
