"""`trainmem-tui devices`: what memory this machine has, once or as a stream.

    trainmem-tui devices                 a readable table
    trainmem-tui devices --json          the stable JSON contract (see trainmem.devices.snapshot)
    trainmem-tui devices --watch --interval 2 --log run.jsonl   (or run.csv)
    trainmem-tui devices --prometheus URL [--select MATCHERS] [--json|--watch]   a cluster
    trainmem-tui devices --serve [HOST:]PORT [plan flags]   this machine as Prometheus metrics
    trainmem-tui devices --presets [--json]   the --device presets and their sizes

--prometheus reads every node's GPUs and RAM from the cluster's Prometheus instead of this
machine (see trainmem.devices.prometheus): dcgm-exporter's, node_exporter's and --serve's own
series. --serve exports this machine's samples, and the plan's predicted peak when plan flags
are given (see trainmem.devices.exporter), until Ctrl+C or SIGTERM, bound to 127.0.0.1 unless
a host is given; it takes its first sample before it listens, so no scrape finds it empty.

--watch stops cleanly on Ctrl+C or SIGTERM at any moment, start-up included: the sample in
hand is written and the command exits 0 (Ctrl+C before --watch has set up its handlers, while
Python is still importing, exits 130 through ``trainmem.cli.main``, with no traceback either).

The log is written one record (a sample: one JSON line, or its CSV rows) at a time, with a single
``os.write`` of the whole record; a short or failed write is cut back to the end of the last whole
record, so every line of the log is complete JSON / CSV, whatever happens. The log is fsynced on
stop. A write error (a full disk, a lost mount; on stdout too) ends the command with one line on
stderr and exit status 1. A log that is not a regular file (a FIFO, a device, a directory) is
refused at once, exit 2: a FIFO nobody reads would otherwise hang the command forever.

Every JSON printed or written is strict: a non-finite number becomes null, never ``NaN``.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import errno
import io
import json
import math
import os
import queue
import signal
import stat
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType
from typing import IO, Any

from trainmem.cli.parser import say
from trainmem.cli.plan_args import GROUP, add_plan_arguments, plan_from_args, resolve_for_args
from trainmem.core.errors import PlanError
from trainmem.core.text import visible
from trainmem.core.units import shown
from trainmem.devices import DeviceReading, Sampler, Snapshot
from trainmem.devices.sampler import MAX_INTERVAL

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


class WriteError(Exception):
    """The log could not be written: one line on stderr, exit 1 (stdout: trainmem.cli.main)."""


# The one call that writes the log: tests replace it to fill the disk.
_write = os.write


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_INTERVAL:  # NaN and inf too
        raise argparse.ArgumentTypeError(
            f"must be a number of seconds > 0 and <= {MAX_INTERVAL:,} (a day), not {text!r}"
        )
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 1, not {text!r}")
    return value


def prometheus_url(text: str) -> str:
    from trainmem.devices.promql import check_url

    try:
        return check_url(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def label_select(text: str) -> str:
    from trainmem.devices.promql import check_select

    try:
        return check_select(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def serve_address(text: str) -> tuple[str, int]:
    """``9400``, ``0.0.0.0:9400`` or ``[::1]:9400`` -> (host, port); 127.0.0.1 by default.
    The host must be an IP address or a host name IDNA can encode (``a..b`` cannot)."""
    from trainmem.devices.promql import check_host

    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]") if sep else "127.0.0.1"
    digits = port.isascii() and port.isdigit() and len(port) <= 5
    if not digits or not 0 <= int(port) <= 65535 or (sep and not host):
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is not [HOST:]PORT (e.g. 9400, 0.0.0.0:9400)"
        )
    try:
        check_host(host)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{shown(text)}: {err}") from None
    return host, int(port)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "devices",
        help="show GPU, unified and system memory, once or as a stream",
        description="Show this machine's GPUs (NVML), unified memory and system RAM.",
    )
    p.add_argument("--json", action="store_true", help="print JSON (with --watch: JSON Lines)")
    p.add_argument("--watch", action="store_true", help="keep sampling until Ctrl+C or SIGTERM")
    p.add_argument("--interval", type=_interval, metavar="S", help="seconds between samples (1)")
    p.add_argument(
        "--log", metavar="FILE", help="append each sample to FILE (JSON Lines; CSV if *.csv)"
    )
    p.add_argument("--count", type=_positive_int, metavar="N", help="stop after N samples")
    p.add_argument(
        "--prometheus",
        type=prometheus_url,
        metavar="URL",
        help="read every node's GPUs (dcgm-exporter), RAM (node_exporter) and the devices of "
        "any `devices --serve` it scrapes from this Prometheus server instead of this machine "
        f"(auth: {_AUTH_ENV})",
    )
    p.add_argument(
        "--select",
        type=label_select,
        default="",
        metavar="MATCHERS",
        help='with --prometheus: label matchers put into every query, e.g. job=~"dcgm|node"',
    )
    p.add_argument(
        "--serve",
        type=serve_address,
        metavar="[HOST:]PORT",
        help="export this machine's samples as Prometheus metrics on http://HOST:PORT/metrics "
        "(127.0.0.1 unless HOST is given; 0 picks a free port) until Ctrl+C or SIGTERM; "
        "with plan flags, the plan's predicted peak too",
    )
    p.add_argument(
        "--presets",
        action="store_true",
        help="list the --device presets with their memory (with --json: as JSON)",
    )
    add_plan_arguments(p)
    # Plan flags count only when given (with --serve): without a default they stay unset.
    group = next(g for g in p._action_groups if g.title == GROUP)
    for action in group._group_actions:
        _PLAN_DEFAULTS[action.dest] = action.default
        action.default = argparse.SUPPRESS
    group.title = "plan (with --serve: export this plan's predicted peak)"
    p.set_defaults(run=run)
    return p


_AUTH_ENV = "TRAINMEM_PROMETHEUS_TOKEN, or TRAINMEM_PROMETHEUS_USER and _PASSWORD"
_PLAN_DEFAULTS: dict[str, Any] = {}


def _plan_given(args: argparse.Namespace) -> bool:
    return any(dest in vars(args) for dest in _PLAN_DEFAULTS)


def _make_sampler(args: argparse.Namespace, on_snapshot: Any, interval: float = 1.0) -> Sampler:
    """This machine's sampler, or with --prometheus one that reads only the cluster."""
    if not getattr(args, "prometheus", None):
        return Sampler(on_snapshot, interval=interval)
    from trainmem.devices.prometheus import PrometheusSource

    try:
        source = PrometheusSource(args.prometheus, select=args.select)
    except ValueError as err:
        raise UsageError(str(err)) from None
    if source.auth_error:  # both a token and a user in the environment, a broken token
        raise UsageError(source.auth_error)
    return Sampler(on_snapshot, interval=interval, extra_sources=(source,), local=False)


