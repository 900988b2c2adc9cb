"""State and cache locations from the environment, and plans files with hostile numbers:
expanded as documented or refused in one line, never a folder in the working directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmem.sources import paths
from trainmem.sources.plan_files import PlansFileError, from_toml


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("~nouser-trainmem/state", "no such user 'nouser-trainmem'"),
        ("$TRAINMEM_TEST_UNSET/state", "$TRAINMEM_TEST_UNSET is not set"),
        ("${TRAINMEM_TEST_UNSET}/state", "${TRAINMEM_TEST_UNSET} is not set"),
        ("state", "is not an absolute path"),
    ],
)
@pytest.mark.parametrize(
    ("variable", "where"),
    [("TRAINMEM_STATE_DIR", paths.state_dir), ("TRAINMEM_CACHE_DIR", paths.downloads_dir)],
)
def test_an_unusable_location_is_refused(monkeypatch, tmp_path, variable, where, value, message):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("TRAINMEM_TEST_UNSET", raising=False)
    monkeypatch.setenv(variable, value)
    with pytest.raises(paths.PathsError) as err:
        where()
    assert str(err.value).startswith(f"{variable}=") and message in str(err.value)
    assert "\n" not in str(err.value)
    assert list(tmp_path.iterdir()) == []  # nothing made in the working directory


def test_home_and_variables_are_expanded(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("TRAINMEM_TEST_BASE", str(tmp_path / "base"))
    monkeypatch.setenv("TRAINMEM_STATE_DIR", "~/state")
    assert paths.state_dir() == tmp_path / "state"
    monkeypatch.setenv("TRAINMEM_STATE_DIR", "$TRAINMEM_TEST_BASE/state")
    assert paths.session_path() == tmp_path / "base" / "state" / "session.toml"
    monkeypatch.setenv("TRAINMEM_STATE_DIR", "/data/a$/b")  # a lone $ is part of a name
    assert paths.state_dir() == Path("/data/a$/b")


def test_a_relative_xdg_variable_is_ignored_as_the_spec_says(monkeypatch, tmp_path):
    monkeypatch.delenv("TRAINMEM_STATE_DIR")
    monkeypatch.delenv("TRAINMEM_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_STATE_HOME", "relative/state")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert paths.state_dir() == tmp_path / ".local" / "state" / "trainmem"
    assert paths.downloads_dir() == tmp_path / ".cache" / "trainmem" / "models"
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert paths.state_dir() == tmp_path / "xdg" / "trainmem"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (f"seq_len = 1{'0' * 400}", "seq_len: a 1329-bit integer is outside 1..10,000,000"),
        ("lora_alpha = inf", "lora_alpha: inf is not a finite number"),
        ("lora_dropout = nan", "lora_dropout: nan is not a finite number"),
        ("batch = [1, 2]", "batch: [1, 2] is not a number"),
    ],
)
def test_hostile_numbers_in_a_plans_file(body, message):
    text = f'[[plans]]\nmodel = "7B"\n{body}\n'
    with pytest.raises(PlansFileError) as err:
        from_toml(text, Path("p.toml"))
    assert message in str(err.value) and "\n" not in str(err.value)


def test_an_integer_tomllib_cannot_read_is_one_line():
    with pytest.raises(PlansFileError, match="an integer too long to read"):
        from_toml(f"version = 1{'0' * 5000}\n", Path("p.toml"))
