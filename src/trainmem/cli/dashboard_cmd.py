"""`trainmem-tui` with no subcommand: the dashboard.

Takes exactly the plan flags of `plan` (to open on that plan), ``--compare FILE.toml``,
``--interval S`` and ``--prometheus URL [--select MATCHERS]`` (a cluster's nodes instead of
this machine's devices). Files are read here, before the UI starts, so the first frame already shows
the restored plans; a broken file is reported in the app and never written over.
"""

from __future__ import annotations

import argparse
import gc
import math
import sys
from collections.abc import Callable
from pathlib import Path

from trainmem.cli.data_report import add_data_arguments
from trainmem.cli.exit_guard import ExitGuard
from trainmem.cli.parser import Parser
from trainmem.cli.plan_args import GIVEN, add_plan_arguments, planned_from_args, resolve_for_args
from trainmem.core.errors import PlanError
from trainmem.devices.promql import check_select, check_url
from trainmem.sources.paths import PathsError, session_path, state_dir
from trainmem.sources.plan_files import NamedPlan, PlanSet, is_large, open_plans

PROG = "trainmem-tui"


def _interval(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not math.isfinite(value) or not 0.05 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} must be between 0.05 and 3600 seconds")
    return value


def _checked(check: Callable[[str], str]) -> Callable[[str], str]:
    """A --prometheus / --select value, checked before the UI starts (bad: exit 2)."""

    def parse(text: str) -> str:
        try:
            return check(text)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog=PROG,
        description="The dashboard: plan a training run and watch the GPUs. Headless "
        "subcommands: `trainmem-tui plan` (estimate one plan, --json for scripts) and "
        "`trainmem-tui devices` (this machine's memory, --watch to log it); each has --help.",
    )
    add_plan_arguments(parser)
    add_data_arguments(parser)
    parser.add_argument(
        "--compare",
        metavar="FILE.toml",
        type=Path,
        help="open the plans in this file (created by Save if it does not exist)",
    )
    parser.add_argument(
        "--interval",
        metavar="S",
        type=_interval,
        default=1.0,
        help="seconds between device samples (default 1)",
    )
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        type=_checked(check_url),
        help="show every node's GPUs and RAM from this Prometheus server (dcgm-exporter and "
        "node_exporter metrics) instead of this machine's devices",
    )
    parser.add_argument(
        "--select",
        metavar="MATCHERS",
        type=_checked(check_select),
        default="",
        help='with --prometheus: label matchers put into every query, e.g. job=~"dcgm|node"',
    )
    parser.add_argument(
        "--run-log",
        dest="run_logs",
        metavar="PATH",
        action="append",
        default=[],
        help="tail a trainmem probe log (from trainmem.probe) in the monitor (F4): observed "
        "peaks against the plan rebuilt from the run (repeatable, one per rank)",
    )
    return parser


def _plan_flags_given(parser: argparse.ArgumentParser, argv: list[str]) -> bool:
    group = next(g for g in parser._action_groups if g.title == "plan")
    flags = {s for a in group._group_actions for s in a.option_strings}
    return any(arg.split("=", 1)[0] in flags for arg in argv)


Startup = tuple[argparse.Namespace, PlanSet | None, list[tuple[str, str]], list[Path]]


