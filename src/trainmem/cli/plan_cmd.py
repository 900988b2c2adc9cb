"""`trainmem-tui plan`: estimate one plan headlessly (JSON for scripts, a table for people)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from trainmem.cli import plan_trace
from trainmem.cli.data_report import add_data_arguments, data_report, lengths_json, render_lengths
from trainmem.cli.parser import say
from trainmem.cli.plan_args import Planned, add_plan_arguments, planned_from_args, resolve_for_args
from trainmem.core.errors import PlanError


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("plan", help="estimate the memory of one training plan")
    add_plan_arguments(parser)
    add_data_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print the stable JSON object")
    parser.add_argument(
        "--no-calibration",
        action="store_true",
        help="judge GPUs on the built-in runtime figures, not on this machine's calibration "
        "(trainmem-tui calibrate)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when the plan does not fit every target device (tight counts as fitting; "
        "a plan judged on the rule of thumb must also fit on its device peak; the node's RAM "
        "counts where it is known), 0 when it fits, 2 for bad input: a guard for launch scripts",
    )
    parser.add_argument(
        "--trace",
        action="store_true",
        help="also run the plan's real step (the installed transformers / PEFT on fake tensors, "
        "on the CPU: needs torch) and print the traced device peak beside the analytic one",
    )
    parser.set_defaults(run=run)


def run(ns: argparse.Namespace) -> int:
    from trainmem.planner.report import build_report

    try:
        planned = planned_from_args(ns)
        calibrations = _calibrations(ns)
        report = build_report(
            planned.plan, resolve_for_args(ns, planned.plan), calibrations=calibrations
        )
        lengths = data_report(ns, report)
        traced = plan_trace.traced(report) if ns.trace else None
    except (PlanError, ValueError) as exc:
        say("trainmem-tui plan", "error", exc)
        return 2
    status = 0
    if ns.check:
        if not report.fit:
            sys.stderr.write("trainmem-tui plan: error: --check needs a device to judge on\n")
            return 2
        # Every device on the judged figure and the device peak, and the node's RAM.
        status = 0 if report.fits_everywhere else 1
    if ns.json:
        out = report.to_json()
        # Where each plan field came from, and the config keys the estimate leaves out.
        out["origins"] = dict(planned.origins)
        out["unmodelled"] = list(planned.unmodelled)
        out["notes"] = [*out["notes"], *_config_notes(planned)]
        if lengths:
            out["data"] = lengths_json(lengths)
        if traced is not None:
            out["trace"] = traced
        json.dump(out, sys.stdout, indent=2, allow_nan=False)
        sys.stdout.write("\n")
        return status
    from trainmem.cli.render import render_report

    render_report(report)
    if lengths:
        print(render_lengths(lengths))
    if ns.from_files or ns.from_args:
        _render_origins(planned)
    if traced is not None:
        from trainmem.cli.output import console, safe

        console().print(safe(plan_trace.render(traced)))
    return status


def _calibrations(ns: argparse.Namespace) -> dict[str, Any]:
    """This machine's calibrations, unless --no-calibration; a file that cannot be used is
    one warning on stderr and counts as none."""
    if ns.no_calibration:
        return {}
    from trainmem.planner.calibration import machine_calibrations

    calibrations, warning = machine_calibrations()
    if warning:
        say("trainmem-tui plan", "warning", warning)
    return calibrations


def _config_notes(planned: Planned) -> list[str]:
    return [
        *(f"not modelled: {key}" for key in planned.unmodelled),
        *planned.notes,
    ]


def _render_origins(planned: Planned) -> None:
    """The "from" section: each field's value and origin, then what is not modelled."""
    from rich.table import Table

    from trainmem.cli.output import console, safe
    from trainmem.core.plan import FIELDS_BY_NAME

    out = console()
    table = Table(title="plan fields from", title_justify="left", show_edge=False)
    table.add_column("field")
    table.add_column("value")
    table.add_column("from")
    for name, origin in planned.origins.items():
        spec = FIELDS_BY_NAME[name]
        value = spec.format(getattr(planned.plan, name))
        table.add_row(
            name, safe(value), safe(origin), style="dim" if origin == "trainmem default" else ""
        )
    out.print(table)
    for note in _config_notes(planned):
        out.print(safe(f"note: {note}", style="dim"))
