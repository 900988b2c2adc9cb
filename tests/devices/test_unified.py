"""The unified-memory rule: usable = 3/4 of total; Apple silicon and GB10-class GPUs."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trainmem.devices import DeviceTarget, SystemReader, read_devices, usable_unified
from trainmem.devices.fakes import FakeNvml, FakePsutil
from trainmem.devices.nvml import NvmlReader
from trainmem.devices.unified import is_apple_silicon

GiB = 2**30


@pytest.mark.parametrize(
    ("total", "usable"),
    [(36 * GiB, 27 * GiB), (128 * GiB, 96 * GiB), (16 * GiB, 12 * GiB), (10, 7), (0, 0)],
)
def test_three_quarters(total: int, usable: int) -> None:
    assert usable_unified(total) == usable
    assert DeviceTarget.unified("x", total).usable_bytes == usable


@given(st.integers(min_value=0, max_value=2**50))
def test_three_quarters_property(total: int) -> None:
    usable = usable_unified(total)
    assert 4 * usable <= 3 * total < 4 * (usable + 1)


@pytest.mark.parametrize(
    ("system", "machine", "expected"),
    [
        ("Darwin", "arm64", True),
        ("Darwin", "x86_64", False),  # Intel Mac, or Python under Rosetta
        ("Linux", "aarch64", False),  # e.g. Grace; its GPU says for itself if it is unified
        ("Windows", "AMD64", False),
    ],
)
def test_apple_silicon_detection(system: str, machine: str, expected: bool) -> None:
    assert is_apple_silicon(system, machine) is expected


def test_apple_machine_lists_unified_pool_and_ram() -> None:
    nvml = NvmlReader(module=FakeNvml(init_error=12), register_atexit=False)
    ps = FakePsutil(total=36 * GiB, available=20 * GiB)
    devices, status = read_devices(nvml, SystemReader(ps), apple=True)
    unified, ram = devices
    assert (unified.id, unified.kind) == ("unified", "unified")
    assert unified.total_bytes == 36 * GiB and unified.usable_bytes == 27 * GiB
    assert unified.used_bytes == 16 * GiB and unified.free_bytes == 20 * GiB
    assert ram.kind == "system" and ram.usable_bytes == 36 * GiB
    assert not status.available
