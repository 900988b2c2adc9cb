"""Shared doubles: NVML and psutil are replaced at their module boundary, never deeper."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from trainmem.devices import NvmlReader, SystemReader
from trainmem.devices.fakes import FakeNvml, FakeProc, FakePsutil


@pytest.fixture
def make_reader() -> Callable[[FakeNvml], NvmlReader]:
    def make(fake: FakeNvml) -> NvmlReader:
        return NvmlReader(module=fake, register_atexit=False)

    return make


@pytest.fixture
def fake_psutil() -> FakePsutil:
    return FakePsutil(processes={pid: FakeProc() for pid in (*range(1000, 1008), 2000)})


@pytest.fixture
def system(fake_psutil: FakePsutil) -> SystemReader:
    return SystemReader(fake_psutil)
