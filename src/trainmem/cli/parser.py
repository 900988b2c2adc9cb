"""The argument parser every command uses: bad input is one line on stderr and exit 2."""

from __future__ import annotations

import argparse
import sys


class Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(2)