def startup(argv: list[str]) -> Startup:
    """Parse flags and read the plans to open: returns the namespace (with the calibrations
    in ``ns.calibrations``), the plans, messages to show in the app and files that failed to
    load (never to be overwritten)."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.select and not ns.prometheus:
        parser.error("--select needs --prometheus")
    try:  # the session, keymap and calibrations live there: one line now, not a traceback
        state_dir()
    except PathsError as exc:
        parser.error(str(exc))
    try:
        planned = planned_from_args(ns) if _plan_flags_given(parser, argv) else None
    except PlanError as exc:
        parser.error(str(exc))
    cli_plan = planned.plan if planned is not None else None
    if cli_plan is not None and ns.download:  # fetched before the UI starts, never on it
        try:
            resolve_for_args(ns, cli_plan)
        except (PlanError, ValueError) as exc:
            parser.error(str(exc))
    source = ns.compare if ns.compare is not None else session_path()
    ns.load_in_background = None
    plan_set: PlanSet | None = None
    if is_large(source):  # read by the app in a worker, with progress: no wait for a frame
        ns.load_in_background = source
        messages: list[tuple[str, str]] = []
        broken: list[Path] = []
    else:
        opened = open_plans(source, session=ns.compare is None)
        plan_set, messages, broken = opened.plan_set, list(opened.messages), list(opened.broken)
    ns.config_watch = None
    if planned is not None and ns.from_files:  # saving a --from file re-reads the plan
        from trainmem.app.config_watch import WatchedConfig

        given = getattr(ns, GIVEN, ())
        flags = {name: getattr(ns, name) for name in given}
        ns.config_watch = WatchedConfig.of(ns.from_files, ns.from_args, flags, planned.plan)
    if planned is not None and planned.unmodelled:  # what a --from config sets but no field
        shown = "; ".join(planned.unmodelled)
        messages.append(("warning", f"not in the estimate (not modelled): {shown}"))
    # This machine's calibrations, read before the first frame (a small file) so that every
    # report the dashboard builds uses them, as `plan` does; a broken file is one warning.
    from trainmem.planner.calibration import machine_calibrations

    ns.calibrations, warning = machine_calibrations()
    if warning:
        messages.append(("warning", warning))
    # The user's keys (keymap.toml in the state directory), read here, before the UI starts.
    from trainmem.app.keymap import read_keymap

    ns.keymap, warning = read_keymap()
    if warning:
        messages.append(("warning", warning))
    if cli_plan is not None:  # open on the plan the flags describe, after the restored ones
        if plan_set is None:
            plan_set = PlanSet((NamedPlan("", cli_plan, auto=True),))
        else:
            from trainmem.app.workspace import Workspace

            ws = Workspace(plan_set)
            ws.add(cli_plan)
            plan_set = ws.to_plan_set()
    return ns, plan_set, messages, broken


def run(argv: list[str]) -> int:
    # Start-up allocates many long-lived objects (Textual, the widget tree): collecting
    # garbage among them only costs time. The app re-enables collection after its first
    # frame and freezes what exists then, which also makes later collections cheaper.
    gc.disable()
    ns, plan_set, messages, broken = startup(argv)
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        sys.stderr.write(
            f"{PROG}: error: the dashboard needs a terminal (stdin and stdout are not one); "
            "for scripts use `trainmem-tui plan` or `trainmem-tui devices`\n"
        )
        return 2
    # SIGHUP / SIGTERM end the dashboard within two seconds from here on (see exit_guard);
    # before this, their default action ends the process, with nothing of the user's lost.
    guard = ExitGuard()
    guard.start()
    from trainmem.app import make_app

    app = make_app(
        calibrations=ns.calibrations,
        keymap=ns.keymap,
        plan_set=plan_set,
        plans_path=ns.compare,
        interval=ns.interval,
        startup_messages=messages,
        broken_paths=broken,
        load_in_background=ns.load_in_background,
        prometheus=ns.prometheus,
        select=ns.select,
        config_watch=ns.config_watch,
        data=ns.data,
        tokenizer=ns.tokenizer,
        run_logs=ns.run_logs,
        find_processes=not ns.prometheus,  # on unified memory or a CPU: the run by its RSS
    )

    def save() -> None:
        for line in app.save_session():  # an error, or plans merged from another dashboard
            sys.stderr.write(f"{PROG}: {line}\n")

    guard.save = save
    guard.request_exit = lambda: app.call_from_thread(app.exit)
    app.run()
    guard.save_once()
    guard.finished()
    return app.return_code or 0
