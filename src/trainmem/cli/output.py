"""Where every text command prints: one console, and text from outside made safe for it.

At a terminal, rich wraps to its width. Into a pipe or a file nothing is wrapped (rich would
cut at 80 columns, and a script reading `plan` output would lose the ``:line`` of an origin at
the fold). Untrusted text (a model's name from its config, a file's value, a label) goes
through ``safe``: rich ``Text`` never parses markup, and ``visible`` writes out escapes.
"""

from __future__ import annotations

import sys

from rich.console import Console
from rich.text import Text

from trainmem.core.text import visible

PIPE_WIDTH = 1000  # tables into a pipe take the width they need, up to this


class _Console(Console):
    def on_broken_pipe(self) -> None:
        """A closed pipe ends the command as every command's does (status 141, trainmem.cli
        .main), not with rich's SystemExit(1), which a --check caller would read as "does
        not fit"."""
        self.quiet = True
        raise BrokenPipeError


def console() -> Console:
    if sys.stdout.isatty():
        return _Console(highlight=False)
    return _Console(soft_wrap=True, width=PIPE_WIDTH, highlight=False)


def safe(text: object, style: str = "") -> Text:
    """``text`` as rich Text: no markup parsed, control characters shown as escapes."""
    return Text(visible(str(text)), style=style)
