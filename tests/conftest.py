"""Shared fixtures: tests never see the developer's own Hugging Face cache or state files."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HF_HUB_CACHE", str(home / "hf-hub"))
    monkeypatch.setenv("TRAINMEM_STATE_DIR", str(home / "state"))
    monkeypatch.setenv("TRAINMEM_CACHE_DIR", str(home / "cache"))
    monkeypatch.delenv("HF_HOME", raising=False)
