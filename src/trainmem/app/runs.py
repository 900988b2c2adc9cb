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
    """A run log (or a base path and its rank files) as last read: each rank's comparison
    with the plan, in rank order, and why a file cannot be read yet, if one cannot."""

    path: Path
    reports: tuple[RankReport, ...] = ()
    error: str | None = None
    warning: str | None = None  # the calibration file could not be used

    @property
    def report(self) -> RankReport | None:
        """The first rank's comparison (None: nothing readable yet)."""
        return self.reports[0] if self.reports else None


class RunLogPoller:
    """Tails one probe log, or every rank file of a base path (``run.jsonl`` for
    ``run.rank0.jsonl``, ``run.rank1.jsonl``...; trainmem.sources.run_logs.run_log_paths,
    looked up again at each poll until the path names a file, so ranks that start late are
    found): reads only what was appended, and rebuilds a comparison only when a step was
    added."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path).expanduser()
        self._tails: dict[Path, Any] = {}  # made on the polling thread: they touch the disk
        self._reports: dict[Path, RankReport] = {}
        self._seen: dict[Path, tuple[int, bool]] = {}
        self._warning: str | None = None
        self._rebuilt = 0  # comparisons rebuilt so far: a change to report
        self._last: tuple[object, ...] | None = None

    def __call__(self) -> RunSeen | None:
        from trainmem.planner.run_report import rank_report
        from trainmem.sources.run_logs import RunLogError, RunLogTail, run_log_paths

        errors: list[str] = []
        try:
            paths = run_log_paths(self.path)
        except RunLogError as exc:  # not written yet: said, and looked for again
            paths, errors = [], [str(exc)]
        for path in paths:
            try:
                if path not in self._tails:
                    self._tails[path] = RunLogTail(path, keep_steps=False)
                log = self._tails[path].poll()
                state = (log.step_count, log.ended)
                if self._seen.get(path) != state:
                    calibrations, self._warning = _calibrations()
                    self._reports[path] = rank_report(log, calibrations)
                    self._seen[path] = state
                    self._rebuilt += 1
            except ValueError as exc:  # a broken record, an unknown model
                self._reports.pop(path, None)
                self._seen.pop(path, None)
                errors.append(str(exc))
        reports = tuple(sorted((self._reports[p] for p in paths if p in self._reports), key=_rank))
        error = errors[0] if errors else None
        key = (self._rebuilt, len(reports), error, self._warning)
        if key == self._last:
            return None
        self._last = key
        return RunSeen(self.path, reports, error, self._warning)


def _rank(report: RankReport) -> int:
    return report.log.rank


def _calibrations() -> tuple[dict[str, Any], str | None]:
    """This machine's calibrations; a file that cannot be used counts as none, with the
    warning the monitor shows."""
    from trainmem.sources.calibration import load_calibrations_or_warn

    return load_calibrations_or_warn()


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
