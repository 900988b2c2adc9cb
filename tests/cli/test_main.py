"""The entry point: help names the dashboard's flags and the headless commands."""

import os
import signal
import time

import pytest

from trainmem.cli import devices_cmd
from trainmem.cli import main as cli_main
from trainmem.cli.main import main


def test_help_lists_dashboard_flags_and_commands(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the description
    assert done.value.code == 0
    for text in ("--model", "--compare", "--interval", "trainmem-tui plan", "trainmem-tui devices"):
        assert text in out


def test_version(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.startswith("trainmem-tui ")


def test_unknown_flag_is_one_line_exit_2(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--bogus"])
    err = capsys.readouterr().err.strip()
    assert done.value.code == 2 and len(err.splitlines()) == 1 and "--bogus" in err


# -- Ctrl+C: exit 130, no traceback, for every command ----------------------------------------


def _devices_runs(monkeypatch, action):  # type: ignore[no-untyped-def]
    """`trainmem-tui devices` runs ``action()`` instead of reading devices."""
    monkeypatch.setattr(devices_cmd, "run", lambda ns: action())


def test_ctrl_c_in_a_command_exits_130_without_traceback(monkeypatch, capsys):
    def interrupted():  # type: ignore[no-untyped-def]
        raise KeyboardInterrupt

    _devices_runs(monkeypatch, interrupted)
    assert main(["devices"]) == 130
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and captured.out == ""
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back


def test_sigint_while_a_command_runs_raises_there(monkeypatch):
    seen = []

    def command():  # type: ignore[no-untyped-def]
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # interrupted at once
        except KeyboardInterrupt:
            seen.append(cli_main.interrupted())
            raise
        return 0

    _devices_runs(monkeypatch, command)
    start = time.monotonic()
    assert main(["devices"]) == 130
    assert seen == [True] and time.monotonic() - start < 4
    assert not cli_main.interrupted()  # reset once main() is over


def test_sigint_during_start_up_is_noted_and_the_command_never_runs(monkeypatch):
    real = cli_main.build_parser
    ran = []

    def build(only=None):  # type: ignore[no-untyped-def]
        os.kill(os.getpid(), signal.SIGINT)  # while imports run: noted, not raised
        return real(only)

    monkeypatch.setattr(cli_main, "build_parser", build)
    _devices_runs(monkeypatch, lambda: ran.append(1) or 0)
    assert main(["devices"]) == 130
    assert ran == []
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_sigint_is_left_alone(monkeypatch):
    seen = []
    _devices_runs(monkeypatch, lambda: seen.append(signal.getsignal(signal.SIGINT)) or 0)
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)  # as in a background job
    try:
        assert main(["devices"]) == 0
        assert seen == [signal.SIG_IGN]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_dashboards_help_leaves_the_signal_mask_alone():
    """The exit guard blocks SIGHUP/SIGTERM only once the dashboard really starts: a caller
    (a test, a script embedding main) keeps its signals, and so do its children."""
    import contextlib
    import signal

    from trainmem.cli.main import main

    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    with contextlib.suppress(SystemExit):
        main(["--help"])
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before
