"""Shared fixtures: tests never see the developer's own Hugging Face cache or state files."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainmem.sources.paths import state_dir


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hf-hub"))
    monkeypatch.setenv("TRAINMEM_STATE_DIR", str(home / "state"))
    monkeypatch.setenv("TRAINMEM_CACHE_DIR", str(home / "cache"))
    monkeypatch.delenv("HF_HOME", raising=False)


@pytest.fixture
def isolated_state() -> Path:
    """The state folder, which the root conftest points at a temp dir for every test."""
    path = state_dir()
    assert "pytest" in str(path), "state must never be the developer's own"
    return path
