"""Reading run logs: whole, while being written, cut mid-line, missing, malformed; the plan
rebuilt from the run's description."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "probe"))
from fake_run_logs import CONFIG, run_record, step_record, write_log

from trainmem.core.plan import Plan
from trainmem.core.units import MAX_SIZE
from trainmem.probe.writer import rank_path
from trainmem.sources.run_logs import (
    RunLogError,
    RunLogTail,
    read_run_log,
    read_run_logs,
    rebuild_plan,
    run_log_paths,
)


def test_a_whole_log(tmp_path: Path):
    log = read_run_log(
        write_log(tmp_path / "r.jsonl", run_record(), [step_record(1), step_record(2)])
    )
    assert [s.step for s in log.steps] == [1, 2] and log.ended and not log.pending
    assert log.gpu_name == "NVIDIA H100 80GB HBM3" and log.cuda == "12.8" and log.exact_peaks
    assert log.steps[0].phases["backward"]["max_allocated_bytes"] == 100 * 2**20


def test_a_truncated_last_line_is_pending_not_an_error(tmp_path: Path):
    path = write_log(tmp_path / "r.jsonl", run_record(), [step_record(1)], end=False)
    with path.open("a") as f:
        f.write(json.dumps(step_record(2))[:40])  # a crash mid-write
    log = read_run_log(path)
    assert [s.step for s in log.steps] == [1] and log.pending and not log.ended and not log.problems


def test_a_missing_file_is_one_clear_line(tmp_path: Path):
    with pytest.raises(RunLogError) as exc:
        read_run_log(tmp_path / "none.jsonl")
    assert str(exc.value).startswith("no such run log: ") and "\n" not in str(exc.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is empty"),
        ('{"kind": "run", "form', "no complete line yet"),
        ("not json\n", "line 1 is not a JSON object"),
        ('{"kind": "step", "step": 1}\n', "line 1 is not a run record"),
        ("\n  \n\n", "holds only blank lines"),  # not "line 1 is not a run record"
        ('{"format": 2, "kind": "run"}\n', "format 2, written by a newer trainmem"),
        ('{"format": "1", "kind": "run"}\n', "is not a format number"),
    ],
)
def test_unusable_logs_are_one_line(tmp_path: Path, text: str, says: str):
    path = tmp_path / "r.jsonl"
    path.write_text(text)
    with pytest.raises(RunLogError, match=says):
        read_run_log(path)


def test_a_bad_line_in_the_middle_is_skipped_and_named(tmp_path: Path):
    path = tmp_path / "r.jsonl"
    lines = [
        json.dumps(run_record()),
        json.dumps(step_record(1)),
        "{oops",
        "[1]",
        json.dumps(step_record(2)),
    ]
    path.write_text("\n".join(lines) + "\n")
    log = read_run_log(path)
    assert [s.step for s in log.steps] == [1, 2]
    assert log.problems == (
        "line 3: not a JSON object, skipped",
        "line 4: not a JSON object, skipped",
    )


def test_an_overlong_line_is_skipped_and_the_log_read_on(tmp_path: Path, monkeypatch):
    # it used to raise with the lines before it split off and the offset past them, so the
    # next poll said "line 1 is not a run record" for good
    import trainmem.sources.run_logs as run_logs

    monkeypatch.setattr(run_logs, "MAX_LINE", 4096)
    monkeypatch.setattr(run_logs, "CHUNK", 1024)
    path = tmp_path / "r.jsonl"
    head = [json.dumps(run_record()), json.dumps(step_record(1))]
    path.write_text("\n".join([*head, "x" * 10_000, json.dumps(step_record(2))]) + "\n")
    tail = RunLogTail(path)
    log = tail.poll()
    assert [s.step for s in log.steps] == [1, 2]
    assert log.problems == ("line 3: over 4,096 bytes, skipped",)
    with path.open("a") as f:
        f.write(json.dumps(step_record(3)) + "\n")
    assert [s.step for s in tail.poll().steps] == [1, 2, 3]


def test_a_poll_reads_a_bounded_amount_and_a_whole_read_takes_all(tmp_path: Path, monkeypatch):
    import trainmem.sources.run_logs as run_logs

    monkeypatch.setattr(run_logs, "READ_LIMIT", 2048)
    monkeypatch.setattr(run_logs, "CHUNK", 512)
    steps = [step_record(i) for i in range(1, 41)]
    path = write_log(tmp_path / "r.jsonl", run_record(), steps, end=False)
    tail = RunLogTail(path)
    first = tail.poll()
    assert tail.more and 0 < len(first.steps) < 40  # the rest waits for the next poll
    assert [s.step for s in read_run_log(path).steps] == list(range(1, 41))


def test_blank_and_junk_lines_cost_little(tmp_path: Path, monkeypatch):
    """Blank lines are not handed out (a 60 MB log of them took 6.4 GB: a tuple a line), a
    read hands out at most MAX_LINES lines, and a line that cannot open a JSON object is
    bad without being parsed; line numbers stay the file's."""
    import trainmem.sources.run_logs as run_logs

    monkeypatch.setattr(run_logs, "MAX_LINES", 50)
    monkeypatch.setattr(run_logs, "CHUNK", 256)
    path = tmp_path / "r.jsonl"
    body = [json.dumps(run_record()), *[""] * 500, "x", " [1]", json.dumps(step_record(1))]
    path.write_text("\n".join(body + ["x"] * 120 + [json.dumps(step_record(2))]) + "\n")
    lines = run_logs._Lines(path)
    handed = lines.read()
    assert 0 < len(handed) <= 50 + 256 // 2 and all(line.strip() for _, line in handed)
    log = read_run_log(path)
    assert [s.step for s in log.steps] == [1, 2]
    assert log.problems[:2] == (
        "line 502: not a JSON object, skipped",
        "line 503: not a JSON object, skipped",
    )
    assert log.problems[-1] == "and 102 more bad lines"


