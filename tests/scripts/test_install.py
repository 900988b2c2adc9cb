"""scripts/install.sh installs only when what was installed does not cover the request.

Run on a copy of the script beside a pyproject.toml, with a stand-in .venv/bin/python that logs
each pip call instead of installing: the decision logic is the script's own, only pip is faked.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

FAKE_PYTHON = """#!/bin/sh
echo "$*" >> "$(dirname "$0")/../pip.log"
[ -z "$FAIL_PIP" ] || exit 1
"""


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "install.sh", tmp_path / "scripts" / "install.sh")
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "trainmem-tui"):
        (bin_dir / name).write_text(FAKE_PYTHON)
        (bin_dir / name).chmod(0o755)
    return tmp_path


def install(checkout: Path, *args: str, fail: bool = False) -> list[str]:
    """Run the script; return the pip calls it made."""
    log = checkout / ".venv" / "pip.log"
    log.unlink(missing_ok=True)
    env = {"PATH": "/usr/bin:/bin", "FAIL_PIP": "1" if fail else ""}
    subprocess.run(
        ["bash", str(checkout / "scripts" / "install.sh"), *args],
        env=env,
        check=not fail,
        capture_output=True,
    )
    return log.read_text().splitlines() if log.exists() else []


def test_first_run_installs_then_reuses(checkout: Path) -> None:
    calls = install(checkout)
    assert len(calls) == 1 and calls[0].endswith("-e .")
    assert install(checkout) == []


def test_changed_pyproject_reinstalls(checkout: Path) -> None:
    install(checkout)
    (checkout / "pyproject.toml").write_text('[project]\nname = "x"\ndependencies = ["y"]\n')
    assert len(install(checkout)) == 1
    assert install(checkout) == []


def test_an_install_with_more_extras_covers_fewer(checkout: Path) -> None:
    calls = install(checkout, "test,torch-tests", "torch==2.13.0")
    assert [c.split()[-1] for c in calls] == ["torch==2.13.0", ".[test,torch-tests]"]
    assert install(checkout) == []
    assert install(checkout, "test") == []
    assert install(checkout, "test,torch-tests", "torch==2.13.0") == []
    assert len(install(checkout, "test,parquet")) == 1  # an extra not installed yet


def test_failed_install_is_not_recorded(checkout: Path) -> None:
    install(checkout, fail=True)
    assert len(install(checkout)) == 1


def test_missing_entry_point_reinstalls(checkout: Path) -> None:
    install(checkout)
    (checkout / ".venv" / "bin" / "trainmem-tui").unlink()
    assert len(install(checkout)) == 1
