"""The one place that reads devices repeatedly: a background thread, off the UI thread.

    sampler = Sampler(lambda snap: app.post_message(DevicesSampled(snap)), interval=1.0)
    sampler.start()
    ...
    sampler.stop()

Each sample reads every device once (one device's readings taken together), records a bounded
history per device and the peaks since start, and hands the Snapshot to the callback, on the
sampler's thread. Samples never overlap: if one takes longer than the interval, the next starts
when it ends rather than in a burst to catch up.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import NamedTuple

from trainmem.devices.nvml import NvmlReader, default_reader
from trainmem.devices.snapshot import DeviceReading, NvmlStatus, ProcessReading, Snapshot
from trainmem.devices.system import SystemReader
from trainmem.devices.unified import apple_device, as_unified, is_apple_silicon

log = logging.getLogger(__name__)

SnapshotCallback = Callable[[Snapshot], None]


class HistoryPoint(NamedTuple):
    timestamp: float
    used_bytes: int | None
    utilization_pct: int | None


@dataclasses.dataclass(frozen=True)
class Peaks:
    """Highest used bytes since the sampler started: per device id, and per (device id, pid)."""

    devices: dict[str, int]
    processes: dict[tuple[str, int], int]


def read_devices(
    nvml: NvmlReader | None = None,
    system: SystemReader | None = None,
    *,
    apple: bool | None = None,
) -> tuple[tuple[DeviceReading, ...], NvmlStatus]:
    """Read every device once: GPUs (unified ones filled in from RAM), Apple unified memory,
    then system RAM, which is always listed. Blocking; call it off the UI thread."""
    nvml = nvml if nvml is not None else default_reader()
    system = system if system is not None else SystemReader()
    status = nvml.status()
    gpus = nvml.read()
    ram = system.read()
    devices: list[DeviceReading] = []
    seen: set[int] = set()
    for gpu in gpus:
        if gpu.kind == "unified":
            gpu = as_unified(gpu, ram)
        if gpu.processes:
            procs = []
            for p in gpu.processes:
                seen.add(p.pid)
                info = system.process(p.pid)
                procs.append(
                    ProcessReading(
                        pid=p.pid,
                        used_bytes=p.used_bytes,
                        name=info.name,
                        user=info.user,
                        cmdline=info.cmdline,
                        unavailable=info.unavailable,
                        gpu_instance_id=p.gpu_instance_id,
                    )
                )
            gpu = dataclasses.replace(gpu, processes=tuple(procs))
        devices.append(gpu)
    system.forget_except(seen)
    if is_apple_silicon() if apple is None else apple:
        devices.append(apple_device(ram))
    devices.append(ram)
    return tuple(devices), status


class Sampler:
    """Samples all devices every ``interval`` seconds on a daemon thread.

    ``on_snapshot`` runs on the sampler's thread: keep it short (post a message, put on a
    queue). An exception in it is logged and sampling continues. ``history_size`` bounds the
    history per device (default one hour at 1 s), so memory stays flat however long it runs.
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
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be a number of seconds > 0, not {interval!r}")
        if history_size < 1:
            raise ValueError("history_size must be at least 1")
        self.interval = float(interval)
        self._callback = on_snapshot
        self._nvml = nvml if nvml is not None else default_reader()
        self._system = system if system is not None else SystemReader()
        self._apple = apple
        self._history_size = history_size
        self._max_processes = max_tracked_processes
        self._sample_lock = threading.Lock()  # one sample at a time, whoever asks
        self._data_lock = threading.Lock()  # history and peaks, read from other threads
        self._history: dict[str, deque[HistoryPoint]] = {}
        self._device_peaks: dict[str, int] = {}
        self._process_peaks: OrderedDict[tuple[str, int], int] = OrderedDict()
        self._latest: Snapshot | None = None
        self._seq = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start sampling in the background (the first sample is taken at once)."""
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="trainmem-sampler", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop and wait for a sample in progress to finish."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _run(self) -> None:
        next_due = time.monotonic()
        while not self._stop.is_set():
            try:
                self.sample_once()
            except Exception:  # a reader bug must not end monitoring
                log.exception("device sample failed")
            next_due += self.interval
            now = time.monotonic()
            if next_due < now:  # fell behind: start the next one now, no catch-up burst
                next_due = now
            self._stop.wait(next_due - now)

    # -- sampling ----------------------------------------------------------------------------

    def sample_once(self) -> Snapshot:
        """Read all devices now, record history and peaks, call the callback, return it."""
        with self._sample_lock:
            cpu0 = time.process_time()
            devices, status = read_devices(self._nvml, self._system, apple=self._apple)
            now = time.time()
            with self._data_lock:
                self._seq += 1
                devices = tuple(self._record(d, now) for d in devices)
                snap = Snapshot(
                    timestamp=now,
                    devices=devices,
                    nvml=status,
                    seq=self._seq,
                    sample_cpu_s=time.process_time() - cpu0,
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
