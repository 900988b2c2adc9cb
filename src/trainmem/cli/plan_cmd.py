"""`trainmem-tui plan`: estimate one plan headlessly (JSON for scripts, a table for people)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from trainmem.cli.plan_args import add_plan_arguments, plan_from_args, resolve_for_args
from trainmem.core.errors import PlanError


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("plan", help="estimate the memory of one training plan")
    add_plan_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the stable JSON object")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when the plan does not fit every target device (tight counts as fitting), "
        "0 when it fits, 2 for bad input: a guard for launch scripts",
    )
    parser.set_defaults(run=run)


def run(ns: argparse.Namespace) -> int:
    from trainmem.planner.report import build_report

    try:
        plan = plan_from_args(ns)
        report = build_report(plan, resolve_for_args(ns, plan))
    except (PlanError, ValueError) as exc:
        sys.stderr.write(f"trainmem-tui plan: error: {exc}\n")
        return 2
    status = 0
    if ns.check:
        if not report.fit:
            sys.stderr.write("trainmem-tui plan: error: --check needs a device to judge on\n")
            return 2
        status = 0 if all(f.fits for f in report.fit) else 1
    if ns.json:
        json.dump(report.to_json(), sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return status
    from trainmem.cli.render import render_report

    render_report(report)
    return status