def run(args: argparse.Namespace) -> int:
    try:
        if getattr(args, "serve", None) is not None:
            return _serve(args)
        if _plan_given(args):
            raise UsageError("plan flags need --serve (to export the plan's predicted peak)")
        if args.presets:
            return _presets(args)
        if getattr(args, "select", "") and not getattr(args, "prometheus", None):
            raise UsageError("--select needs --prometheus")
        if not args.watch and (args.interval is not None or args.count is not None):
            raise UsageError("--interval and --count need --watch")
        if args.watch:
            # Handlers first: a signal while the log opens or NVML loads stops the watch too.
            stop = threading.Event()
            with _stop_on_signals(stop), _open_log(args.log) as log:
                return _watch(args, log, stop)
        with _open_log(args.log) as log:
            snap = _make_sampler(args, None).sample_once()
            if log is not None:
                log.write(snap)
            # a failed write to stdout is trainmem.cli.main's to report, as for every command
            if args.json:
                sys.stdout.write(dumps(snap.to_json(), indent=2) + "\n")
            else:
                _print_table(snap, prometheus=getattr(args, "prometheus", None))
            sys.stdout.flush()
            if getattr(args, "prometheus", None) and all(d.unavailable for d in snap.devices):
                # A script asking the cluster should not take "nothing readable" for an answer.
                reason = snap.devices[0].unavailable if snap.devices else "no devices"
                sys.stderr.write(f"{PROG}: error: {visible(reason or '')}\n")
                return 1
            return 0
    except UsageError as err:
        say(PROG, "error", err)
        return 2
    except WriteError as err:
        say(PROG, "error", err)
        return 1
    except BrokenPipeError:  # `devices --watch | head`
        sys.stderr.close()
        return 0


