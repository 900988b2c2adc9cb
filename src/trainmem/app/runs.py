"""What the dashboard polls besides the devices: probe run logs (``--run-log``) compared with
the plan rebuilt from them, and, where no GPU is sampled (unified memory, a CPU), training
processes found through psutil.

Plain Python, no Textual: each poller is called once per interval on the app's polling worker
thread and returns what changed (or None); the app posts it to the UI thread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainmem.devices.processes import TrainingProcess
    from trainmem.planner.run_report import RankReport


@dataclass(frozen=True)
class RunSeen:
    """A run log as last read: its comparison with the plan, or why it cannot be read yet."""

    path: Path
    report: RankReport | None
    error: str | None = None


class RunLogPoller:
    """Tails one probe log (trainmem.sources.run_logs.RunLogTail): reads only what was
    appended, and rebuilds the comparison only when a step was added."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path).expanduser()
        self._tail: Any = None  # made on the polling thread: it touches the disk
        self._seen: tuple[int, bool] | None = None
        self._error: str | None = None

    def __call__(self) -> RunSeen | None:
        from trainmem.planner.run_report import rank_report
        from trainmem.sources.run_logs import RunLogTail

        try:
            if self._tail is None:
                self._tail = RunLogTail(self.path)
            log = self._tail.poll()
            state = (len(log.steps), log.ended)
            if state == self._seen:
                return None
            report = rank_report(log, _calibrations())
        except ValueError as exc:  # not written yet, a broken record, an unknown model
            if str(exc) == self._error:
                return None
            self._error, self._seen = str(exc), None
            return RunSeen(self.path, None, str(exc))
        self._seen, self._error = state, None
        return RunSeen(self.path, report)


def _calibrations() -> dict[str, Any]:
    from trainmem.sources.calibration import load_calibrations

    try:
        return load_calibrations()
    except ValueError:  # a broken calibration file is reported by `calibrate`, not here
        return {}


class ProcessPoller:
    """Training processes by RSS, looked for only while ``wanted()`` (the monitor is open
    and no GPU is sampled: NVML names the processes itself), since a scan of every process
    each second costs CPU and memory a dashboard left open should not pay."""

    def __init__(self, wanted: Callable[[], bool]) -> None:
        self._finder: Any = None  # made on the polling thread (it imports psutil)
        self._wanted = wanted
        self._last: list[tuple[int, int]] | None = None

    def __call__(self) -> list[TrainingProcess] | None:
        from trainmem.devices.processes import ProcessFinder

        if not self._wanted():
            return None
        if self._finder is None:
            self._finder = ProcessFinder()
        found = self._finder.find()
        key = [(p.pid, p.rss_bytes) for p in found]
        if key == self._last:
            return None
        self._last = key
        return found
