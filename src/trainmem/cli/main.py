"""`trainmem-tui`: the dashboard by default; `plan` and `devices` are headless commands.

Ctrl+C ends every command without a traceback, at any moment, start-up included:

* during start-up (imports, parsing the flags) it is only noted, then ``main`` returns 130
  before the command runs (a KeyboardInterrupt raised in the middle of an import can land in
  one of importlib's weakref callbacks, where Python prints it as "Exception ignored" and
  carries on, losing the Ctrl+C; or in code run by ``exec``, after which CPython exits by
  SIGINT even though we caught it);
* while a command runs it raises KeyboardInterrupt as usual, caught here: exit status 130;
* `devices --watch` handles SIGINT and SIGTERM itself: the user stopping it exits 0.

A failed write to stdout (``> /dev/full``, stdout closed with ``>&-``) ends every command
with one line on stderr and status 1; a closed pipe
(``trainmem-tui run-report --json | head``) ends every command quietly with
status 141 (128 + SIGPIPE, as a shell reports a command ended by it): stdout is flushed before
``main`` returns, so a closed reader is found here and not at the interpreter's exit, where
Python would print "Exception ignored ... BrokenPipeError"; then stdout is pointed at
/dev/null for that final flush (the recipe of Python's signal module docs, "Note on SIGPIPE").

This module imports next to nothing at load, so a Ctrl+C during start-up lands inside ``main``.
"""

from __future__ import annotations

import sys

from trainmem import __version__

TYPE_CHECKING = False  # not `typing`'s: importing typing costs ~10 ms of start-up
if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

SUBCOMMANDS = ("plan", "devices", "run-report", "calibrate", "replay")
INTERRUPTED = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl+C
PIPE_CLOSED = 141  # 128 + SIGPIPE
UNWRITABLE = 1  # stdout cannot be written (as `devices` exits for a log it cannot write)


class _Stdout:
    """sys.stdout for a subcommand, remembering the write that failed, so that the OSError
    reaching ``main`` is told from any other."""

    def __init__(self, stream: object) -> None:
        self._stream = stream
        self.failed: OSError | None = None

    def write(self, text: str) -> int:
        try:
            return int(self._stream.write(text))  # type: ignore[attr-defined]
        except OSError as err:
            self.failed = err
            raise

    def flush(self) -> None:
        try:
            self._stream.flush()  # type: ignore[attr-defined]
        except OSError as err:
            self.failed = err
            raise

    def __getattr__(self, name: str) -> object:  # isatty, fileno, encoding, buffer...
        return getattr(self._stream, name)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or with ``only`` one subcommand (so `plan` never imports NVML code)."""
    import importlib

    from trainmem.cli.parser import Parser

    parser = Parser(
        prog="trainmem-tui",
        description="Will this training run fit? Run without a command to open the dashboard.",
    )
    parser.add_argument("--version", action="version", version=f"trainmem-tui {__version__}")
    sub = parser.add_subparsers(
        dest="command", parser_class=Parser, metavar="{" + ",".join(SUBCOMMANDS) + "}"
    )
    for name in SUBCOMMANDS if only is None else (only,):
        importlib.import_module(f"trainmem.cli.{name.replace('-', '_')}_cmd").add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    global _interrupted, _raising
    _interrupted = _raising = False
    restore: Callable[[], None] | None = None
    try:
        restore = _catch_sigint()
        args = list(sys.argv[1:] if argv is None else argv)
        # `--help` goes to the dashboard's parser: it lists the plan flags and names the
        # commands.
        if args and (args[0] in SUBCOMMANDS or args[0] == "--version"):
            if sys.stdout is None:  # started with stdout closed (`>&-`)
                return _unwritable(args[0], "closed")
            stdout = sys.stdout = _Stdout(sys.stdout)  # type: ignore[assignment]
            try:
                ns = build_parser(args[0] if args[0] in SUBCOMMANDS else None).parse_args(args)
                if _interrupted:
                    return INTERRUPTED
                _raising = True
                status = int(ns.run(ns))
                sys.stdout.flush()  # a closed pipe is found here, not at exit
                return status
            except BrokenPipeError:
                raise
            except OSError as err:
                if stdout.failed is not err:
                    raise
                _silence_stdout()  # the flush at exit must not fail again
                return _unwritable(args[0], err.strerror or str(err))
            finally:
                sys.stdout = stdout._stream  # type: ignore[assignment]
        # No subcommand: the dashboard, which takes the plan flags too. Imported lazily so the
        # headless commands never pay for Textual.
        from trainmem.cli import dashboard_cmd

        if _interrupted:
            return INTERRUPTED
        _raising = True
        return dashboard_cmd.run(args)
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return PIPE_CLOSED
    finally:
        _interrupted = _raising = False  # this run is over (tests call main() many times)
        if restore is not None:
            restore()


def _unwritable(command: str, reason: str) -> int:
    sys.stderr.write(f"trainmem-tui {command}: error: cannot write to stdout: {reason}\n")
    return UNWRITABLE


def _silence_stdout() -> None:
    """Point stdout at /dev/null: what is left in its buffer goes nowhere, quietly."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor (a test's capture): nothing to do
        pass


def interrupted() -> bool:
    """Whether Ctrl+C reached ``main``'s handler in this run. `devices --watch` checks it when
    it installs its own handlers, so a Ctrl+C whose KeyboardInterrupt Python swallowed (see
    above) still stops it."""
    return _interrupted


_interrupted = False  # a SIGINT arrived during this run of main()
_raising = False  # start-up is over: SIGINT raises KeyboardInterrupt


def _on_sigint(signum: int, frame: object) -> None:
    global _interrupted
    _interrupted = True
    if _raising:
        raise KeyboardInterrupt


def _catch_sigint() -> Callable[[], None] | None:
    """Install ``_on_sigint`` where Python's default handler is (not over SIG_IGN, as in a
    background job, nor over an embedding program's own); returns how to put it back."""
    # `_signal` is built in and already loaded: no import (`signal` imports enum, ~2 ms)
    # stands between the start of main() and the handler.
    try:
        import _signal as sig  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # pragma: no cover - not CPython
        import signal as sig
    try:
        if sig.getsignal(sig.SIGINT) is not sig.default_int_handler:
            return None
        sig.signal(sig.SIGINT, _on_sigint)
    except ValueError:  # not the main thread
        return None

    def restore() -> None:
        if sig.getsignal(sig.SIGINT) is _on_sigint:
            sig.signal(sig.SIGINT, sig.default_int_handler)

    return restore
