"""`trainmem-tui run-report PATH [PATH...]`: a probe's run logs against the estimate for the
plan they describe, one column per rank (``--json`` for scripts).

    trainmem-tui run-report out/trainmem-run.rank0.jsonl
    trainmem-tui run-report out/trainmem-run.jsonl    # the base path: every rank's file
    trainmem-tui run-report out/trainmem-run.rank*.jsonl --json

Differences are observed minus predicted, as a share of observed (the dashboard's monitor
shows the same figures: both come from trainmem.planner.run_report.difference). A
calibration file that cannot be used is one warning, and the built-in figures are used.

Bad input (a missing or unreadable log, one in a newer format, a description that makes no
plan) is one line on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from trainmem.core.text import visible
from trainmem.planner.summary import plan_summary

if TYPE_CHECKING:
    from trainmem.planner.run_report import PeakCompared, RunReport

PROG = "trainmem-tui run-report"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "run-report",
        help="a probe's run logs: observed memory against the estimate",
        description="Compare a trainmem probe's run logs (one per rank) with the estimate for "
        "the plan the run describes.",
    )
    parser.add_argument(
        "paths",
        nargs="+",
        metavar="PATH",
        help="run logs (JSON Lines), or the base path given to the probe for all its ranks",
    )
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
    from trainmem.sources.calibration import load_calibrations_or_warn
    from trainmem.sources.run_logs import read_run_logs

    try:
        logs = read_run_logs(ns.paths)
        calibrations, warning = ({}, None) if ns.no_calibration else load_calibrations_or_warn()
        if warning:  # judged as absent: the report goes on with the built-in figures
            sys.stderr.write(f"{PROG}: warning: {visible(warning)}\n")
        report = build_run_report(logs, calibrations)
    except (PlanError, ValueError) as exc:
        sys.stderr.write(f"{PROG}: error: {visible(str(exc))}\n")
        return 2
    if ns.json:
        json.dump(report.to_json(), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return 0
    sys.stdout.write(render(report))
    return 0


def _signed(peak: PeakCompared) -> str:
    d = peak.difference
    if d is None:
        return "n/a"
    shown, pct = d.shown()
    return f"{shown} ({pct})" if d.pct is not None else shown


def render(report: RunReport) -> str:
    """The comparison as a text table: a row per figure, a column per rank. Text from the
    logs (paths, names, notes) is shown through core.text.visible: no raw escape reaches the
    terminal."""
    from trainmem.planner.run_report import size

    ranks = report.ranks
    compared = [r.compared() for r in ranks]
    rows: list[tuple[str, list[str]]] = [
        ("log", [str(r.log.path) for r in ranks]),
        ("rank", [f"{r.log.rank} of {r.log.world_size}" for r in ranks]),
        ("device", [r.log.device_name for r in ranks]),
        (
            "steps",
            [f"{r.step_count}{'' if r.log.ended else ' (running or stopped)'}" for r in ranks],
        ),
    ]
    for i, label in enumerate(("allocated", "device")):
        peaks = [c[i] for c in compared]
        rows += [
            (f"{label} predicted", [size(p.predicted) for p in peaks]),
            (f"{label} observed", [size(p.observed) for p in peaks]),
            ("  difference", [_signed(p) for p in peaks]),
            ("  peak at", [p.where() for p in peaks]),
        ]
    rows = [(label, [visible(v) for v in values]) for label, values in rows]
    width = max(len(label) for label, _ in rows)
    cols = [max(len(row[1][i]) for row in rows) for i in range(len(ranks))]
    lines = [
        "  ".join(
            [label.ljust(width), *(v.ljust(w) for v, w in zip(values, cols, strict=True))]
        ).rstrip()
        for label, values in rows
    ]
    lines.append(f"plan: {visible(plan_summary(ranks[0].estimate.plan))}")
    for r in ranks:
        tag = f"rank {r.log.rank}: " if len(ranks) > 1 else ""
        lines += [f"warning: {tag}{w}" for w in r.warnings]
        lines += [f"problem: {tag}{p}" for p in r.log.problems]
    lines += [f"note: {n}" for n in dict.fromkeys(n for r in ranks for n in r.notes)]
    lines.append("differences: observed - predicted, as a share of observed (+: the run held more)")
    return "\n".join(visible(line) for line in lines) + "\n"
