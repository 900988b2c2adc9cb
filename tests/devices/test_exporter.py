"""`devices --serve`: this machine's samples as Prometheus metrics (127.0.0.1 only)."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

import trainmem
from trainmem.cli.devices_cmd import serve_address
from trainmem.devices import NvmlReader, SystemReader, read_devices
from trainmem.devices.exporter import Exporter, PlanPeak
from trainmem.devices.fakes import FakeGpu, FakeNvml, FakePsutil
from trainmem.devices.snapshot import Snapshot

MiB = 2**20

# `devices --serve` with the NVML and psutil test doubles injected, as a real process. NVML's
# first call takes half a second, as on a large node without persistence mode: long enough
# for a scrape to come first if the exporter listened before its first sample.
SERVE_SCRIPT = """
import functools, sys, time
from trainmem.cli import devices_cmd
from trainmem.cli.main import main
from trainmem.devices import NvmlReader, Sampler, SystemReader
from trainmem.devices.fakes import FakeGpu, FakeNvml, FakePsutil
MiB = 2**20
class SlowNvml(FakeNvml):
    def nvmlInit(self):
        time.sleep(0.5)
        super().nvmlInit()
nvml = SlowNvml([FakeGpu(name="NVIDIA H100 80GB HBM3", used=30_000 * MiB),
                 FakeGpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-1", used=1_000 * MiB)])
devices_cmd.Sampler = functools.partial(
    Sampler, nvml=NvmlReader(module=nvml, register_atexit=False),
    system=SystemReader(FakePsutil(total=64 * 2**30, available=48 * 2**30)), apple=False)
raise SystemExit(main(["devices", "--serve", *sys.argv[1:]]))
"""


def metrics(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=5) as r:
        text = r.read().decode()
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def one_gpu_snapshot() -> Snapshot:
    nvml = FakeNvml([FakeGpu(used=10_000 * MiB)])
    devices, status = read_devices(
        NvmlReader(module=nvml, register_atexit=False),
        SystemReader(FakePsutil(total=32 * 2**30, available=16 * 2**30)),
        apple=False,
    )
    return Snapshot(timestamp=1_700_000_000.0, devices=devices, nvml=status, seq=1)


def test_metric_names_and_values() -> None:
    snap = one_gpu_snapshot()
    exporter = Exporter(lambda: snap, plan=PlanPeak("Qwen/Qwen2.5-7B", "lora", 21_000_000_000))
    try:
        assert exporter.host == "127.0.0.1" and exporter.port > 0
        m = metrics(exporter.url)
    finally:
        exporter.close()
    gpu = (("device", "gpu0"), ("kind", "gpu"), ("name", "NVIDIA H100 80GB HBM3"))
    ram = (("device", "system"), ("kind", "system"), ("name", "System RAM"))
    assert m["trainmem_device_used_bytes"][gpu] == 10_000 * MiB
    assert m["trainmem_device_total_bytes"][gpu] == 81_559 * MiB
    assert m["trainmem_device_free_bytes"][ram] == 16 * 2**30
    assert m["trainmem_device_usable_bytes"][ram] == 32 * 2**30
    assert m["trainmem_device_up"][gpu] == 1.0 and m["trainmem_device_stale_seconds"][gpu] == 0
    assert m["trainmem_sample_timestamp_seconds"][()] == 1_700_000_000.0
    plan = (("method", "lora"), ("model", "Qwen/Qwen2.5-7B"))
    assert m["trainmem_plan_predicted_peak_bytes"][plan] == 21e9


def test_before_the_first_sample_and_an_unavailable_device() -> None:
    snap: list[Snapshot | None] = [None]
    exporter = Exporter(lambda: snap[0])
    try:
        m = metrics(exporter.url)
        assert "trainmem_sample_timestamp_seconds" not in m
        assert "trainmem_plan_predicted_peak_bytes" not in m
        import dataclasses

        good = one_gpu_snapshot()
        lost = dataclasses.replace(good.devices[0], unavailable="GPU is lost", used_bytes=None)
        snap[0] = dataclasses.replace(good, devices=(lost, good.devices[1]))
        m = metrics(exporter.url)
    finally:
        exporter.close()
    gpu = (("device", "gpu0"), ("kind", "gpu"), ("name", "NVIDIA H100 80GB HBM3"))
    assert m["trainmem_device_up"][gpu] == 0.0
    assert gpu not in m["trainmem_device_total_bytes"]  # left out, never a made-up 0


@pytest.mark.parametrize(
    ("text", "address"),
    [
        ("9400", ("127.0.0.1", 9400)),
        ("0.0.0.0:9400", ("0.0.0.0", 9400)),
        ("[::1]:0", ("::1", 0)),
        ("localhost:1", ("localhost", 1)),
    ],
)
def test_serve_addresses(text: str, address: tuple[str, int]) -> None:
    assert serve_address(text) == address


@pytest.mark.parametrize("bad", ["", "x", ":9400", "1:2:x", "70000", "-1", "٣", "9" * 400])
def test_bad_serve_addresses(bad: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match=r"\[HOST:\]PORT"):
        serve_address(bad)


@pytest.mark.parametrize("host", ["a..b", "-x", "a b", "x" * 64, "\x1b]0;t\x07"])
def test_bind_hosts_that_are_no_host_names(host: str) -> None:
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="is not a valid host name") as err:
        serve_address(f"{host}:9400")
    assert "\x1b" not in str(err.value) and "\n" not in str(err.value)


def start_serving(*argv: str) -> tuple[subprocess.Popen[str], str]:
    """`devices --serve 127.0.0.1:0 ...` with the fakes; returns it and its /metrics URL."""
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(Path(trainmem.__file__).parents[1]),
        "TRAINMEM_STATE_DIR": os.environ.get("TRAINMEM_STATE_DIR", ""),
        "HF_HUB_CACHE": os.environ.get("HF_HUB_CACHE", ""),
        "HF_HUB_OFFLINE": "1",
    }
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE_SCRIPT, "127.0.0.1:0", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stderr is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + 20
    line = ""
    while time.monotonic() < deadline and "serving metrics on" not in line:
        if sel.select(timeout=max(0.0, deadline - time.monotonic())):
            line = proc.stderr.readline()
            if not line:
                break
    sel.close()
    if "serving metrics on" not in line:
        proc.kill()
        raise AssertionError(f"--serve did not start: {line!r} {proc.communicate()}")
    return proc, line.rsplit(" ", 1)[1].strip()


def stop(proc: subprocess.Popen[str]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_serve_in_a_process_until_sigterm_with_a_plan() -> None:
    proc, url = start_serving("--model", "1.5B", "--method", "qlora", "--device", "80GB")
    try:
        assert url.startswith("http://127.0.0.1:") and url.endswith("/metrics")
        # The very first scrape has the figures: the first sample came before listening.
        m = metrics(url)
        assert "trainmem_sample_timestamp_seconds" in m
        used = m["trainmem_device_used_bytes"]
        assert used[(("device", "gpu0"), ("kind", "gpu"), ("name", "NVIDIA H100 80GB HBM3"))] == (
            30_000 * MiB
        )
        assert (
            used[(("device", "system"), ("kind", "system"), ("name", "System RAM"))] == 16 * 2**30
        )
        (peak,) = m["trainmem_plan_predicted_peak_bytes"].items()
        assert peak[0] == (("method", "qlora"), ("model", "1.5B")) and peak[1] > 1e9
    finally:
        assert stop(proc) == 0


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["devices", "--serve", "9400", "--json"], "it takes no --json"),
        (["devices", "--serve", "9400", "--watch"], "it takes no --watch"),
        (["devices", "--serve", "x"], "is not [HOST:]PORT"),
        (["devices", "--serve", "a..b:9400"], "'a..b' is not a valid host name"),
        (["devices", "--serve", "99999"], "is not [HOST:]PORT"),
    ],
)
def test_serve_refuses(argv: list[str], needle: str, capsys: pytest.CaptureFixture[str]) -> None:
    from trainmem.cli.main import main

    try:
        status = main(argv)
    except SystemExit as exit:  # refused while parsing
        status = int(exit.code or 0)
    assert status == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and "Traceback" not in err
