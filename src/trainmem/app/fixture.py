"""A deterministic machine for tests, screenshots and the bench: two RTX 4090s and 64 GiB RAM.

GPU 0 holds a notebook kernel and the desktop; GPU 1 runs a training job. Readings go through
the devices layer's real read path (``read_devices`` over its NVML and psutil fakes), so the
dashboard sees exactly what it would on such a machine; only the clock and history are made up.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

from trainmem.core.plan import Plan
from trainmem.devices.fakes import FakeGpu, FakeNvml, FakeProc, FakeProcess, FakePsutil
from trainmem.devices.nvml import NvmlReader
from trainmem.devices.sampler import HistoryPoint, Peaks, SnapshotCallback, read_devices
from trainmem.devices.snapshot import Snapshot
from trainmem.devices.system import SystemReader
from trainmem.sources.plan_files import NamedPlan, PlanSet

MiB = 2**20
GiB = 2**30
T0 = 1_700_000_000.0
HISTORY_POINTS = 120
TRAIN_PID = 4242


def demo_snapshot(
    *, train_used: int = 20_300 * MiB, seq: int = 1, gpu1_total: int = 24_564 * MiB
) -> Snapshot:
    """One reading of the demo machine; ``train_used`` is the training job's memory on GPU 1."""
    nvml = FakeNvml(
        [
            FakeGpu(
                name="NVIDIA GeForce RTX 4090",
                uuid="GPU-4090-0",
                total=24_564 * MiB,
                used=3_390 * MiB,
                utilization=(3, 1),
                temperature=41,
                power_mw=38_000,
                processes=[FakeProcess(2817, 2_980 * MiB), FakeProcess(1830, 410 * MiB)],
            ),
            FakeGpu(
                name="NVIDIA GeForce RTX 4090",
                uuid="GPU-4090-1",
                total=gpu1_total,
                used=train_used + 260 * MiB,
                utilization=(97, 61),
                temperature=68,
                power_mw=402_000,
                processes=[FakeProcess(TRAIN_PID, train_used)],
            ),
        ]
    )
    psutil = FakePsutil(
        total=64 * GiB,
        available=42 * GiB + 512 * MiB,
        processes={
            2817: FakeProc("python", "bob", ("python", "-m", "ipykernel_launcher")),
            1830: FakeProc("Xorg", "root", ("/usr/lib/xorg/Xorg", ":0")),
            TRAIN_PID: FakeProc("python", "alice", ("python", "train.py", "--config", "qwen.yaml")),
        },
    )
    devices, status = read_devices(
        NvmlReader(module=nvml, register_atexit=False), SystemReader(psutil), apple=False
    )
    return Snapshot(timestamp=T0 + seq, devices=devices, nvml=status, seq=seq)


def _demo_history() -> dict[str, list[HistoryPoint]]:
    """Two minutes at 1 Hz: the training job loading its model, then stepping."""
    hist: dict[str, list[HistoryPoint]] = {"gpu0": [], "gpu1": [], "system": []}
    for i in range(HISTORY_POINTS):
        t = T0 - HISTORY_POINTS + i
        ramp = min(1.0, i / 40)
        step = 0.04 * math.sin(i / 2.0) if i > 40 else 0.0
        hist["gpu0"].append(HistoryPoint(t, int((3_300 + 90 * math.sin(i / 9)) * MiB), 2))
        hist["gpu1"].append(HistoryPoint(t, int(20_560 * MiB * (0.05 + 0.95 * ramp + step)), 90))
        hist["system"].append(HistoryPoint(t, int((20 + 2.5 * ramp) * GiB), None))
    return hist


class ReplaySampler:
    """Stands in for ``trainmem.devices.Sampler``: delivers fixed snapshots, no thread.

    ``start()`` hands over the first snapshot at once; ``push()`` delivers another (tests use it
    to drive monitoring). History and peaks follow what was delivered.
    """

    def __init__(self, callback: SnapshotCallback, snapshots: list[Snapshot]) -> None:
        self.interval = 1.0
        self._callback = callback
        self._pending = list(snapshots)
        self._history = _demo_history()
        self._peaks: dict[str, int] = {}
        self.latest: Snapshot | None = None
        self.running = False

    def start(self) -> None:
        self.running = True
        if self._pending:
            self.push(self._pending.pop(0))

    def stop(self, timeout: float | None = None) -> None:
        self.running = False

    def push(self, snapshot: Snapshot) -> None:
        devices = []
        for d in snapshot.devices:
            hist = self._history.setdefault(d.id, [])
            hist.append(HistoryPoint(snapshot.timestamp, d.used_bytes, d.utilization_pct))
            peak = max((p.used_bytes or 0 for p in hist), default=0)
            self._peaks[d.id] = peak
            procs = tuple(
                dataclasses.replace(p, peak_used_bytes=max(p.used_bytes or 0, 21_400 * MiB))
                if p.pid == TRAIN_PID
                else dataclasses.replace(p, peak_used_bytes=p.used_bytes)
                for p in d.processes
            )
            devices.append(dataclasses.replace(d, peak_used_bytes=peak, processes=procs))
        self.latest = dataclasses.replace(snapshot, devices=tuple(devices))
        self._callback(self.latest)

    def history(self, device_id: str) -> list[HistoryPoint]:
        return list(self._history.get(device_id, ()))

    def peaks(self) -> Peaks:
        return Peaks(dict(self._peaks), {})

    def reset_peaks(self) -> None:
        self._peaks.clear()


def demo_sampler_factory(
    snapshots: list[Snapshot] | None = None,
) -> Callable[[SnapshotCallback, float], ReplaySampler]:
    """A ``sampler_factory`` for ``make_app`` that replays the demo machine."""

    def factory(callback: SnapshotCallback, interval: float) -> ReplaySampler:
        return ReplaySampler(callback, list(snapshots) if snapshots else [demo_snapshot()])

    return factory


def demo_plan_set() -> PlanSet:
    """Four plans to compare on the demo machine; the selected one is the job on GPU 1. All
    but the last carry default names (what distinguishes them); the last was renamed."""
    return PlanSet(
        (
            NamedPlan("", Plan(), auto=True),
            NamedPlan("", Plan(batch=1), auto=True),
            NamedPlan("", Plan(method="qlora", seq_len=4096, lora_rank=64), auto=True),
            NamedPlan(
                "3B baseline",
                Plan(model="Qwen/Qwen2.5-3B", method="full", seq_len=1024, batch=4),
            ),
        ),
        selected=1,
    )
