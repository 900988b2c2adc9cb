"""The one place that reads devices repeatedly: background threads, off the UI thread.

    sampler = Sampler(lambda snap: app.post_message(DevicesSampled(snap)), interval=1.0)
    sampler.start()
    ...
    sampler.stop()

Every interval the sampler's clock asks each device source (NVML, system RAM, Apple unified
memory, any extra ones: see ``trainmem.devices.source``) for a reading, each on its own worker
thread, waits at most half an interval for the answers, merges the latest answer of each into a
Snapshot, records a bounded history per device and the peaks since start, and hands the
Snapshot to the callback, on the clock's thread. So a source that hangs (an NVML call stuck for
seconds, a slow network) or raises cannot hold up the others or the callback: its devices keep
their last answer marked ``stale_s``, or become ``unavailable`` with the reason. Reads of one
source never overlap: a source still busy with the last read is not asked again.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from typing import NamedTuple

from trainmem.devices.nvml import NvmlReader, default_reader
from trainmem.devices.snapshot import (
    DeviceReading,
    NvmlStatus,
    ProcessReading,
    Snapshot,
    without_figures,
)
from trainmem.devices.source import (
    AppleSource,
    DeviceSource,
    NvmlSource,
    SourceUnavailable,
    SystemSource,
    merge,
)
from trainmem.devices.system import SystemReader
from trainmem.devices.unified import is_apple_silicon

log = logging.getLogger(__name__)

SnapshotCallback = Callable[[Snapshot], None]

# How long the first snapshot waits for every source's first answer (NVML's first call can
# take seconds on a large node without persistence mode), so that it is normally complete.
FIRST_WAIT_S = 2.0


class HistoryPoint(NamedTuple):
    timestamp: float
    used_bytes: int | None
    utilization_pct: int | None


@dataclasses.dataclass(frozen=True)
class Peaks:
    """Highest used bytes since the sampler started: per device id, and per (device id, pid)."""

    devices: dict[str, int]
    processes: dict[tuple[str, int], int]


def default_sources(
    nvml: NvmlReader | None,
    system: SystemReader,
    *,
    apple: bool | None = None,
    extra: Sequence[DeviceSource] = (),
) -> tuple[NvmlSource, tuple[DeviceSource, ...]]:
    """(the NVML source, every source in listing order): GPUs, the extra sources, Apple
    unified memory, then system RAM, which is always listed."""
    gpus = NvmlSource(nvml if nvml is not None else default_reader(), system)
    sources: list[DeviceSource] = [gpus, *extra]
    if is_apple_silicon() if apple is None else apple:
        sources.append(AppleSource(system))
    sources.append(SystemSource(system))
    return gpus, tuple(sources)


def read_devices(
    nvml: NvmlReader | None = None,
    system: SystemReader | None = None,
    *,
    apple: bool | None = None,
) -> tuple[tuple[DeviceReading, ...], NvmlStatus]:
    """Read every device once: GPUs (unified ones filled in from RAM), Apple unified memory,
    then system RAM, which is always listed. Blocking; call it off the UI thread."""
    system = system if system is not None else SystemReader()
    gpus, sources = default_sources(nvml, system, apple=apple)
    devices = merge([(s, s.read()) for s in sources])
    assert gpus.last_status is not None  # set by its read() above
    return devices, gpus.last_status


class _Latest(NamedTuple):
    readings: tuple[DeviceReading, ...] | None  # the last good answer; None before the first
    answered_at: float | None  # time.monotonic() of the last answer, good or not
    error: str | None  # why the last read raised; None if it did not
    cpu_s: float  # thread CPU time the last read cost


class _SourceState:
    """One source: at most one read in progress (the lock), and its latest answer."""

    def __init__(self, source: DeviceSource) -> None:
        self.source = source
        self.lock = threading.Lock()
        self.latest = _Latest(None, None, None, 0.0)
        self.since = time.monotonic()  # waiting for a first answer since then

    def poll(self) -> None:
        """Read the source now (blocking); a failure is kept as the reason, never raised."""
        with self.lock:
            cpu0 = time.thread_time()
            try:
                readings: tuple[DeviceReading, ...] | None = tuple(self.source.read())
                error = None
            except Exception as err:  # a source's bug or outage must not end monitoring
                readings, error = self.latest.readings, _one_line(self.source.name, err)
                if error != self.latest.error:  # once per new reason, not every interval
                    if isinstance(err, SourceUnavailable):  # explained: no traceback
                        log.info("device source %r unavailable: %s", self.source.name, error)
                    else:
                        log.exception("device sample failed: source %r", self.source.name)
            # One assignment, so readers on other threads see the old answer or the new one.
            self.latest = _Latest(readings, time.monotonic(), error, time.thread_time() - cpu0)

    def view(self, now: float, stale_after: float) -> tuple[DeviceReading, ...]:
        """The latest answer as it should be shown at ``now`` (monotonic)."""
        latest = self.latest
        if latest.error is not None:
            return tuple(
                without_figures(d, latest.error) for d in latest.readings or (self._ghost(),)
            )
        if latest.readings is None or latest.answered_at is None:
            return (dataclasses.replace(self._ghost(), stale_s=now - self.since),)
        age = now - latest.answered_at
        if age <= stale_after:
            return latest.readings
        return tuple(dataclasses.replace(d, stale_s=age) for d in latest.readings)

    def _ghost(self) -> DeviceReading:
        """Stands for the source's devices until it first answers."""
        name = self.source.name
        return without_figures(
            DeviceReading(name, self.source.kind, name, None, None, None, None),
            f"no answer from {name} yet",
        )


