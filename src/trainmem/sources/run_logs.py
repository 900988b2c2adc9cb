"""Reading the probe's run logs (the format: trainmem.core.run_log), whole or as they grow,
and rebuilding the run's plan from its description.

A log is read while the run appends to it: a last line without its newline is a record still
being written (or cut by a crash) and is left for the next read, never an error. A line in
the middle that is not a JSON object is skipped and named in ``problems``. What makes a log
unusable (nothing at the path, no run record first, a newer format) is a ``RunLogError``
whose ``str()`` is one line naming the file.

Numbers are checked as JSON is parsed, before any arithmetic: NaN and the infinities
(Python's json reads ``NaN``, ``Infinity`` and ``1e400``) and integers of more than 20
digits (beyond any byte count; ``int()`` of thousands of digits is slow or refused) are read
as null, which the format already means "not known"; byte figures and counts must then lie
in 0..2^64. (Local checks: core/units.py had no shared range-check helper when this was
written.)

A path is a log, or the base path the probe was given (``TRAINMEM_RUN_LOG=run.jsonl``
writes ``run.rank0.jsonl``, ``run.rank1.jsonl``, ...): :func:`run_log_paths` finds the rank
files from it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainmem.core.architecture import ModelSpec, spec_from_config
from trainmem.core.errors import PlanError
from trainmem.core.fit import low_free
from trainmem.core.plan import PLAN_FIELDS, Plan
from trainmem.core.run_log import DESCRIBED, END, FORMAT_VERSION, RUN, STEP, rank_name, rank_of
from trainmem.core.text import visible
from trainmem.core.units import MAX_SIZE
from trainmem.sources import files

CHUNK = 1 << 20
MAX_LINE = 16 << 20  # a run record holds a config.json: kilobytes; a longer line is not ours
MAX_PROBLEMS = 20  # bad lines named, then only counted
MAX_INT_DIGITS = 20  # 2^64 has 20 digits: a longer integer is no figure of a run
MAX_NAME = 200  # characters of a device name kept (NVML's are under 100)
MAX_ERROR = 500  # characters of a step's exception text kept
MAX_LISTED = 100_000  # folder entries looked at for rank files: a log folder holds a few


class RunLogError(ValueError):
    """A run log that cannot be used; ``str()`` is one line naming the file."""


def _int(value: Any) -> int | None:
    """A byte figure or a count: an integer in 0..2^64, else None (not known)."""
    ok = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SIZE
    return value if ok else None


def _parse_int(text: str) -> int | None:
    return int(text) if len(text.lstrip("-")) <= MAX_INT_DIGITS else None


def _parse_float(text: str) -> float | None:
    value = float(text)  # "1e400" is inf, never an error
    return value if math.isfinite(value) else None


def _parse_constant(_text: str) -> None:  # NaN, Infinity, -Infinity: not JSON numbers
    return None


# One decoder for every line: json.loads with hooks builds a new one each call (3.4 us a
# line, most of a short one's cost).
_DECODER = json.JSONDecoder(
    parse_int=_parse_int, parse_float=_parse_float, parse_constant=_parse_constant
)


def parse_record(line: bytes | str) -> Any:
    """One line of a log as JSON, its numbers checked (see the module's docstring);
    ValueError (or RecursionError, nested too deep) when it is no JSON."""
    if isinstance(line, bytes):  # as json.loads reads bytes: UTF-8, -16 or -32
        line = line.decode(json.detect_encoding(line), "surrogatepass")
    return _DECODER.decode(line)


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One optimizer step as the probe saw it (None: not available on that device)."""

    step: int
    duration_s: float | None
    allocated_bytes: int | None  # at the step's end
    reserved_bytes: int | None
    max_allocated_bytes: int | None  # over the step
    max_reserved_bytes: int | None
    driver_bytes: int | None  # the process as the driver sees it, at the end
    max_driver_bytes: int | None  # sampled devices only: the largest read in the step
    free_bytes: int | None
    total_bytes: int | None
    phases: dict[str, dict[str, int]]
    batch: int | None = None
    seq_len: int | None = None
    error: str | None = None

    @classmethod
    def from_json(cls, rec: dict[str, Any], number: int) -> StepRecord:
        phases = rec.get("phases")
        clean: dict[str, dict[str, int]] = {}
        if isinstance(phases, dict):
            for name, figures in phases.items():
                if isinstance(figures, dict):
                    ints = {str(k): _int(v) for k, v in figures.items()}
                    clean[str(name)] = {k: v for k, v in ints.items() if v is not None}
        duration = rec.get("duration_s")
        error = rec.get("error")
        return cls(
            step=_int(rec.get("step")) or number,
            duration_s=float(duration)
            if isinstance(duration, (int, float)) and not isinstance(duration, bool)
            else None,
            allocated_bytes=_int(rec.get("allocated_bytes")),
            reserved_bytes=_int(rec.get("reserved_bytes")),
            max_allocated_bytes=_int(rec.get("max_allocated_bytes")),
            max_reserved_bytes=_int(rec.get("max_reserved_bytes")),
            driver_bytes=_int(rec.get("driver_bytes")),
            max_driver_bytes=_int(rec.get("max_driver_bytes")),
            free_bytes=_int(rec.get("free_bytes")),
            total_bytes=_int(rec.get("total_bytes")),
            phases=clean,
            batch=_int(rec.get("batch")),
            seq_len=_int(rec.get("seq_len")),
            error=str(error)[:MAX_ERROR] if error is not None else None,
        )


@dataclass(frozen=True, slots=True)
class StepSeen:
    """What one step shows of the run's memory (trainmem.planner.run_report's module
    docstring says how each figure is read)."""

    step: int
    allocated_peak: int | None
    device_peak: int | None
    peak_phase: str | None  # the phase holding the step's allocated (else device) peak
    free_bytes: int | None
    total_bytes: int | None
    context_bytes: int | None
    error: str | None = None

    @classmethod
    def of(cls, s: StepRecord, device_type: str) -> StepSeen:
        context = None
        if device_type == "cuda":
            if s.driver_bytes is not None and s.reserved_bytes is not None:
                context = max(0, s.driver_bytes - s.reserved_bytes)
            reserved = s.max_reserved_bytes
            device = reserved + (context or 0) if reserved is not None else None
        else:
            device = s.max_driver_bytes if s.max_driver_bytes is not None else s.driver_bytes
        return cls(
            s.step,
            s.max_allocated_bytes,
            device,
            _phase_peak(s),
            s.free_bytes,
            s.total_bytes,
            context,
            s.error,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "allocated_peak_bytes": self.allocated_peak,
            "device_peak_bytes": self.device_peak,
            "peak_phase": self.peak_phase,
            "context_bytes": self.context_bytes,
            "free_bytes": self.free_bytes,
            "total_bytes": self.total_bytes,
            "error": self.error,
        }


def _phase_peak(s: StepRecord) -> str | None:
    for key in ("max_allocated_bytes", "max_reserved_bytes", "driver_bytes"):
        have = {name: f[key] for name, f in s.phases.items() if key in f}
        if have:
            return max(have, key=lambda n: have[n])
    return None


@dataclass(frozen=True, slots=True)
class Observed:
    """Every step read so far, folded as it is read: the peaks and what the warnings name.
    So a log followed through a million steps needs no list of them (a tail made with
    ``keep_steps=False`` keeps none) and a poll costs what was appended, not the whole run.
    Of equal figures the first step is kept; of the failed ones, the last."""

    steps: int = 0
    allocated_peak: StepSeen | None = None
    device_peak: StepSeen | None = None
    low_free: int = 0  # steps with under LOW_FREE_FRACTION of the device free
    lowest_free: StepSeen | None = None  # the least free of them
    failed: StepSeen | None = None  # the last step that raised
    context_known: bool = False  # some step gave the context (the driver's figure)
    largest_shape: StepRecord | None = None  # the largest batch x seq_len the model saw

    def plus(self, record: StepRecord, device_type: str) -> Observed:
        seen = StepSeen.of(record, device_type)
        alloc, device, lowest, shape = (
            self.allocated_peak,
            self.device_peak,
            self.lowest_free,
            self.largest_shape,
        )
        if seen.allocated_peak is not None and (
            alloc is None or seen.allocated_peak > (alloc.allocated_peak or 0)
        ):
            alloc = seen
        if seen.device_peak is not None and (
            device is None or seen.device_peak > (device.device_peak or 0)
        ):
            device = seen
        low = low_free(seen.free_bytes, seen.total_bytes)
        if low and (lowest is None or (seen.free_bytes or 0) < (lowest.free_bytes or 0)):
            lowest = seen
        if (
            record.batch
            and record.seq_len
            and (
                shape is None
                or record.batch * record.seq_len > (shape.batch or 0) * (shape.seq_len or 0)
            )
        ):
            shape = record
        return Observed(
            self.steps + 1,
            alloc,
            device,
            self.low_free + low,
            lowest,
            seen if seen.error else self.failed,
            self.context_known or seen.context_bytes is not None,
            shape,
        )


@dataclass(frozen=True)
class RunLog:
    """A log as read so far. ``run``: the run record as written; ``pending``: a last line
    not yet complete (being written, or cut); ``ended``: the end record was read."""

    path: Path
    run: dict[str, Any]
    steps: tuple[StepRecord, ...]  # every step read (none from a tail not keeping them)
    ended: bool = False
    pending: bool = False
    problems: tuple[str, ...] = ()
    observed: Observed = Observed()  # all the steps read, kept or not

    @property
    def step_count(self) -> int:
        return self.observed.steps

    @property
    def rank(self) -> int:
        return _int(self.run.get("rank")) or 0

    @property
    def world_size(self) -> int:
        return _int(self.run.get("world_size")) or 1

    @property
    def device(self) -> dict[str, Any]:
        device = self.run.get("device")
        return device if isinstance(device, dict) else {}

    @property
    def total_bytes(self) -> int | None:
        """The device's memory as the run record gives it (None: not given, or not a size)."""
        return _int(self.device.get("total_bytes")) or None

    @property
    def device_type(self) -> str:
        return _device_type(self.run)

    @property
    def device_name(self) -> str:
        """The device's name as the log gives it (raw, bounded), else its type."""
        name = self.device.get("name")
        return name[:MAX_NAME] if isinstance(name, str) and name.strip() else self.device_type

    @property
    def gpu_name(self) -> str | None:
        """The GPU's name as the log gives it (raw: shown through core.text.visible, and
        refused as a calibration key when it holds control characters)."""
        name = self.device.get("name")
        if self.device_type != "cuda" or not isinstance(name, str) or not name.strip():
            return None
        return name[:MAX_NAME]

    @property
    def cuda(self) -> str | None:
        cuda = self.device.get("cuda")
        return str(cuda) if cuda else None

    @property
    def exact_peaks(self) -> bool:
        return self.run.get("peaks") == "exact"


def _device_type(run: dict[str, Any]) -> str:
    device = run.get("device")
    kind = device.get("type") if isinstance(device, dict) else None
    return kind if kind in ("cuda", "mps", "cpu") else "cpu"


OVERLONG = b"\x00overlong"  # what a line over MAX_LINE reads as: no JSON line can be this
READ_LIMIT = 64 << 20  # bytes one read takes: the rest waits for the next poll
MAX_LINES = 200_000  # lines one read hands out (a step's is about 500 bytes)


class _Lines:
    """Complete lines from a growing file, from a byte offset on; the incomplete tail is
    kept for the next read. A line over MAX_LINE is dropped as it is read (it reads as
    OVERLONG, skipped and named like any bad line), and one read takes at most READ_LIMIT
    bytes, so a log that grows faster than it is read never holds a poll for long."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.tail = b""
        self.number = 0  # lines handed out
        self.restarted = False  # the last read() started again from byte 0
        self.skipping = False  # inside a line over MAX_LINE: dropped up to its newline
        self.more = False  # the last read() stopped at READ_LIMIT with more in the file

    def read(self) -> list[tuple[int, bytes]]:
        try:
            with files.open_file(self.path, what="run log") as (f, size):
                self.restarted = size < self.offset
                if self.restarted:  # truncated or replaced: read again from the start
                    self.offset, self.tail, self.number, self.skipping = 0, b"", 0, False
                f.seek(self.offset)
                out: list[tuple[int, bytes]] = []
                taken = 0
                while taken < READ_LIMIT and len(out) < MAX_LINES and (chunk := f.read(CHUNK)):
                    taken += len(chunk)
                    self.offset += len(chunk)
                    *lines, self.tail = (self.tail + chunk).split(b"\n")
                    for line in lines:
                        self.number += 1
                        if self.skipping:
                            out.append((self.number, OVERLONG))
                            self.skipping = False
                        elif line.strip():  # a blank line is nothing: not handed out
                            out.append((self.number, line))
                    if len(self.tail) > MAX_LINE:
                        self.tail, self.skipping = b"", True
                self.more = self.offset < size
                return out
        except files.MissingFileError:
            raise RunLogError(
                f"no such run log: {files.show(self.path)} (the probe writes it at the first "
                "step: TrainmemCallback() or RunProbe(), with TRAINMEM_RUN_LOG or a path)"
            ) from None
        except files.FileReadError as exc:
            raise RunLogError(str(exc)) from None


class RunLogTail:
    """A run log followed as it grows: ``poll()`` reads what was appended since the last call
    and returns the log so far. For the dashboard's ``--run-log`` (``keep_steps=False``: the
    steps only folded into ``RunLog.observed``, so memory stays flat however long the run) and
    tests."""

    def __init__(self, path: Path | str, keep_steps: bool = True) -> None:
        self.path = files.expand(path)
        self.keep_steps = keep_steps
        self._lines = _Lines(self.path)
        self._forget()

    def _forget(self) -> None:
        self._run: dict[str, Any] | None = None
        self._steps: list[StepRecord] = []
        self._observed = Observed()
        self._problems: list[str] = []
        self._bad = 0
        self._ended = False
        self._texts = 0  # lines that are not blank

    @property
    def more(self) -> bool:
        """The last poll stopped at READ_LIMIT: more of the file waits for the next one."""
        return self._lines.more

    def poll(self) -> RunLog:
        """The log with every complete line read so far; RunLogError when it is missing or
        unusable (a caller tailing a run that has not started may keep polling)."""
        lines = self._lines.read()
        if self._lines.restarted:  # a new run wrote over the log: what was read is gone
            self._forget()
        for number, line in lines:
            self._take(number, line)
        if self._run is None:
            if self._lines.number == 0 and not self._lines.tail:
                raise RunLogError(f"run log {files.show(self.path)} is empty (no step yet?)")
            if self._lines.number == 0:  # the run record is still being written
                raise RunLogError(f"run log {files.show(self.path)} has no complete line yet")
            if not self._texts:
                raise RunLogError(
                    f"run log {files.show(self.path)} holds only blank lines (no run record yet?)"
                )
            raise RunLogError(
                f"run log {files.show(self.path)}: line 1 is not a run record "
                "(not a trainmem probe log?)"
            )
        more = self._bad - len(self._problems)
        problems = [*self._problems, *([f"and {more} more bad lines"] if more > 0 else [])]
        return RunLog(
            self.path,
            self._run,
            tuple(self._steps),
            ended=self._ended,
            pending=bool(self._lines.tail.strip()),
            problems=tuple(problems),
            observed=self._observed,
        )

    def _take(self, number: int, line: bytes) -> None:
        if not line.strip():
            return
        self._texts += 1
        rec = None
        if line.lstrip()[:1] == b"{" or line.startswith(b"\xef\xbb\xbf"):  # else no object
            with contextlib.suppress(ValueError, RecursionError):
                rec = parse_record(line)
        if not isinstance(rec, dict):
            what = f"over {MAX_LINE:,} bytes" if line == OVERLONG else "not a JSON object"
            if number == 1:
                raise RunLogError(
                    f"run log {files.show(self.path)}: line 1 is {what} (not a trainmem probe log?)"
                )
            self._bad += 1
            if len(self._problems) < MAX_PROBLEMS:
                self._problems.append(f"line {number}: {what}, skipped")
            return
        kind = rec.get("kind")
        if self._run is None:
            if kind != RUN:
                return  # reported by poll(): line 1 must be the run record
            version = rec.get("format")
            if not isinstance(version, int) or isinstance(version, bool) or version < 1:
                raise RunLogError(
                    f"run log {files.show(self.path)}: format {version!r} is not a format number"
                )
            if version > FORMAT_VERSION:
                raise RunLogError(
                    f"run log {files.show(self.path)} is in format {version}, written by a newer "
                    f"trainmem; this one reads format {FORMAT_VERSION}"
                )
            self._run = rec
        elif kind == STEP:
            step = StepRecord.from_json(rec, self._observed.steps + 1)
            self._observed = self._observed.plus(step, _device_type(self._run))
            if self.keep_steps:
                self._steps.append(step)
        elif kind == END:
            self._ended = True
        # other kinds: from a newer probe, ignored (the format says so)


def read_run_log(path: Path | str) -> RunLog:
    """Every complete record of the log at ``path`` (read READ_LIMIT bytes at a time)."""
    tail = RunLogTail(path)
    log = tail.poll()
    while tail.more:
        log = tail.poll()
    return log


def rank_files(base: Path) -> list[Path]:
    """The rank files the probe writes for the base path ``base`` (run.jsonl ->
    run.rank0.jsonl, run.rank1.jsonl, ...; run-{rank}.log -> run-0.log, ...), in rank order;
    empty when there are none. RunLogError when the folder cannot be listed."""
    folder = base.parent
    found: list[tuple[int, Path]] = []
    try:
        with os.scandir(folder) as entries:
            for i, entry in enumerate(entries):
                if i >= MAX_LISTED:
                    break
                rank = rank_of(entry.name, base.name)
                if rank is not None:
                    found.append((rank, folder / entry.name))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise RunLogError(f"cannot list {files.show(folder)}: {files.reason(exc)}") from None
    return [path for _, path in sorted(found)]


def run_log_paths(path: Path | str) -> list[Path]:
    """The logs ``path`` names: the file itself when something is there, else the rank files
    of that base path. RunLogError (one line) when there is neither."""
    try:
        expanded = files.expand(path)
        if files.kind(expanded) is not None:
            return [expanded]  # whatever it is: reading it says what is wrong with it
    except files.FileReadError as exc:
        raise RunLogError(str(exc)) from None
    ranks = rank_files(expanded)
    if not ranks:
        raise RunLogError(
            f"no such run log: {files.show(expanded)}, nor rank files of it "
            f"({files.show(expanded.parent / rank_name(expanded.name, 0))}, ...; the probe "
            "writes them at the first step: TrainmemCallback() or RunProbe(), with "
            "TRAINMEM_RUN_LOG or a path)"
        )
    return ranks


def read_run_logs(paths: Iterable[Path | str]) -> list[RunLog]:
    """Every log the paths name (a base path: all its ranks), each read once."""
    found = dict.fromkeys(p for path in paths for p in run_log_paths(path))
    return [read_run_log(p) for p in found]


@dataclass(frozen=True)
class RebuiltPlan:
    """The plan a run log describes, the model spec from its config, and what was assumed."""

    plan: Plan
    spec: ModelSpec
    notes: tuple[str, ...] = field(default=())


_KEYS = {s.key for s in PLAN_FIELDS}


def rebuild_plan(log: RunLog) -> RebuiltPlan:
    """The run's plan: the fields its description holds, the largest micro-batch the steps
    saw where the shapes were observed, the model from its config; RunLogError when the log
    does not say enough (one line)."""
    where = f"run log {files.show(log.path)}"
    raw = log.run.get("plan")
    written = dict(raw) if isinstance(raw, dict) else {}
    notes: list[str] = []
    extra = sorted(k for k in written if k not in _KEYS)
    if extra:
        notes.append(f"plan keys not known to this trainmem, ignored: {', '.join(extra)}")
    fields = {k: v for k, v in written.items() if k in _KEYS}
    observed = log.run.get("observed")
    if isinstance(observed, list):
        big = log.observed.largest_shape
        if big is not None:
            for key, value in (("batch", big.batch), ("seq_len", big.seq_len)):
                if key in observed:
                    fields[key] = value
            notes.append(
                f"batch x seq_len {big.batch} x {big.seq_len}: the largest micro-batch the "
                f"model saw (step {big.step})"
            )
    defaults = [k for k in DESCRIBED if k not in fields]
    if defaults:
        notes.append(f"not in the log, the plan's defaults: {', '.join(defaults)}")
    world = log.world_size
    if "gpus" not in fields and world > 1:  # data parallel: one rank per GPU
        fields["gpus"] = world
    spec = _spec(log, where)
    fields["model"] = spec.name
    total = log.total_bytes
    if total:
        prefix = "unified:" if log.device_type == "mps" else ""
        fields["device"] = f"{prefix}{total / 2**30:.2f}GiB"
    try:
        plan = Plan.from_dict(fields)
    except PlanError as exc:
        raise RunLogError(f"{where}: {exc}") from None
    return RebuiltPlan(plan, spec, tuple(notes))


def _spec(log: RunLog, where: str) -> ModelSpec:
    model = log.run.get("model")
    model = model if isinstance(model, dict) else {}
    # A label from someone's log: written out visibly, so the plan's model field holds it
    name = visible(str(model.get("name") or "model from run log"))[:200]
    config = model.get("config")
    if isinstance(config, dict):
        try:
            return spec_from_config(config, name, source="run log")
        except PlanError as exc:
            raise RunLogError(f"{where}: the model's config: {exc}") from None
    if model.get("name"):
        from trainmem.sources.resolve import resolve_model

        try:
            return resolve_model(name)
        except PlanError as exc:
            raise RunLogError(f"{where}: no model config, and {name!r}: {exc}") from None
    raise RunLogError(f"{where}: the run record names no model (probe the model, or pass it)")