def dumps(obj: Any, **kwargs: Any) -> str:
    """Strict JSON: a NaN or infinity anywhere in ``obj`` is written as null."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        return json.dumps(_finite(obj), allow_nan=False, **kwargs)


def _finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


# -- --watch ---------------------------------------------------------------------------------


def _watch(args: argparse.Namespace, log: _Log | None, stop: threading.Event) -> int:
    snaps: queue.SimpleQueue[Snapshot] = queue.SimpleQueue()
    sampler = _make_sampler(args, snaps.put, args.interval or 1.0)
    written = 0
    sampler.start()
    try:
        while not stop.is_set() and (args.count is None or written < args.count):
            try:
                snap = snaps.get(timeout=0.1)
            except queue.Empty:
                continue
            if log is not None:
                log.write(snap, written)
            if args.json:
                sys.stdout.write(dumps(snap.to_json(), separators=(",", ":")) + "\n")
            else:
                text = io.StringIO()
                _print_compact(snap, header=written == 0, out=text)
                sys.stdout.write(text.getvalue())
            sys.stdout.flush()
            written += 1
    finally:
        # A source still stuck loading its driver is left on its daemon thread: the command
        # ends within a second of the stop whatever NVML does.
        sampler.stop(timeout=1.0)
    return 0


# -- --serve ---------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    for flag, given in (
        ("--json", args.json),
        ("--watch", args.watch),
        ("--log", args.log),
        ("--count", args.count),
        ("--prometheus", args.prometheus),
        ("--select", args.select),
    ):
        if given:
            raise UsageError(f"--serve exports this machine's samples; it takes no {flag}")
    plan = _plan_peak(args) if _plan_given(args) else None
    from trainmem.devices.exporter import Exporter

    stop = threading.Event()
    with _stop_on_signals(stop):
        first = threading.Event()
        sampler = Sampler(lambda _snap: first.set(), interval=args.interval or 1.0)
        host, port = args.serve
        sampler.start()
        try:
            # The first sample before listening: a scrape never finds empty metric families.
            # The sampler publishes within FIRST_WAIT_S even when NVML hangs.
            while not first.wait(0.1):
                if stop.is_set():
                    return 0
            try:
                exporter = Exporter(lambda: sampler.latest, host=host, port=port, plan=plan)
            except (OSError, ValueError) as err:  # in use, not this machine's, unresolvable
                why = err.strerror if isinstance(err, OSError) and err.strerror else err
                raise UsageError(f"cannot serve on {host}:{port}: {visible(str(why))}") from None
            try:
                sys.stderr.write(f"{PROG}: serving metrics on {exporter.url}\n")
                sys.stderr.flush()
                while not stop.wait(0.2):
                    pass
            finally:
                exporter.close()
        finally:
            sampler.stop(timeout=1.0)
    return 0


def _presets(args: argparse.Namespace) -> int:
    """``--presets``: every --device preset, its memory and the other names it answers to."""
    from trainmem.devices.presets import list_presets, preset_aliases

    for flag in ("watch", "log", "count", "interval", "prometheus", "select"):
        if getattr(args, flag):
            raise UsageError(f"--presets lists the --device presets; it takes no --{flag}")
    presets = list_presets()
    if args.json:
        rows = [
            {
                "name": t.name,
                "kind": t.kind,
                "total_bytes": t.total_bytes,
                "usable_bytes": t.usable_bytes,
                "aliases": list(preset_aliases(t.name)),
            }
            for t in presets
        ]
        sys.stdout.write(dumps({"presets": rows}, indent=2) + "\n")
    else:
        width = max(len(t.name) for t in presets)
        lines = [f"{'preset':{width}}  {'kind':7}  {'total':>8}  {'GiB':>5}  {'usable':>8}  names"]
        for t in presets:
            row = (
                f"{t.name:{width}}  {t.kind:7}  {_gb(t.total_bytes):>5} GB  "
                f"{t.total_bytes / 2**30:>5.1f}  {_gb(t.usable_bytes):>5} GB  "
            )
            lines.append((row + ", ".join(preset_aliases(t.name))).rstrip())
        lines += [
            "GB = 10^9 bytes. A GPU's total is what NVML reports; usable is what a run may plan",
            "against (3/4 of unified memory). A size works too: --device 24GiB, unified:36GB.",
        ]
        sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()
    return 0


def _plan_peak(args: argparse.Namespace) -> Any:
    from trainmem.devices.exporter import PlanPeak
    from trainmem.planner.calibration import machine_calibrations
    from trainmem.planner.report import build_report

    ns = argparse.Namespace(**{**_PLAN_DEFAULTS, **vars(args)})
    calibrations, warning = machine_calibrations()
    if warning:
        say(PROG, "warning", warning)
    try:
        plan = plan_from_args(ns)
        report = build_report(
            plan, resolve_for_args(ns, plan), calibrations=calibrations, solve=False
        )
    except (PlanError, ValueError) as err:
        raise UsageError(str(err)) from None
    return PlanPeak(plan.model, plan.method, report.estimate.device_bytes)


@contextlib.contextmanager
def _stop_on_signals(stop: threading.Event) -> Iterator[None]:
    """SIGINT and SIGTERM set ``stop``; the loop then finishes the sample in hand and exits.
    A signal that is ignored (a background job's SIGINT) stays ignored."""

    def handler(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) is signal.SIG_IGN:
            continue
        # Only the main thread may set handlers; elsewhere (a test thread) keep the defaults.
        with contextlib.suppress(ValueError):
            previous[sig] = signal.signal(sig, handler)
    if _interrupted_earlier():
        stop.set()
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _interrupted_earlier() -> bool:
    """A Ctrl+C that reached `trainmem.cli.main` before these handlers, whose KeyboardInterrupt
    Python swallowed (see ``trainmem.cli.main.interrupted``)."""
    entry = sys.modules.get("trainmem.cli.main")
    return bool(entry is not None and entry.interrupted())


class _Log:
    """Appends samples to a file, one whole record per write. CSV: a row per device per sample.

    Only a regular file (or a new one) is accepted: it is checked before opening, and the open is
    non-blocking, so a FIFO that appears in between fails (no reader) instead of hanging."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.csv = path.lower().endswith(".csv")
        self.failed = False
        self._newline_first = False
        with contextlib.suppress(OSError):  # missing: created below; unreadable: open says why
            _require_regular(path, os.stat(path).st_mode)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        for name in ("O_NONBLOCK", "O_CLOEXEC", "O_BINARY", "O_NOCTTY"):
            flags |= getattr(os, name, 0)
        try:
            self.fd = os.open(path, flags, 0o666)
        except OSError as err:
            raise UsageError(f"cannot open log {path!r}: {err.strerror or err}") from None
        try:
            try:
                info = os.fstat(self.fd)
            except OSError as err:
                raise UsageError(f"cannot open log {path!r}: {err.strerror or err}") from None
            _require_regular(path, info.st_mode)
            # A log cut off mid-record (a killed writer, a full disk) would glue its partial
            # line to the first new record: start the new records on a line of their own.
            if info.st_size > 0 and not _is_our_log(path, self.csv):
                raise UsageError(
                    f"log {shown(path, 80)} already holds something that is not a "
                    f"trainmem-tui devices {'CSV' if self.csv else 'JSON Lines'} log; "
                    "give a new file"
                )
            self._newline_first = info.st_size > 0 and _last_byte(path, info.st_size) != b"\n"
            if self.csv and info.st_size == 0:
                self._append(_csv_text([dict(zip(CSV_FIELDS, CSV_FIELDS, strict=True))]), None)
        except BaseException:
            os.close(self.fd)
            raise

    def write(self, snap: Snapshot, written: int | None = None) -> None:
        """Append one sample; ``written`` (--watch: samples so far) is for the error message."""
        if self.csv:
            text = _csv_text([_csv_row(snap, d) for d in snap.devices])
        else:
            text = dumps(snap.to_json(), separators=(",", ":")) + "\n"
        self._append(text, written)

    def _append(self, text: str, written: int | None) -> None:
        if self._newline_first:
            text = "\n" + text
        data = memoryview(text.encode("utf-8"))
        start: int | None = None
        done = 0
        try:
            start = os.lseek(self.fd, 0, os.SEEK_END)  # where the record begins (O_APPEND)
            while done < len(data):
                n = _write(self.fd, data[done:])
                if n <= 0:
                    raise OSError(errno.EIO, "short write")
                done += n
            self._newline_first = False
        except BaseException as err:
            self.failed = True
            if start is not None:
                with contextlib.suppress(OSError):
                    os.ftruncate(self.fd, start)  # back to the end of the last whole record
            if not isinstance(err, OSError):
                raise
            where = (
                ""
                if written is None
                else f" (stopped after {written} sample(s); the log ends with the last whole one)"
            )
            raise WriteError(
                f"cannot write log {self.path!r}: {err.strerror or err}{where}"
            ) from None

    def close(self) -> None:
        """fsync and close; a failure is a write error unless one was reported already."""
        error: OSError | None = None
        try:
            os.fsync(self.fd)
        except OSError as err:
            if err.errno not in (errno.EINVAL, errno.ENOTSUP):  # cannot be synced: fine
                error = err
        try:
            os.close(self.fd)
        except OSError as err:
            error = error or err
        if error is not None and not self.failed:
            raise WriteError(f"cannot write log {self.path!r}: {error.strerror or error}")


def _read_at(path: str, size: int, offset: int, unread: bytes) -> bytes:
    """``size`` bytes of the file from ``offset`` (``unread`` if it cannot be read)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0))
    except OSError:
        return unread
    try:
        return os.pread(fd, size, offset)
    except OSError:
        return unread
    finally:
        os.close(fd)


