"""Device sources: the protocol, and a sampler that a stuck or failing source cannot stall."""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from trainmem.devices import DeviceReading, NvmlReader, Sampler, Snapshot, SystemReader
from trainmem.devices import sampler as sampler_module
from trainmem.devices.fakes import FakeGpu, FakeNvml, FakeProc, FakeProcess, FakePsutil
from trainmem.devices.source import AppleSource, DeviceSource, NvmlSource, SystemSource, merge

MiB = 2**20
GiB = 2**30
LIVENESS_S = 10.0  # generous: only for "it happens at all", never for speed


class FakeSource:
    """A remote node, say. ``hold()`` makes the next read() block until ``release()``;
    ``error`` makes read() raise it."""

    kind = "gpu"

    def __init__(self, name: str = "remote", used: int = 0) -> None:
        self.name = name
        self.used = used
        self.error: Exception | None = None
        self.reads = 0
        self.entered = threading.Event()
        self._go = threading.Event()
        self._go.set()

    def hold(self) -> None:
        self.entered.clear()
        self._go.clear()

    def release(self) -> None:
        self._go.set()

    def read(self) -> tuple[DeviceReading, ...]:
        self.reads += 1
        if not self._go.is_set():
            self.entered.set()
            self._go.wait(60)
        if self.error is not None:
            raise self.error
        return (
            DeviceReading(self.name, "gpu", "Remote GPU", GiB, self.used, GiB - self.used, GiB),
        )


class Snaps:
    """Collects snapshots from the sampler's thread; ``wait_for`` returns the first new one
    that satisfies a condition."""

    def __init__(self) -> None:
        self.all: list[Snapshot] = []
        self._cond = threading.Condition()

    def __call__(self, snap: Snapshot) -> None:
        with self._cond:
            self.all.append(snap)
            self._cond.notify_all()

    def wait_for(self, pred: Callable[[Snapshot], bool]) -> Snapshot:
        start = len(self.all)
        deadline = time.monotonic() + LIVENESS_S
        with self._cond:
            while True:
                for snap in self.all[start:]:
                    if pred(snap):
                        return snap
                start = len(self.all)
                left = deadline - time.monotonic()
                if left <= 0:
                    last = self.all[-1] if self.all else None
                    pytest.fail(f"no such snapshot within {LIVENESS_S} s; last: {last}")
                self._cond.wait(left)


def dev(snap: Snapshot, device_id: str) -> DeviceReading:
    d = snap.device(device_id)
    assert d is not None, [x.id for x in snap.devices]
    return d


@pytest.fixture
def gpu() -> FakeGpu:
    return FakeGpu(used=10 * MiB)


@pytest.fixture
def nvml(gpu: FakeGpu) -> NvmlReader:
    return NvmlReader(module=FakeNvml([gpu]), register_atexit=False)


@pytest.fixture
def remote() -> Iterator[FakeSource]:
    source = FakeSource(used=5 * MiB)
    yield source
    source.release()  # never leave a worker blocked past the test


def make(nvml: NvmlReader, *extra: DeviceSource, snaps: Snaps | None = None) -> Sampler:
    return Sampler(
        snaps,
        interval=0.02,
        nvml=nvml,
        system=SystemReader(FakePsutil()),
        apple=False,
        extra_sources=extra,
    )


# -- the protocol ------------------------------------------------------------------------------


def test_each_real_reader_is_a_source(nvml: NvmlReader) -> None:
    ps = FakePsutil(processes={1000: FakeProc()})
    system = SystemReader(ps)
    gpu_reader = NvmlReader(
        module=FakeNvml([FakeGpu(processes=[FakeProcess(1000, MiB)])]), register_atexit=False
    )
    sources: list[DeviceSource] = [
        NvmlSource(gpu_reader, system),
        SystemSource(system),
        AppleSource(system),
        FakeSource(),
    ]
    for source in sources:
        assert isinstance(source, DeviceSource)
        readings = source.read()
        assert isinstance(readings, tuple) and readings
        assert all(isinstance(d, DeviceReading) for d in readings)
    gpus, ram, apple, _ = (s.read() for s in sources)
    assert gpus[0].processes[0].name == "python"  # process joined with the OS's view
    assert ram[0].id == "system" and apple[0].id == "unified" and apple[0].kind == "unified"
    sampler = Sampler(nvml=nvml, system=system, apple=True, extra_sources=[FakeSource()])
    assert [s.name for s in sampler.sources] == ["nvml", "remote", "unified", "system"]