def _one_line(name: str, err: BaseException) -> str:
    text = str(err).strip().splitlines()
    if isinstance(err, SourceUnavailable) and text:
        return text[0][:300]
    reason = f"{type(err).__name__}: {text[0]}" if text else type(err).__name__
    return f"{name} failed: {reason[:200]}"


class _Worker:
    """A daemon thread that reads one source each time the sampler's clock kicks it."""

    def __init__(self, state: _SourceState, stop: threading.Event) -> None:
        self.state = state
        self.stop = stop
        self.wake = threading.Event()
        self.idle = threading.Event()
        self.idle.set()
        self.thread = threading.Thread(
            target=self._run, name=f"trainmem-sampler-{state.source.name}", daemon=True
        )

    def kick(self) -> bool:
        """Ask for a read, unless the last one has not returned (reads never overlap).
        Only the clock thread calls this."""
        if not self.idle.is_set():
            return False
        self.idle.clear()
        self.wake.set()
        return True

    def _run(self) -> None:
        while True:
            self.wake.wait()
            self.wake.clear()
            if self.stop.is_set():
                return
            try:
                self.state.poll()
            finally:
                self.idle.set()


# A day: a watch that samples less often is no watch, and a thread's wait refuses a timeout
# past ~9.2e9 s (OverflowError: timestamp out of range) in the sampler's clock.
MAX_INTERVAL = 86_400


