"""Dashboard tests: a deterministic machine; state and the HF cache are isolated by the root
conftest (``TRAINMEM_STATE_DIR``, ``HF_HUB_CACHE``)."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
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


@pytest.fixture
def demo_app() -> Callable[..., TrainmemApp]:
    """``demo_app(**make_app_kwargs)``: the app on the demo machine, deterministic."""

    def build(**kwargs: Any) -> TrainmemApp:
        kwargs.setdefault("sampler_factory", demo_sampler_factory())
        kwargs.setdefault("cursor_blink", False)
        return make_app(**kwargs)

    return build
