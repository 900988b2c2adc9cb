"""`trainmem-tui run-report PATH [PATH...]`: a probe's run logs against the estimate for the
plan they describe, one column per rank (``--json`` for scripts).

    trainmem-tui run-report out/trainmem-run.rank0.jsonl
    trainmem-tui run-report out/trainmem-run.rank*.jsonl --json

Bad input (a missing or unreadable log, one in a newer format, a description that makes no
plan) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

PROG = "trainmem-tui run-report"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "run-report",
        help="a probe's run logs: observed memory against the estimate",
        description="Compare a trainmem probe's run logs (one per rank) with the estimate for "
        "the plan the run describes.",
    )
    parser.add_argument("paths", nargs="+", metavar="PATH", help="run logs (JSON Lines)")
    parser.add_argument("--json", action="store_true", help="print the JSON object")
    parser.add_argument(
        "--no-calibration",
        action="store_true",
        help="use the built-in runtime figures, not this machine's calibration",
    )
    parser.set_defaults(run=run)


def run(ns: argparse.Namespace) -> int:
    from trainmem.core.errors import PlanError
    from trainmem.planner.run_report import build_run_report
    from trainmem.sources.calibration import CalibrationFileError, load_calibrations
    from trainmem.sources.run_logs import read_run_log

    try:
        logs = [read_run_log(p) for p in ns.paths]
        calibrations = {} if ns.no_calibration else load_calibrations()
        report = build_run_report(logs, calibrations)
    except (CalibrationFileError, PlanError, ValueError) as exc:
        sys.stderr.write(f"{PROG}: error: {exc}\n")
        return 2
    if ns.json:
        json.dump(report.to_json(), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(render(report.to_json()))
    return 0


def size(n: int | None) -> str:
    if n is None:
        return "n/a"
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.1f} MiB"


def _signed(d: dict[str, Any]) -> str:
    if d.get("difference_bytes") is None:
        return "n/a"
    pct = d.get("difference_pct")
    sign = "+" if d["difference_bytes"] >= 0 else "-"
    shown = f"{sign}{size(abs(d['difference_bytes']))}"
    return f"{shown} ({pct:+.1f}%)" if pct is not None else shown


def _where(d: dict[str, Any]) -> str:
    if d.get("step") is None:
        return "n/a"
    return f"step {d['step']}" + (f", {d['phase']}" if d.get("phase") else "")


def render(doc: dict[str, Any]) -> str:
    """The comparison as a text table: a row per figure, a column per rank."""
    ranks = doc["ranks"]
    rows: list[tuple[str, list[str]]] = [
        ("log", [r["path"] for r in ranks]),
        ("rank", [f"{r['rank']} of {r['world_size'] or 1}" for r in ranks]),
        ("device", [str(r["device"].get("name") or r["device"].get("type")) for r in ranks]),
        ("steps", [f"{r['steps']}{'' if r['ended'] else ' (running or stopped)'}" for r in ranks]),
        ("allocated predicted", [size(r["allocated"]["predicted_bytes"]) for r in ranks]),
        ("allocated observed", [size(r["allocated"]["observed_bytes"]) for r in ranks]),
        ("  difference", [_signed(r["allocated"]) for r in ranks]),
        ("  peak at", [_where(r["allocated"]) for r in ranks]),
        ("device predicted", [size(r["device_peak"]["predicted_bytes"]) for r in ranks]),
        ("device observed", [size(r["device_peak"]["observed_bytes"]) for r in ranks]),
        ("  difference", [_signed(r["device_peak"]) for r in ranks]),
        ("  peak at", [_where(r["device_peak"]) for r in ranks]),
    ]
    width = max(len(label) for label, _ in rows)
    cols = [max(len(row[1][i]) for row in rows) for i in range(len(ranks))]
    lines = [
        "  ".join(
            [label.ljust(width), *(v.ljust(w) for v, w in zip(values, cols, strict=True))]
        ).rstrip()
        for label, values in rows
    ]
    first = ranks[0]
    lines.append(f"plan: {_plan_line(first['plan'])}")
    for r in ranks:
        tag = f"rank {r['rank']}: " if len(ranks) > 1 else ""
        lines += [f"warning: {tag}{w}" for w in r["warnings"]]
        lines += [f"problem: {tag}{p}" for p in r["problems"]]
    lines += [f"note: {n}" for n in dict.fromkeys(n for r in ranks for n in r["notes"])]
    return "\n".join(lines) + "\n"


def _plan_line(plan: dict[str, Any]) -> str:
    keys = ("model", "method", "seq_len", "batch", "precision", "optimizer", "grad_ckpt", "stack")
    return ", ".join(f"{k}={plan[k]}" for k in keys if k in plan)
