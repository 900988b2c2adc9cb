"""`trainmem-tui devices`: what memory this machine has, once or as a stream.

    trainmem-tui devices                 a readable table
    trainmem-tui devices --json          the stable JSON contract (see trainmem.devices.snapshot)
    trainmem-tui devices --watch --interval 2 --log run.jsonl   (or run.csv)

--watch stops cleanly on Ctrl+C or SIGTERM: the sample in hand is written, the log is flushed
after every sample, so a killed run loses nothing already sampled.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import queue
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import IO, Any

from trainmem.devices import DeviceReading, Sampler, Snapshot

PROG = "trainmem-tui devices"
CSV_FIELDS = (
    "timestamp",
    "seq",
    "id",
    "kind",
    "name",
    "total_bytes",
    "used_bytes",
    "free_bytes",
    "usable_bytes",
    "peak_used_bytes",
    "utilization_pct",
    "temperature_c",
    "power_w",
    "processes",
    "unavailable",
)


class UsageError(Exception):
    """Bad input found after parsing: one line on stderr, exit 2."""


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, not {text!r}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return value


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "devices",
        help="show GPU, unified and system memory, once or as a stream",
        description="Show this machine's GPUs (NVML), unified memory and system RAM.",
    )
    p.add_argument("--json", action="store_true", help="print JSON (with --watch: JSON Lines)")
    p.add_argument("--watch", action="store_true", help="keep sampling until Ctrl+C or SIGTERM")
    p.add_argument(
        "--interval", type=_positive_float, metavar="S", help="seconds between samples (1)"
    )
    p.add_argument(
        "--log", metavar="FILE", help="append each sample to FILE (JSON Lines; CSV if *.csv)"
    )
    p.add_argument("--count", type=_positive_int, metavar="N", help="stop after N samples")
    p.set_defaults(run=run)
    return p


def run(args: argparse.Namespace) -> int:
    try:
        if not args.watch and (args.interval is not None or args.count is not None):
            raise UsageError("--interval and --count need --watch")
        with _open_log(args.log) as log:
            if args.watch:
                return _watch(args, log)
            snap = Sampler(None).sample_once()
            if log is not None:
                log.write(snap)
            if args.json:
                print(json.dumps(snap.to_json(), indent=2))
            else:
                _print_table(snap)
            return 0
    except UsageError as err:
        sys.stderr.write(f"{PROG}: error: {err}\n")
        return 2
    except BrokenPipeError:  # `devices --watch | head`
        sys.stderr.close()
        return 0


# -- --watch ---------------------------------------------------------------------------------


def _watch(args: argparse.Namespace, log: _Log | None) -> int:
    stop = threading.Event()
    snaps: queue.SimpleQueue[Snapshot] = queue.SimpleQueue()
    sampler = Sampler(snaps.put, interval=args.interval or 1.0)
    out = sys.stdout
    written = 0
    with _stop_on_signals(stop):
        sampler.start()
        try:
            while not stop.is_set() and (args.count is None or written < args.count):
                try:
                    snap = snaps.get(timeout=0.1)
                except queue.Empty:
                    continue
                if log is not None:
                    log.write(snap)
                if args.json:
                    out.write(json.dumps(snap.to_json(), separators=(",", ":")) + "\n")
                else:
                    _print_compact(snap, header=written == 0, out=out)
                out.flush()
                written += 1
        finally:
            sampler.stop()
    return 0


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop``; the loop then finishes the sample in hand and exits."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        # Only the main thread may set handlers; elsewhere (a test thread) keep the defaults.
        with contextlib.suppress(ValueError):
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class _Log:
    """Appends samples to a file, flushed per sample. CSV: one row per device per sample."""

    def __init__(self, path: str) -> None:
        self.csv = path.lower().endswith(".csv")
        try:
            self.file: IO[str] = open(path, "a", encoding="utf-8", newline="")  # noqa: SIM115
        except OSError as err:
            raise UsageError(f"cannot open log {path!r}: {err.strerror or err}") from None
        self._writer: Any = None
        if self.csv:
            self._writer = csv.DictWriter(self.file, fieldnames=CSV_FIELDS)
            if self.file.tell() == 0:
                self._writer.writeheader()

    def write(self, snap: Snapshot) -> None:
        if self._writer is not None:
            for d in snap.devices:
                self._writer.writerow(_csv_row(snap, d))
        else:
            self.file.write(json.dumps(snap.to_json(), separators=(",", ":")) + "\n")
        self.file.flush()

    def close(self) -> None:
        self.file.close()


@contextlib.contextmanager
def _open_log(path: str | None) -> Iterator[_Log | None]:
    log = _Log(path) if path else None
    try:
        yield log
    finally:
        if log is not None:
            log.close()


def _csv_row(snap: Snapshot, d: DeviceReading) -> dict[str, Any]:
    return {
        "timestamp": f"{snap.timestamp:.3f}",
        "seq": snap.seq,
        "id": d.id,
        "kind": d.kind,
        "name": d.name,
        "total_bytes": d.total_bytes,
        "used_bytes": d.used_bytes,
        "free_bytes": d.free_bytes,
        "usable_bytes": d.usable_bytes,
        "peak_used_bytes": d.peak_used_bytes,
        "utilization_pct": d.utilization_pct,
        "temperature_c": d.temperature_c,
        "power_w": d.power_w,
        "processes": len(d.processes),
        "unavailable": d.unavailable,
    }


# -- text output -----------------------------------------------------------------------------


def _gb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e9:.1f}"


def _opt(value: float | None, unit: str, fmt: str = "{:.0f}") -> str:
    return "-" if value is None else fmt.format(value) + unit


def _print_compact(snap: Snapshot, *, header: bool, out: IO[str]) -> None:
    if header:
        out.write(
            f"{'time':8}  {'device':8}  {'used GB':>8}  {'total':>7}  {'peak':>7}  "
            f"{'util':>4}  {'temp':>4}  {'power':>6}  procs\n"
        )
    clock = time.strftime("%H:%M:%S", time.localtime(snap.timestamp))
    for d in snap.devices:
        if d.unavailable is not None:
            out.write(f"{clock:8}  {d.id:8}  unavailable: {d.unavailable}\n")
            continue
        out.write(
            f"{clock:8}  {d.id:8}  {_gb(d.used_bytes):>8}  {_gb(d.total_bytes):>7}  "
            f"{_gb(d.peak_used_bytes):>7}  {_opt(d.utilization_pct, '%'):>4}  "
            f"{_opt(d.temperature_c, 'C'):>4}  {_opt(d.power_w, 'W'):>6}  {len(d.processes)}\n"
        )


def _print_table(snap: Snapshot) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title="Devices (GB = 10^9 bytes)", title_justify="left", box=box.SIMPLE)
    table.add_column("ID", no_wrap=True)
    table.add_column("Name", no_wrap=True, overflow="ellipsis", max_width=28)
    for col in ("Used/Total", "Usable", "Util", "Temp", "Power"):
        table.add_column(col, justify="right", no_wrap=True)
    notes_lines: list[str] = []
    for d in snap.devices:
        notes = d.unavailable or ", ".join(f"{f}: {r}" for f, r in d.field_errors)
        if d.kind == "unified" and not d.unavailable:
            notes = "unified: shares system RAM; usable = 3/4" + (f"; {notes}" if notes else "")
        if d.mig:
            notes = f"MIG: {len(d.mig)} instance(s)" + (f"; {notes}" if notes else "")
        table.add_row(
            d.id,
            d.name,
            f"{_gb(d.used_bytes)}/{_gb(d.total_bytes)}",
            _gb(d.usable_bytes),
            _opt(d.utilization_pct, "%"),
            _opt(d.temperature_c, "C"),
            _opt(d.power_w, "W"),
        )
        if notes:
            notes_lines.append(f"  {d.id}: {notes}")
    console.print(table)
    for line in notes_lines:
        console.print(line, highlight=False)
    procs = [(d, p) for d in snap.devices for p in d.processes]
    if procs:
        pt = Table(title="GPU processes", title_justify="left", box=box.SIMPLE)
        for col in ("Device", "PID", "User", "Name", "Used GB", "Command"):
            pt.add_column(col, justify="right" if col in ("PID", "Used GB") else "left")
        for d, p in procs:
            command = p.cmdline or (f"({p.unavailable})" if p.unavailable else "")
            pt.add_row(d.id, str(p.pid), p.user or "?", p.name or "?", _gb(p.used_bytes), command)
        console.print(pt)
    nv = snap.nvml
    if nv.available:
        line = f"NVML {nv.nvml_version or '?'}, driver {nv.driver_version or '?'}"
        line += f", binding {nv.binding}" if nv.binding else ""
        console.print(line + (f" ({nv.reason})" if nv.reason else ""), highlight=False)
    else:
        console.print(f"NVML not available: {nv.reason}", highlight=False)
