"""The stable JSON of `devices --json`: keys and kinds scripts rely on."""

from __future__ import annotations

import json
from typing import Any

from trainmem.devices import NvmlReader, Sampler, SystemReader
from trainmem.devices.fakes import FakeGpu, FakeNvml, FakePsutil, eight_gpu_machine

DEVICE_KEYS = {
    "id",
    "kind",
    "name",
    "total_bytes",
    "used_bytes",
    "free_bytes",
    "usable_bytes",
    "processes",
    "unavailable",
}
NVML_KEYS = {"available", "reason", "driver_version"}


def snapshot_json(fake: FakeNvml, apple: bool = False) -> dict[str, Any]:
    nvml = NvmlReader(module=fake, register_atexit=False)
    snap = Sampler(nvml=nvml, system=SystemReader(FakePsutil()), apple=apple).sample_once()
    data = snap.to_json()
    assert json.loads(json.dumps(data)) == data  # plain JSON types only
    return data


def test_contract_on_a_gpu_machine() -> None:
    data = snapshot_json(eight_gpu_machine())
    devices = data["devices"]
    assert isinstance(devices, list) and len(devices) == 9
    for d in devices:
        assert d.keys() >= DEVICE_KEYS
        assert d["kind"] in ("gpu", "system", "unified")
        assert d["unavailable"] is None
        for key in ("total_bytes", "used_bytes", "free_bytes", "usable_bytes"):
            assert isinstance(d[key], int)
        for p in d["processes"]:
            assert {"pid", "name", "user", "cmdline", "used_bytes"} <= p.keys()
    nvml = data["nvml"]
    assert isinstance(nvml, dict) and nvml.keys() >= NVML_KEYS
    assert nvml["available"] is True and nvml["reason"] is None
    assert nvml["driver_version"] == "550.54.15"


def test_contract_without_nvidia() -> None:
    data = snapshot_json(FakeNvml(init_error=12))
    (system,) = data["devices"]
    assert system["kind"] == "system" and system["total_bytes"] > 0
    assert data["nvml"] == {
        "available": False,
        "reason": "NVML library not found (no NVIDIA driver installed)",
        "driver_version": None,
        "nvml_version": None,
        "binding": "injected module",
    }


def test_unavailable_device_has_a_reason_and_nulls() -> None:
    gpu = FakeGpu(lost=True)
    data = snapshot_json(FakeNvml([gpu]))
    d = data["devices"][0]
    assert d["kind"] == "gpu" and "lost" in d["unavailable"]
    assert d["total_bytes"] is None and d["processes"] == []


def test_field_reasons_are_listed() -> None:
    gpu = FakeGpu()
    gpu.fail["nvmlDeviceGetPowerUsage"] = 3
    d = snapshot_json(FakeNvml([gpu]))["devices"][0]
    assert d["power_w"] is None and d["unavailable_fields"] == {"power": "not supported"}
