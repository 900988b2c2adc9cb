from __future__ import annotations

from pathlib import Path

import pytest

from trainmem.core.plan import Plan
from trainmem.sources.plan_files import (
    NamedPlan,
    PlanSet,
    PlansFileError,
    load_plans,
    save_plans,
    session_path,
    state_dir,
)

PLANS = PlanSet(
    (NamedPlan("a", Plan()), NamedPlan("b", Plan(method="qlora", seq_len=4096, batch=1))), 1
)


def test_round_trip_and_atomic_write(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "plans.toml"
    save_plans(path, PLANS)
    assert load_plans(path) == PLANS
    assert [p.name for p in path.parent.iterdir()] == ["plans.toml"]  # no temp file left


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("not = [toml", "not valid TOML"),
        ("version = 9\n[[plans]]\nname='x'\n", "plans format 9 by a newer trainmem-tui"),
        ("version = 'one'\n[[plans]]\n", "not a format version"),
        ("[[plans]]\nname = 'x'\nmodel = 5\n", "plan 1 (x): model: 5 is not text"),
        ("[[plans]]\ngrad_ckpt = 'yes'\n", "plan 1: grad_ckpt"),
        ("version = 1\n", "no [[plans]]"),
        ("[[plans]]\nname = 'x'\nbatch = 0\n", "plan 1 (x): batch"),
        ("[[plans]]\nname = 'x'\ncolour = 'red'\n", "plan 1 (x): colour: unknown plan field"),
    ],
)
def test_broken_file_is_reported_and_left_alone(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "plans.toml"
    path.write_text(text)
    with pytest.raises(PlansFileError, match=r"plans\.toml") as info:
        load_plans(path)
    assert needle in str(info.value)
    assert path.read_text() == text


def test_unwritable_folder_is_an_error_not_a_crash(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(PlansFileError, match="cannot write"):
        save_plans(blocker / "plans.toml", PLANS)


def test_state_paths_follow_the_override(isolated_state: Path) -> None:
    assert state_dir() == isolated_state
    assert session_path().parent == isolated_state
