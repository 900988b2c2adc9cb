"""The real NVML path, on a machine with an NVIDIA GPU and driver (skipped elsewhere)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from trainmem.devices import NvmlReader, Sampler, SystemReader, parse_device_spec

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def reader() -> Iterator[NvmlReader]:
    reader = NvmlReader(register_atexit=False)
    status = reader.status()
    if not status.available or status.reason:
        pytest.skip(f"NVML not usable here: {status.reason}")
    yield reader
    reader.close()


def test_real_status(reader: NvmlReader) -> None:
    status = reader.status()
    assert status.driver_version and status.nvml_version
    assert (status.binding or "").startswith("nvidia-ml-py")


def test_real_gpus_read(reader: NvmlReader) -> None:
    gpus = reader.read()
    assert gpus
    for d in gpus:
        assert d.unavailable is None, d.unavailable
        assert d.name and d.uuid
        if d.kind == "gpu":
            assert d.total_bytes and d.used_bytes is not None and d.free_bytes is not None
            assert d.used_bytes + d.free_bytes == d.total_bytes
        else:  # a unified-memory GPU: NVML has no memory figures for it
            assert d.kind == "unified" and d.total_bytes is None


def test_real_sampler_and_json(reader: NvmlReader) -> None:
    sampler = Sampler(nvml=reader, system=SystemReader())
    snaps = [sampler.sample_once() for _ in range(3)]
    data = json.loads(json.dumps(snaps[-1].to_json()))
    assert data["nvml"]["available"] is True
    assert [d["kind"] for d in data["devices"]].count("system") == 1
    assert all(d["usable_bytes"] for d in data["devices"] if d["unavailable"] is None)
    assert snaps[-1].sample_cpu_s is not None and snaps[-1].sample_cpu_s < 0.5


def test_real_auto(reader: NvmlReader) -> None:
    targets = parse_device_spec("auto", nvml=reader, system=SystemReader())
    assert targets and all(t.kind in ("gpu", "unified") for t in targets)
