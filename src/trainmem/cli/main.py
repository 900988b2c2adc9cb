"""`trainmem-tui`: the dashboard by default; `plan` and `devices` are headless commands."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from trainmem import __version__
from trainmem.cli.parser import Parser

SUBCOMMANDS = ("plan", "devices")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with ``only`` one subcommand (so `plan` never imports NVML code)."""
    import importlib

    parser = Parser(
        prog="trainmem-tui",
        description="Will this training run fit? Run without a command to open the dashboard.",
    )
    parser.add_argument("--version", action="version", version=f"trainmem-tui {__version__}")
    sub = parser.add_subparsers(dest="command", parser_class=Parser, metavar="{plan,devices}")
    for name in SUBCOMMANDS if only is None else (only,):
        importlib.import_module(f"trainmem.cli.{name}_cmd").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    # `--help` goes to the dashboard's parser: it lists the plan flags and names the commands.
    if args and (args[0] in SUBCOMMANDS or args[0] == "--version"):
        ns = build_parser(args[0] if args[0] in SUBCOMMANDS else None).parse_args(args)
        return int(ns.run(ns))
    # No subcommand: the dashboard, which takes the plan flags too. Imported lazily so the
    # headless commands never pay for Textual.
    from trainmem.cli import dashboard_cmd

    return dashboard_cmd.run(args)