def test_a_directory_is_refused(tmp_path: Path):
    with pytest.raises(RunLogError, match="is a directory"):
        read_run_log(tmp_path)


def test_tail_reads_only_what_was_appended_and_sees_a_replaced_file(tmp_path: Path):
    path = write_log(tmp_path / "r.jsonl", run_record(), [step_record(1)], end=False)
    tail = RunLogTail(path)
    assert len(tail.poll().steps) == 1
    with path.open("a") as f:
        f.write(json.dumps(step_record(2)) + "\n" + json.dumps(step_record(3))[:10])
    log = tail.poll()
    assert [s.step for s in log.steps] == [1, 2] and log.pending
    with path.open("a") as f:
        f.write(json.dumps(step_record(3))[10:] + "\n")
    assert [s.step for s in tail.poll().steps] == [1, 2, 3]
    write_log(path, run_record(method="lora"), [], end=False)  # a new run, shorter file
    log = tail.poll()
    assert log.steps == () and log.run["plan"]["method"] == "lora"


def test_a_log_written_while_it_is_read(tmp_path: Path):
    """A writer appends records in small pieces (as a slow disk would) while a reader polls:
    every poll sees only whole records, in order, and the last sees them all."""
    path = tmp_path / "r.jsonl"
    path.write_text("")
    steps = 200
    done = threading.Event()

    def writer() -> None:
        with path.open("a") as f:
            for rec in [run_record(), *(step_record(i) for i in range(1, steps + 1))]:
                line = json.dumps(rec) + "\n"
                for i in range(0, len(line), 97):
                    f.write(line[i : i + 97])
                    f.flush()
        done.set()

    tail = RunLogTail(path)
    seen: list[int] = []
    thread = threading.Thread(target=writer)
    thread.start()
    polls = 0
    while not done.is_set() or polls == 0:
        try:
            log = tail.poll()
        except RunLogError:  # the run record is not complete yet
            continue
        polls += 1
        numbers = [s.step for s in log.steps]
        assert numbers == list(range(1, len(numbers) + 1))
        assert len(numbers) >= len(seen)
        seen = numbers
    thread.join()
    log = tail.poll()
    assert [s.step for s in log.steps] == list(range(1, steps + 1)) and not log.pending


def test_the_plan_is_rebuilt_from_the_description(tmp_path: Path):
    run = run_record(method="lora", lora_rank=8, lora_targets="q,v", seq_len=256, future_key=1)
    run["observed"] = ["batch"]
    steps = [step_record(1), {**step_record(2), "batch": 4, "seq_len": 200}]
    rebuilt = rebuild_plan(read_run_log(write_log(tmp_path / "r.jsonl", run, steps)))
    plan = rebuilt.plan
    assert (plan.method, plan.lora_rank, plan.lora_targets) == ("lora", 8, "q,v")
    assert plan.batch == 4  # observed: the largest micro-batch
    assert plan.seq_len == 256  # given: the description wins
    assert plan.model == "tiny-llama" and plan.device == "80.00GiB"
    assert rebuilt.spec.hidden == CONFIG["hidden_size"] and rebuilt.spec.source == "run log"
    assert any("future_key" in n for n in rebuilt.notes)


