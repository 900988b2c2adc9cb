"""Messages that cross threads: samples from the Sampler, results from worker threads.

Plain classes rather than dataclasses: creating a dataclass costs about half a millisecond,
paid at every start-up before the first frame.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.message import Message

if TYPE_CHECKING:
    from pathlib import Path

    from trainmem.app.config_watch import WatchedConfig
    from trainmem.app.runs import RunSeen
    from trainmem.core.architecture import ModelSpec
    from trainmem.core.errors import PlanError
    from trainmem.core.plan import Plan
    from trainmem.devices.processes import TrainingProcess
    from trainmem.devices.snapshot import Snapshot  # imported by the sampler, after start-up
    from trainmem.planner.export import Row
    from trainmem.planner.lengths import Scan
    from trainmem.planner.report import Report
    from trainmem.sources.plan_files import Opened


class DevicesSampled(Message):
    def __init__(self, snapshot: Snapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class ModelResolved(Message):
    """A model read by a worker: its spec, or why it could not be read."""

    def __init__(self, text: str, spec: ModelSpec | None, error: PlanError | None) -> None:
        super().__init__()
        self.text = text
        self.spec = spec
        self.error = error


class Simulated(Message):
    """``plan``'s report with the caching allocator simulated; ignored if the plan changed."""

    def __init__(self, plan: Plan, report: Report) -> None:
        super().__init__()
        self.plan = plan
        self.report = report


class RowsSimulated(Message):
    """The compare view's rows (``before``) with the allocator simulated (``after``)."""

    def __init__(self, before: list[Row], after: list[Row]) -> None:
        super().__init__()
        self.before = before
        self.after = after


class Refused(Message):
    """``plan`` turned out to be one the estimate refuses only once simulated (a tensor
    PyTorch would not allocate): shown on its field, like any bad value."""

    def __init__(self, plan: Plan, field: str, message: str) -> None:
        super().__init__()
        self.plan = plan
        self.field = field
        self.message = message


class Solved(Message):
    """What-if and advice for ``plan``; ignored if the plan changed meanwhile."""

    def __init__(self, plan: Plan, report: Report) -> None:
        super().__init__()
        self.plan = plan
        self.report = report


class ModelsListed(Message):
    """Hugging Face ids found in the local cache (for the model list)."""

    def __init__(self, ids: list[str]) -> None:
        super().__init__()
        self.ids = ids


class PlansSaved(Message):
    def __init__(self, path: str, count: int) -> None:
        super().__init__()
        self.path = path
        self.count = count


class PlansProgress(Message):
    def __init__(self, done: int, total: int) -> None:
        super().__init__()
        self.done = done
        self.total = total


class PlansOpened(Message):
    """A plans file read by a worker (sources.plan_files.open_plans): Ctrl+O, or a large one
    at start-up. ``session``: it is the session file; ``keep``: the open plans stay after it."""

    def __init__(self, path: Path, opened: Opened, *, session: bool, keep: bool) -> None:
        super().__init__()
        self.path = path
        self.opened = opened
        self.session = session
        self.keep = keep


class ConfigRead(Message):
    """A watched training config re-read (or first opened with Ctrl+O) by a worker: the plan
    it now describes, or why it could not be read (the last plan is kept)."""

    def __init__(
        self,
        watch: WatchedConfig,
        plan: Plan | None,
        unmodelled: tuple[str, ...] = (),
        error: str | None = None,
        *,
        opened: bool = False,
    ) -> None:
        super().__init__()
        self.watch = watch
        self.plan = plan
        self.unmodelled = unmodelled
        self.error = error
        self.opened = opened


class DataScanned(Message):
    """The ``--data`` dataset's lengths, counted by a worker, or why it could not be read."""

    def __init__(self, scan: Scan | None, error: str | None = None) -> None:
        super().__init__()
        self.scan = scan
        self.error = error


class RunLogRead(Message):
    """A probe run log read further by the polling worker."""

    def __init__(self, seen: RunSeen) -> None:
        super().__init__()
        self.seen = seen


class ProcessesFound(Message):
    """Training processes found through psutil (no GPU sampled)."""

    def __init__(self, processes: list[TrainingProcess]) -> None:
        super().__init__()
        self.processes = processes
