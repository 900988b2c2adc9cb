"""Sampler: bounded history, peaks, callback delivery, background thread, no overlap."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from trainmem.devices import NvmlReader, Sampler, Snapshot, SystemReader
from trainmem.devices.fakes import FakeGpu, FakeNvml, FakeProcess, FakePsutil, eight_gpu_machine

MiB = 2**20
Make = Callable[[FakeNvml], NvmlReader]


def sampler_for(gpus: list[FakeGpu], **kw: object) -> Sampler:
    nvml = NvmlReader(module=FakeNvml(gpus), register_atexit=False)
    return Sampler(nvml=nvml, system=SystemReader(FakePsutil()), apple=False, **kw)  # type: ignore[arg-type]


def test_history_is_a_bounded_ring() -> None:
    gpu = FakeGpu()
    s = sampler_for([gpu], history_size=5)
    for i in range(20):
        gpu.used = i * MiB
        s.sample_once()
    hist = s.history("gpu0")
    assert len(hist) == 5
    assert [p.used_bytes for p in hist] == [i * MiB for i in range(15, 20)]
    assert hist == sorted(hist, key=lambda p: p.timestamp)
    assert len(s.history("system")) == 5
    assert s.history("nope") == []
    assert s.device_ids() == ["gpu0", "system"]


def test_peaks_per_device_and_process() -> None:
    gpu = FakeGpu(processes=[FakeProcess(1000, 0)])
    s = sampler_for([gpu])
    for used in (10, 50, 20):
        gpu.used = used * MiB
        gpu.processes[0].used_bytes = used * MiB
        snap = s.sample_once()
    peaks = s.peaks()
    assert peaks.devices["gpu0"] == 50 * MiB
    assert peaks.processes[("gpu0", 1000)] == 50 * MiB
    d = snap.device("gpu0")
    assert d is not None and d.used_bytes == 20 * MiB and d.peak_used_bytes == 50 * MiB
    assert d.processes[0].peak_used_bytes == 50 * MiB
    s.reset_peaks()
    assert s.peaks().devices == {}


def test_process_peaks_are_bounded() -> None:
    gpu = FakeGpu()
    s = sampler_for([gpu], max_tracked_processes=3)
    for pid in range(10):
        gpu.processes = [FakeProcess(pid, MiB)]
        s.sample_once()
    assert sorted(pid for _, pid in s.peaks().processes) == [7, 8, 9]


def test_history_and_peaks_leave_with_their_device() -> None:
    """A cluster whose GPUs come and go (autoscaling; a hostile server naming new ones each
    read): a device no source lists any more takes its history and peak along."""
    from trainmem.devices import DeviceReading

    class Churning:
        name, kind = "cluster", "gpu"
        reads = 0

        def read(self) -> tuple[DeviceReading, ...]:
            self.reads += 1
            return tuple(
                DeviceReading(
                    f"n{self.reads}-{i}/gpu0", "gpu", "H100", 80 * MiB, MiB, 79 * MiB, 80 * MiB
                )
                for i in range(100)
            )

    s = Sampler(extra_sources=(Churning(),), local=False)  # type: ignore[arg-type]
    for _ in range(30):
        snap = s.sample_once()
    assert len(snap.devices) == 100 and all(d.id.startswith("n30-") for d in snap.devices)
    assert len(s.device_ids()) == 100 and len(s.peaks().devices) == 100


def test_callback_gets_every_snapshot_in_order() -> None:
    got: list[Snapshot] = []
    s = sampler_for([FakeGpu()])
    s._callback = got.append
    for _ in range(3):
        s.sample_once()
    assert [snap.seq for snap in got] == [1, 2, 3]
    assert s.latest is got[-1]
    assert got[0].sample_cpu_s is not None and got[0].sample_cpu_s >= 0


def test_background_thread_samples_and_stops() -> None:
    got: list[Snapshot] = []
    enough = threading.Event()

    def on_snapshot(snap: Snapshot) -> None:
        got.append(snap)
        if len(got) >= 3:
            enough.set()

    s = sampler_for([FakeGpu()], interval=0.01)
    s._callback = on_snapshot
    with s:
        assert s.running
        assert enough.wait(5)
    assert not s.running
    n = len(got)
    time.sleep(0.05)
    assert len(got) == n  # nothing after stop
    # The clock and every source's worker have ended.
    assert not [t for t in threading.enumerate() if t.name.startswith("trainmem-sampler")]


def test_callback_error_does_not_stop_sampling(caplog: pytest.LogCaptureFixture) -> None:
    calls: list[int] = []
    enough = threading.Event()

    def bad(snap: Snapshot) -> None:
        calls.append(snap.seq)
        if len(calls) >= 3:
            enough.set()
        raise RuntimeError("UI went away")

    s = sampler_for([FakeGpu()], interval=0.01)
    s._callback = bad
    with s:
        assert enough.wait(5)
    assert "snapshot callback failed" in caplog.text


def test_reader_bug_does_not_end_the_thread(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    s = sampler_for([FakeGpu()], interval=0.01)
    got: list[Snapshot] = []
    s._callback = got.append
    real = s._system.read
    fails = iter([True, True])

    def flaky() -> object:
        if next(fails, False):
            raise TypeError("bug")
        return real()

    monkeypatch.setattr(s._system, "read", flaky)
    with s:
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
    assert got and "device sample failed" in caplog.text


def test_samples_never_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    active = 0
    worst = 0
    lock = threading.Lock()
    s = sampler_for([FakeGpu()], interval=0.001)
    real = s._system.read

    def slow_read() -> object:
        nonlocal active, worst
        with lock:
            active += 1
            worst = max(worst, active)
        time.sleep(0.005)  # longer than the interval
        with lock:
            active -= 1
        return real()

    monkeypatch.setattr(s._system, "read", slow_read)
    with s:
        others = [threading.Thread(target=s.sample_once) for _ in range(4)]
        for t in others:
            t.start()
        for t in others:
            t.join()
        time.sleep(0.03)
    assert worst == 1


def test_eight_gpus_one_sample_reads_all_together(system: SystemReader) -> None:
    nvml = NvmlReader(module=eight_gpu_machine(), register_atexit=False)
    snap = Sampler(nvml=nvml, system=system, apple=False).sample_once()
    assert [d.id for d in snap.devices] == [*(f"gpu{i}" for i in range(8)), "system"]
    pids = [(p.pid, p.name) for p in snap.devices[7].processes]
    assert pids == [(1007, "python"), (999_999, None)]  # a PID from another namespace


@pytest.mark.parametrize("interval", [0, -1, float("nan")])
def test_bad_interval(interval: float) -> None:
    with pytest.raises(ValueError, match="interval"):
        sampler_for([], interval=interval)