def test_a_plan_value_the_planner_refuses_is_one_line(tmp_path: Path):
    path = write_log(tmp_path / "r.jsonl", run_record(method="dpo"), [step_record(1)])
    with pytest.raises(RunLogError, match="method") as exc:
        rebuild_plan(read_run_log(path))
    assert "\n" not in str(exc.value)


# -- a base path and its rank files -------------------------------------------------------------
@pytest.mark.parametrize("base", ["run.jsonl", "run", "run-{rank}.log", "logs.v2/run.jsonl"])
def test_a_base_path_finds_the_rank_files_the_probe_writes(tmp_path: Path, base: str):
    given = tmp_path / base
    given.parent.mkdir(exist_ok=True)
    for rank in (2, 0, 10, 1):  # the probe's own names, whatever order they appear in
        write_log(Path(rank_path(str(given), rank)), run_record(rank=rank, world=11), [])
    (given.parent / "run.rank1.jsonl.bak").write_text("not a rank's")
    (given.parent / "other.rank0.jsonl").write_text("another run's")
    paths = run_log_paths(given)
    assert paths == [Path(rank_path(str(given), r)) for r in (0, 1, 2, 10)]
    assert [log.rank for log in read_run_logs([given])] == [0, 1, 2, 10]


def test_a_file_at_the_path_is_read_itself_and_a_log_is_read_once(tmp_path: Path):
    one = write_log(tmp_path / "run.rank0.jsonl", run_record(), [])
    assert run_log_paths(one) == [one]
    assert len(read_run_logs([tmp_path / "run.jsonl", one])) == 1  # the base names it too


def test_no_log_and_no_rank_file_is_one_line_naming_both(tmp_path: Path):
    with pytest.raises(RunLogError) as exc:
        run_log_paths(tmp_path / "run.jsonl")
    says = str(exc.value)
    assert says.startswith("no such run log: ") and "run.rank0.jsonl" in says and "\n" not in says


# -- numbers checked at the reader ------------------------------------------------------------
def _raw_log(tmp_path: Path, run: str, step: str) -> Path:
    path = tmp_path / "r.jsonl"
    path.write_text(run + "\n" + step + "\n")
    return path


@pytest.mark.parametrize(
    "value", ["NaN", "Infinity", "-Infinity", "1e400", "9" * 400, "-" + "9" * 5000, "1.5", "-3"]
)
def test_a_number_that_is_no_byte_figure_is_read_as_not_known(tmp_path: Path, value: str):
    run = json.dumps(run_record()).replace('"world_size": 1', f'"world_size": {value}')
    step = (
        f'{{"kind": "step", "step": 1, "duration_s": {value}, "max_allocated_bytes": {value}, '
        f'"reserved_bytes": {value}, "phases": {{"forward": {{"max_allocated_bytes": {value}}}}}}}'
    )
    log = read_run_log(_raw_log(tmp_path, run, step))
    (s,) = log.steps
    assert s.max_allocated_bytes is None and s.reserved_bytes is None
    assert s.phases == {"forward": {}}
    assert s.duration_s is None or s.duration_s == float(value)  # a finite float is a time
    assert log.world_size == 1
    json.dumps(log.run, allow_nan=False)  # what is passed on stays strict JSON


def test_figures_are_bounded_to_2_to_the_64(tmp_path: Path):
    run = json.dumps(run_record())
    big, ok = MAX_SIZE + 1, MAX_SIZE
    step = f'{{"kind": "step", "step": 1, "max_allocated_bytes": {big}, "reserved_bytes": {ok}}}'
    (s,) = read_run_log(_raw_log(tmp_path, run, step)).steps
    assert s.max_allocated_bytes is None and s.reserved_bytes == ok


def test_a_huge_device_size_is_no_size(tmp_path: Path):
    record = run_record()
    record["device"]["total_bytes"] = 10**30
    log = read_run_log(write_log(tmp_path / "r.jsonl", record, [step_record(1)]))
    assert log.total_bytes is None
    # No OverflowError from the size: the plan keeps its default device.
    assert rebuild_plan(log).plan.device == Plan().device