def test_duplicate_source_names_are_refused(nvml: NvmlReader) -> None:
    with pytest.raises(ValueError, match="distinct names"):
        make(nvml, FakeSource("system"))


def test_unified_gpu_takes_ram_and_its_staleness() -> None:
    nvml = NvmlReader(
        module=FakeNvml([FakeGpu(name="NVIDIA GB10", total=0, used=0)]), register_atexit=False
    )
    system = SystemReader(FakePsutil())
    gpus, ram = NvmlSource(nvml, system), SystemSource(system)
    (stale_ram,) = ram.read()
    stale_ram = dataclasses.replace(stale_ram, stale_s=3.0)
    gb10, _ = merge([(gpus, gpus.read()), (ram, (stale_ram,))])
    assert gb10.kind == "unified" and gb10.total_bytes == 64 * GiB
    assert gb10.stale_s == 3.0


# -- a stuck or failing source -----------------------------------------------------------------


def test_stuck_source_goes_stale_others_keep_reporting_then_it_recovers(
    gpu: FakeGpu, nvml: NvmlReader, remote: FakeSource
) -> None:
    snaps = Snaps()
    with make(nvml, remote, snaps=snaps) as s:
        first = snaps.wait_for(lambda snap: snap.device("remote") is not None)
        assert dev(first, "remote").stale_s is None and dev(first, "remote").used_bytes == 5 * MiB
        remote.hold()
        assert remote.entered.wait(LIVENESS_S)
        reads_when_stuck = remote.reads
        gpu.used = 123 * MiB  # the GPU keeps reporting while the remote read hangs
        snap = snaps.wait_for(
            lambda snap: (
                dev(snap, "gpu0").used_bytes == 123 * MiB
                and dev(snap, "remote").stale_s is not None
            )
        )
        stuck = dev(snap, "remote")
        assert stuck.used_bytes == 5 * MiB and stuck.unavailable is None  # its last answer
        assert stuck.stale_s is not None and stuck.stale_s > s.stale_after
        assert dev(snap, "system").total_bytes == 64 * GiB
        # Snapshots keep coming while it is stuck, and it is not asked again meanwhile.
        snaps.wait_for(lambda later: later.seq >= snap.seq + 5)
        assert remote.reads == reads_when_stuck
        remote.used = 7 * MiB
        remote.release()
        back = snaps.wait_for(lambda snap: dev(snap, "remote").used_bytes == 7 * MiB)
        assert dev(back, "remote").stale_s is None
    seqs = [snap.seq for snap in snaps.all]
    assert seqs == sorted(seqs)