class Sampler:
    """Samples all devices every ``interval`` seconds on daemon threads (one per source).

    ``on_snapshot`` runs on the sampler's clock thread: keep it short (post a message, put on a
    queue). An exception in it is logged and sampling continues. ``history_size`` bounds the
    history per device (default one hour at 1 s), so memory stays flat however long it runs.
    ``extra_sources`` (e.g. remote nodes) are listed after the GPUs; with ``local=False``
    they are the only sources (a cluster read from Prometheus already includes this machine if
    it is a node, and a login node's own GPUs are not the question). A source's readings are
    marked stale once it has not answered for ``stale_after`` seconds (two intervals).
    """

    def __init__(
        self,
        on_snapshot: SnapshotCallback | None = None,
        *,
        interval: float = 1.0,
        history_size: int = 3600,
        nvml: NvmlReader | None = None,
        system: SystemReader | None = None,
        apple: bool | None = None,
        max_tracked_processes: int = 4096,
        extra_sources: Sequence[DeviceSource] = (),
        local: bool = True,
    ) -> None:
        if not 0 < interval <= MAX_INTERVAL:
            raise ValueError(
                f"interval must be seconds > 0 and <= {MAX_INTERVAL:,}, not {interval!r}"
            )
        if history_size < 1:
            raise ValueError("history_size must be at least 1")
        self.interval = float(interval)
        self.stale_after = 2 * self.interval
        self._callback = on_snapshot
        self._system = system if system is not None else SystemReader()
        self._gpus, sources = default_sources(nvml, self._system, apple=apple, extra=extra_sources)
        self._nvml = self._gpus.nvml
        self._local = local
        if not local:
            if not extra_sources:
                raise ValueError("local=False needs extra_sources to read")
            sources = tuple(extra_sources)
        names = [s.name for s in sources]
        if len(set(names)) != len(names):
            raise ValueError(f"device sources need distinct names, not {names}")
        self._states = tuple(_SourceState(s) for s in sources)
        self._history_size = history_size
        self._max_processes = max_tracked_processes
        self._data_lock = threading.Lock()  # history, peaks and seq, read from other threads
        self._history: dict[str, deque[HistoryPoint]] = {}
        self._device_peaks: dict[str, int] = {}
        self._process_peaks: OrderedDict[tuple[str, int], int] = OrderedDict()
        self._latest: Snapshot | None = None
        self._seq = 0
        # Per start(): a worker stuck in read() past stop() keeps its own (set) event and
        # ends when the read returns, whatever later starts do.
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._workers: list[_Worker] = []

    @property
    def sources(self) -> tuple[DeviceSource, ...]:
        return tuple(state.source for state in self._states)

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start sampling in the background (the first sample is taken at once)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop = stop = threading.Event()
        now = time.monotonic()
        for state in self._states:
            if state.latest.readings is None:
                state.since = now  # "no answer for N s" counts from this start
        self._workers = [_Worker(state, stop) for state in self._states]
        for w in self._workers:
            w.thread.start()
        self._thread = threading.Thread(
            target=self._run, args=(stop, self._workers), name="trainmem-sampler", daemon=True
        )
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop, waiting up to ``timeout`` in all for the threads to end. A source stuck in
        read() is left to finish on its daemon thread (its answer is kept, as any other)."""
        self._stop.set()
        # Those still reading are joined last, so a stuck one cannot use up the time of the
        # ones that end at once.
        workers = sorted(self._workers, key=lambda w: not w.idle.is_set())
        for w in workers:
            w.wake.set()  # let idle workers see the stop
            w.idle.set()  # let the clock stop waiting for answers
        deadline = None if timeout is None else time.monotonic() + timeout
        for t in (self._thread, *(w.thread for w in workers)):
            if t is not None and t is not threading.current_thread() and t.ident is not None:
                t.join(None if deadline is None else max(0.0, deadline - time.monotonic()))
        self._thread = None
        self._workers = []

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self, stop: threading.Event, workers: list[_Worker]) -> None:
        next_due = time.monotonic()
        wait = max(FIRST_WAIT_S, self.interval / 2)
        while not stop.is_set():
            # Only sources that are idle are asked; answers are awaited for a bounded time,
            # then the snapshot goes out with whatever each source last said.
            kicked = [w for w in workers if w.kick()]
            deadline = time.monotonic() + wait
            for w in kicked:
                w.idle.wait(max(0.0, deadline - time.monotonic()))
            if stop.is_set():
                break
            try:
                self._publish()
            except Exception:  # a bug here must not end monitoring
                log.exception("device sample failed")
            wait = self.interval / 2
            next_due += self.interval
            now = time.monotonic()
            if next_due < now:  # fell behind: start the next one now, no catch-up burst
                next_due = now
            stop.wait(next_due - now)

    # -- sampling ----------------------------------------------------------------------------

    def sample_once(self) -> Snapshot:
        """Read every source now, one after another (blocking: a stuck source blocks this
        call), record history and peaks, call the callback, return the Snapshot."""
        for state in self._states:
            state.poll()
        return self._publish()

    def _publish(self) -> Snapshot:
        """Merge the latest answer of each source into a Snapshot, record it, hand it on."""
        cpu0 = time.thread_time()
        now_mono = time.monotonic()
        devices = merge([(st.source, st.view(now_mono, self.stale_after)) for st in self._states])
        status = self._gpus.last_status or NvmlStatus(
            False, "waiting for NVML to answer" if self._local else "not read: remote devices only"
        )
        now = time.time()
        with self._data_lock:
            self._seq += 1
            devices = tuple(self._record(d, now) for d in devices)
            # A device no source lists any more (a source keeps a failed one's readings,
            # and Prometheus's gone devices for forget_after_s) takes its history along, so
            # a cluster whose GPUs come and go does not grow this without end.
            listed = {d.id for d in devices}
            for gone in [i for i in self._history if i not in listed]:
                del self._history[gone]
                self._device_peaks.pop(gone, None)
            snap = Snapshot(
                timestamp=now,
                devices=devices,
                nvml=status,
                seq=self._seq,
                # This thread's merge plus each source's latest read, wherever it ran.
                sample_cpu_s=time.thread_time()
                - cpu0
                + sum(st.latest.cpu_s for st in self._states),
            )
            self._latest = snap
        if self._callback is not None:
            try:
                self._callback(snap)
            except Exception:
                log.exception("snapshot callback failed")
        return snap

    def _record(self, d: DeviceReading, now: float) -> DeviceReading:
        """Add to history and peaks (caller holds the data lock); return d with its peaks."""
        hist = self._history.get(d.id)
        if hist is None:
            hist = self._history[d.id] = deque(maxlen=self._history_size)
        hist.append(HistoryPoint(now, d.used_bytes, d.utilization_pct))
        peak = self._device_peaks.get(d.id)
        if d.used_bytes is not None and (peak is None or d.used_bytes > peak):
            peak = self._device_peaks[d.id] = d.used_bytes
        # Built directly rather than with dataclasses.replace, which costs twice as much.
        procs = tuple(
            ProcessReading(
                p.pid,
                p.used_bytes,
                p.name,
                p.user,
                p.cmdline,
                p.unavailable,
                p.gpu_instance_id,
                self._process_peak(d.id, p.pid, p.used_bytes),
            )
            for p in d.processes
        )
        return dataclasses.replace(d, peak_used_bytes=peak, processes=procs)

    def _process_peak(self, device_id: str, pid: int, used: int | None) -> int | None:
        key = (device_id, pid)
        peak = self._process_peaks.get(key)
        if used is not None and (peak is None or used > peak):
            peak = used
        if peak is None:
            return None
        self._process_peaks[key] = peak
        self._process_peaks.move_to_end(key)
        # Bounded so that hours of short-lived processes cannot grow memory: forget the ones
        # not seen for longest.
        while len(self._process_peaks) > self._max_processes:
            self._process_peaks.popitem(last=False)
        return peak

    # -- reading results (any thread) --------------------------------------------------------

    @property
    def latest(self) -> Snapshot | None:
        return self._latest

    def history(self, device_id: str) -> list[HistoryPoint]:
        """Oldest first, at most ``history_size`` points."""
        with self._data_lock:
            return list(self._history.get(device_id, ()))

    def device_ids(self) -> list[str]:
        with self._data_lock:
            return list(self._history)

    def peaks(self) -> Peaks:
        with self._data_lock:
            return Peaks(dict(self._device_peaks), dict(self._process_peaks))

    def reset_peaks(self) -> None:
        """Forget peaks (e.g. when a new run starts); history is kept."""
        with self._data_lock:
            self._device_peaks.clear()
            self._process_peaks.clear()
