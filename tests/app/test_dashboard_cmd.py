"""`trainmem-tui` flags: the plan flags, --compare and --interval; bad flags exit 2 in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmem.app.fixture import demo_plan_set
from trainmem.cli.dashboard_cmd import startup
from trainmem.core import Plan
from trainmem.sources.paths import session_path
from trainmem.sources.plan_files import save_plans


def test_plan_flags_open_that_plan() -> None:
    _ns, plan_set, messages, broken = startup(["--model", "3B", "--batch", "4", "--method=full"])
    assert plan_set is not None and messages == [] and broken == []
    assert plan_set.plans[plan_set.selected].plan == Plan(model="3B", batch=4, method="full")


def test_no_flags_restore_the_last_session() -> None:
    _ns, plan_set, _m, _b = startup([])
    assert plan_set is None  # nothing saved yet: the defaults
    save_plans(session_path(), demo_plan_set())
    ns, plan_set, _m, _b = startup(["--interval", "0.5"])
    assert plan_set == demo_plan_set() and ns.interval == 0.5
    _ns, plan_set, _m, _b = startup(["--seq-len", "512"])  # added after the restored ones
    assert plan_set is not None and len(plan_set.plans) == 5 and plan_set.selected == 4


def test_compare_file(tmp_path: Path) -> None:
    path = tmp_path / "cmp.toml"
    _ns, plan_set, messages, _b = startup(["--compare", str(path)])
    assert plan_set is None and "does not exist yet" in messages[0][1]
    save_plans(path, demo_plan_set())
    ns, plan_set, messages, _b = startup(["--compare", str(path)])
    assert plan_set == demo_plan_set() and messages == [] and ns.compare == path
    path.write_text("plans = 3")
    _ns, plan_set, messages, broken = startup(["--compare", str(path)])
    assert plan_set is None and broken == [path]
    assert messages[0][0] == "error" and "left untouched" in messages[0][1]
    assert path.read_text() == "plans = 3"


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--nope"], "unrecognized arguments: --nope"),
        (["--interval", "0"], "must be between"),
        (["--batch", "x"], "is not a whole number"),
        (["--offload", "optimizer"], "needs ZeRO stage"),
    ],
)
def test_bad_flags_exit_2_with_one_line(
    argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        startup(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and err.startswith("trainmem-tui: error:")


def test_a_state_dir_that_cannot_be_used_is_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setenv("TRAINMEM_STATE_DIR", "~nouser-trainmem-test/state")
    with pytest.raises(SystemExit) as exit_info:
        startup([])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "nouser-trainmem-test" in err and "Traceback" not in err