def _last_byte(path: str, size: int) -> bytes:
    """The file's last byte (a newline if it cannot be read: then nothing is added)."""
    return _read_at(path, 1, size - 1, b"\n")


def _is_our_log(path: str, csv_log: bool) -> bool:
    """Whether a file that holds something is a log to append to: its first line is our CSV
    header, or a JSON object (JSON Lines), so samples never go under a stranger's header."""
    first = _read_at(path, 64 * 1024, 0, b"").split(b"\n", 1)[0].rstrip(b"\r")
    if not first:
        return True  # unreadable here: the open says why, or a cut-off start
    if csv_log:
        return first.decode("utf-8", "replace") == ",".join(CSV_FIELDS)
    return first.lstrip().startswith(b"{")


def _require_regular(path: str, mode: int) -> None:
    if stat.S_ISREG(mode):
        return
    what = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "not a regular file"
    )
    raise UsageError(f"cannot use log {path!r}: it is {what}; give a regular file")


def _csv_text(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    writer.writerows(rows)
    return buf.getvalue()


@contextlib.contextmanager
def _open_log(path: str | None) -> Iterator[_Log | None]:
    log = _Log(path) if path else None
    try:
        yield log
    except BaseException:
        if log is not None:
            log.failed = True  # the error in hand is the one to report
            with contextlib.suppress(WriteError):
                log.close()
        raise
    else:
        if log is not None:
            log.close()


def _num(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


def _csv_row(snap: Snapshot, d: DeviceReading) -> dict[str, Any]:
    return {
        "timestamp": f"{snap.timestamp:.3f}" if math.isfinite(snap.timestamp) else None,
        "seq": snap.seq,
        "id": d.id,
        "kind": d.kind,
        "name": d.name,
        "total_bytes": d.total_bytes,
        "used_bytes": d.used_bytes,
        "free_bytes": d.free_bytes,
        "usable_bytes": d.usable_bytes,
        "peak_used_bytes": d.peak_used_bytes,
        "utilization_pct": _num(d.utilization_pct),
        "temperature_c": _num(d.temperature_c),
        "power_w": _num(d.power_w),
        "processes": len(d.processes),
        "unavailable": d.unavailable,
    }


# -- text output -----------------------------------------------------------------------------


def _gb(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e9:.1f}"


def _opt(value: float | None, unit: str, fmt: str = "{:.0f}") -> str:
    return "-" if value is None or not math.isfinite(value) else fmt.format(value) + unit


def _print_compact(snap: Snapshot, *, header: bool, out: IO[str]) -> None:
    if header:
        out.write(
            f"{'time':8}  {'device':8}  {'used GB':>8}  {'total':>7}  {'peak':>7}  "
            f"{'util':>4}  {'temp':>4}  {'power':>6}  procs\n"
        )
    clock = time.strftime("%H:%M:%S", time.localtime(snap.timestamp))
    for d in snap.devices:
        device = visible(d.id)
        if d.unavailable is not None:
            out.write(f"{clock:8}  {device:8}  unavailable: {visible(d.unavailable)}\n")
            continue
        out.write(
            f"{clock:8}  {device:8}  {_gb(d.used_bytes):>8}  {_gb(d.total_bytes):>7}  "
            f"{_gb(d.peak_used_bytes):>7}  {_opt(d.utilization_pct, '%'):>4}  "
            f"{_opt(d.temperature_c, 'C'):>4}  {_opt(d.power_w, 'W'):>6}  {len(d.processes)}\n"
        )


def _print_table(snap: Snapshot, prometheus: str | None = None) -> None:
    """The table. Every name, note and command goes in as a rich ``Text`` with its control
    characters shown as escapes: a label such as ``[/]n1`` is never read as markup."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from trainmem.cli.output import console as make_console
    from trainmem.cli.output import safe

    console = make_console()  # not wrapped into a pipe
    table = Table(title="Devices (GB = 10^9 bytes)", title_justify="left", box=box.SIMPLE)
    table.add_column("ID", no_wrap=True)
    table.add_column("Name", no_wrap=True, overflow="ellipsis", max_width=28)
    for col in ("Used/Total", "Usable", "Util", "Temp", "Power"):
        table.add_column(col, justify="right", no_wrap=True)
    notes_lines: list[Text] = []
    for d in snap.devices:
        notes = d.unavailable or ", ".join(f"{f}: {r}" for f, r in d.field_errors)
        if d.kind == "unified" and not d.unavailable:
            notes = "unified: shares system RAM; usable = 3/4" + (f"; {notes}" if notes else "")
        if d.mig:
            notes = f"MIG: {len(d.mig)} instance(s)" + (f"; {notes}" if notes else "")
        table.add_row(
            safe(d.id),
            safe(d.name),
            f"{_gb(d.used_bytes)}/{_gb(d.total_bytes)}",
            _gb(d.usable_bytes),
            _opt(d.utilization_pct, "%"),
            _opt(d.temperature_c, "C"),
            _opt(d.power_w, "W"),
        )
        if notes:
            notes_lines.append(safe(f"  {d.id}: {notes}"))
    console.print(table)
    for line in notes_lines:
        console.print(line)
    procs = [(d, p) for d in snap.devices for p in d.processes]
    if procs:
        pt = Table(title="GPU processes", title_justify="left", box=box.SIMPLE)
        for col in ("Device", "PID", "User", "Name", "Used GB", "Command"):
            pt.add_column(col, justify="right" if col in ("PID", "Used GB") else "left")
        for d, p in procs:
            command = p.cmdline or (f"({p.unavailable})" if p.unavailable else "")
            pt.add_row(
                safe(d.id),
                str(p.pid),
                safe(p.user or "?"),
                safe(p.name or "?"),
                _gb(p.used_bytes),
                safe(command),
            )
        console.print(pt)
    nv = snap.nvml
    if prometheus:
        console.print(safe(f"Read from Prometheus at {prometheus}"))
    elif nv.available:
        line = f"NVML {nv.nvml_version or '?'}, driver {nv.driver_version or '?'}"
        line += f", binding {nv.binding}" if nv.binding else ""
        console.print(safe(line + (f" ({nv.reason})" if nv.reason else "")))
    else:
        console.print(safe(f"NVML not available: {nv.reason}"))
