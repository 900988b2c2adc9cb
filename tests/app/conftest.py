"""Dashboard tests: a deterministic machine, state files in a temp folder, no blinking cursor."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from trainmem.app import TrainmemApp, make_app
from trainmem.app.fixture import demo_sampler_factory


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    """Run ``async def`` tests on a fresh event loop (no async plugin is installed)."""
    if not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = pyfuncitem._fixtureinfo.argnames
    asyncio.run(pyfuncitem.obj(**{n: pyfuncitem.funcargs[n] for n in names}))
    return True


@pytest.fixture(autouse=True)
def isolated_state(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Session and plans files go to a temp folder; the Hugging Face cache is an empty one, so
    a developer's own files never leak into tests."""
    state = tmp_path_factory.mktemp("state")
    monkeypatch.setenv("TRAINMEM_STATE_DIR", str(state))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path_factory.mktemp("hf-cache")))
    return state


@pytest.fixture
def demo_app() -> Callable[..., TrainmemApp]:
    """``demo_app(**make_app_kwargs)``: the app on the demo machine, deterministic."""

    def build(**kwargs: Any) -> TrainmemApp:
        kwargs.setdefault("sampler_factory", demo_sampler_factory())
        kwargs.setdefault("cursor_blink", False)
        return make_app(**kwargs)

    return build
