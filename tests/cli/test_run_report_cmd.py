"""`run-report` and `calibrate` end to end: text and JSON, the calibration round trip through
the state folder, and one-line exit-2 errors for bad input."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "probe"))
from fake_run_logs import MiB, run_record, step_record, write_log

from trainmem.cli.main import main
from trainmem.sources.calibration import calibration_path, load_calibrations


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
    assert "plan: model=tiny-llama, method=full" in out


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
    assert main(["run-report", str(_cuda_log(tmp_path))]) == 2  # not silently ignored
    assert main(["run-report", str(_cuda_log(tmp_path)), "--no-calibration"]) == 0


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
