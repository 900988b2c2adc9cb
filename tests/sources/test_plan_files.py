from __future__ import annotations

import os
from pathlib import Path

import pytest

from trainmem.core.plan import Plan
from trainmem.sources.paths import session_path, state_dir
from trainmem.sources.plan_files import (
    NamedPlan,
    PlanSet,
    PlansFileError,
    from_toml,
    load_plans,
    save_plans,
    to_toml,
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
        ("a = " + "[" * 2000 + "]" * 2000, "nested too deeply"),  # tomllib recurses
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
    with pytest.raises(PlansFileError, match=r"cannot write: .*file is a file, not a folder"):
        save_plans(blocker / "plans.toml", PLANS)
    with pytest.raises(PlansFileError, match=r"cannot write: .*file is a file, not a folder"):
        save_plans(blocker / "deeper" / "plans.toml", PLANS)


def test_state_paths_follow_the_override(isolated_state: Path) -> None:
    assert state_dir() == isolated_state
    assert session_path().parent == isolated_state


DATA = Path(__file__).parent / "data"


def test_a_file_written_by_release_0_1_loads_unchanged() -> None:
    """Written by trainmem-tui 0.1.0's to_toml (kept as a file, not regenerated)."""
    loaded = load_plans(DATA / "plans-v1-release-0.1.toml")
    first, second = loaded.plans
    assert loaded.selected == 1
    assert first.plan == Plan() and first.auto  # its old default name: today's default instead
    assert second.name == "my run" and not second.auto
    assert second.plan == Plan(method="qlora", lora_dropout=0.1, kbit_prep=False, device="24GB")


def test_a_newer_format_is_refused_and_never_overwritten(tmp_path: Path) -> None:
    """The dashboard keeps files it could not read out of every save."""
    from trainmem.cli.dashboard_cmd import startup

    path = tmp_path / "plans.toml"
    text = "version = 2\n[[plans]]\nmodel = '7B'\nnew_field = 1\n"
    path.write_text(text)
    _ns, plan_set, messages, broken = startup(["--compare", str(path)])
    assert plan_set is None and broken == [path]
    assert "newer trainmem-tui" in messages[0][1]
    assert path.read_text() == text


def test_every_field_round_trips_through_toml(tmp_path: Path) -> None:
    plan = Plan(
        model="Qwen/Qwen2.5-0.5B",
        method="qlora",
        lora_alpha=12.5,
        lora_dropout=0.05,
        kbit_prep=False,
        zero=3,
        gpus=4,
        offload="params",
        rule_of_thumb=True,
    )
    named = PlanSet((NamedPlan("x", plan), NamedPlan("", Plan(), auto=True)))
    back = from_toml(to_toml(named), tmp_path / "p.toml")
    assert back == named
    assert "name" not in to_toml(PlanSet((NamedPlan("", Plan(), auto=True),)))


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_plans_path_that_is_not_a_file_is_refused_at_once(tmp_path: Path, kind: str) -> None:
    """Checked before it is opened: a FIFO with no writer never hangs the start-up."""
    path = tmp_path / "plans.toml"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    else:
        path = Path("/dev/zero")
    with pytest.raises(PlansFileError, match="not a regular file"):
        load_plans(path)


def test_saving_never_replaces_what_is_not_a_plans_file(tmp_path: Path) -> None:
    import os
    import stat

    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    with pytest.raises(PlansFileError, match="not a regular file"):
        save_plans(fifo, PLANS)  # the rename would have put a file in the FIFO's place
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    config = tmp_path / "axolotl.yml"
    config.write_text("base_model: x\n")
    with pytest.raises(PlansFileError, match="not a plans file"):
        save_plans(config, PLANS)
    assert config.read_text() == "base_model: x\n"
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "x"\n')
    with pytest.raises(PlansFileError, match="not a plans file"):
        save_plans(other, PLANS)
    ours = tmp_path / "plans.toml"
    save_plans(ours, PLANS)
    save_plans(ours, PLANS)  # its own file, again
    assert load_plans(ours).plans == PLANS.plans


def test_saving_through_a_symlink_writes_its_target(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    save_plans(real, PLANS)
    link = tmp_path / "link.toml"
    link.symlink_to(real)
    save_plans(link, PLANS)
    assert link.is_symlink() and load_plans(real).plans == PLANS.plans


def test_a_byte_order_mark_is_not_part_of_the_file(tmp_path: Path) -> None:
    # Windows editors write one; tomllib and json refuse it as text
    path = tmp_path / "plans.toml"
    save_plans(path, PLANS)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert load_plans(path).plans == PLANS.plans
