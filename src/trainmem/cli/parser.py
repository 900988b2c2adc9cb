"""The argument parser every command uses: bad input is one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import sys

from trainmem.core.text import visible


def say(prog: str, kind: str, message: object) -> None:
    """One line on stderr: ``prog: kind: message``, with the message's control characters
    and escape sequences shown, not obeyed (it may quote a file from anyone: a line break
    or an OSC title change in a config's key would otherwise reach the terminal)."""
    sys.stderr.write(f"{prog}: {kind}: {visible(str(message))}\n")


class Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        say(self.prog, "error", message)
        raise SystemExit(2)
