"""The entry point: help names the dashboard's flags and the headless commands."""

import pytest

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