def test_stop_returns_while_a_source_is_stuck(nvml: NvmlReader, remote: FakeSource) -> None:
    s = make(nvml, remote)
    s.start()
    remote.hold()
    assert remote.entered.wait(LIVENESS_S)
    t0 = time.monotonic()
    s.stop(timeout=0.5)
    assert time.monotonic() - t0 < LIVENESS_S  # not the 60 s the read would hang
    assert not s.running
    alive = [t.name for t in threading.enumerate() if t.name.startswith("trainmem-sampler")]
    assert alive == ["trainmem-sampler-remote"]  # only the stuck one, a daemon thread
    remote.release()
    deadline = time.monotonic() + LIVENESS_S
    while any(t.name.startswith("trainmem-sampler") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the released worker did not end"
        time.sleep(0.01)


def test_restart_after_a_stuck_stop_does_not_overlap_reads(
    nvml: NvmlReader, remote: FakeSource, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sampler_module, "FIRST_WAIT_S", 0.0)  # do not wait for the stuck one
    active, worst = 0, 0
    lock = threading.Lock()
    real = remote.read

    def counted() -> tuple[DeviceReading, ...]:
        nonlocal active, worst
        with lock:
            active += 1
            worst = max(worst, active)
        try:
            return real()
        finally:
            with lock:
                active -= 1

    remote.read = counted  # type: ignore[method-assign]
    snaps = Snaps()
    s = make(nvml, remote, snaps=snaps)
    s.start()
    remote.hold()
    assert remote.entered.wait(LIVENESS_S)
    s.stop(timeout=0.1)
    remote.used = 9 * MiB
    with s:  # the new worker waits for the old read rather than starting a second one
        snaps.wait_for(lambda snap: dev(snap, "gpu0").used_bytes is not None)
        remote.release()
        snaps.wait_for(lambda snap: dev(snap, "remote").used_bytes == 9 * MiB)
    assert worst == 1


def test_failing_source_is_unavailable_with_a_reason_then_recovers(
    nvml: NvmlReader, remote: FakeSource, caplog: pytest.LogCaptureFixture
) -> None:
    snaps = Snaps()
    with make(nvml, remote, snaps=snaps):
        snaps.wait_for(lambda snap: dev(snap, "remote").used_bytes == 5 * MiB)
        remote.error = ConnectionError("connection refused\nand a traceback-ish second line")
        snap = snaps.wait_for(lambda snap: dev(snap, "remote").unavailable is not None)
        broken = dev(snap, "remote")
        assert broken.unavailable == "remote failed: ConnectionError: connection refused"
        assert broken.name == "Remote GPU" and broken.used_bytes is None  # same device, no data
        assert dev(snap, "gpu0").used_bytes == 10 * MiB
        later = snaps.wait_for(lambda later: later.seq >= snap.seq + 3)
        assert dev(later, "remote").unavailable is not None
        remote.error = None
        snaps.wait_for(lambda snap: dev(snap, "remote").unavailable is None)
    failures = [r for r in caplog.records if "device sample failed" in r.getMessage()]
    assert len(failures) == 1  # logged once per new reason, not every interval


def test_source_failing_from_the_start_still_shows(nvml: NvmlReader) -> None:
    broken = FakeSource()
    broken.error = OSError("no route to host")
    snap = make(nvml, broken).sample_once()
    d = dev(snap, "remote")
    assert d.kind == "gpu" and d.unavailable == "remote failed: OSError: no route to host"
    assert dev(snap, "gpu0").unavailable is None and dev(snap, "system").unavailable is None


def test_nvml_stuck_at_start_does_not_hide_ram(
    gpu: FakeGpu, nvml: NvmlReader, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sampler_module, "FIRST_WAIT_S", 0.0)  # do not wait for NVML's answer
    go = threading.Event()
    real = nvml.status

    def slow_init() -> object:
        go.wait(60)  # nvmlInit hanging in the driver
        return real()

    monkeypatch.setattr(nvml, "status", slow_init)
    snaps = Snaps()
    try:
        with make(nvml, snaps=snaps):
            snap = snaps.wait_for(lambda snap: snap.device("nvml") is not None)
            ghost = dev(snap, "nvml")
            assert ghost.unavailable == "no answer from nvml yet" and ghost.kind == "gpu"
            assert snap.nvml.available is False and "waiting" in (snap.nvml.reason or "")
            assert dev(snap, "system").total_bytes == 64 * GiB
            go.set()
            snap = snaps.wait_for(lambda snap: snap.device("gpu0") is not None)
            assert snap.nvml.available and snap.device("nvml") is None
    finally:
        go.set()


def test_sample_once_reports_a_failure_without_raising(
    nvml: NvmlReader, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR)
    remote = FakeSource()
    s = make(nvml, remote)
    assert dev(s.sample_once(), "remote").unavailable is None
    remote.error = RuntimeError("")
    assert dev(s.sample_once(), "remote").unavailable == "remote failed: RuntimeError"
    assert [h.used_bytes for h in s.history("remote")] == [0, None]
