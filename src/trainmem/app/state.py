"""Everything the dashboard's screens share, in one object the App owns (``app.state``).

Screens read and change it on the UI thread only; worker threads never touch it: they post
messages (trainmem.app.messages) whose handlers, on the UI thread, update it. The App's
reactive counters tell the screens when a part changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainmem.app.planning import SpecCache
from trainmem.app.workspace import Workspace
from trainmem.sources import catalog
from trainmem.sources.paths import default_plans_path
from trainmem.sources.plan_files import PlanSet

if TYPE_CHECKING:
    from trainmem.core.calibration import Calibration
    from trainmem.devices.snapshot import Snapshot
    from trainmem.planner.report import Report


class DashboardState:
    def __init__(
        self,
        plan_set: PlanSet | None,
        plans_path: Path | None,
        broken_paths: set[Path],
        calibrations: Mapping[str, Calibration] | None = None,
        on_plans_changed: Callable[[], None] | None = None,
    ) -> None:
        self.workspace = Workspace(plan_set, on_plans_changed)
        # This machine's calibrations, read before start-up: every report is built with them.
        self.calibrations: Mapping[str, Calibration] = calibrations or {}
        self.specs = SpecCache()
        self.plans_path = plans_path or default_plans_path()
        # Files that failed to load: never written over, so nothing in them is lost.
        self.broken_paths = broken_paths
        self.snapshot: Snapshot | None = None  # the latest device sample
        self.report: Report | None = None  # the selected plan's estimate on screen
        self.sampler: Any = None  # set by the App once sampling starts (history, peaks)
        self.cached_ids: list[str] = []  # models in the local Hugging Face cache
        self.scan: Any = None  # the --data dataset's lengths (planner.lengths.Scan), once read
        self.runs: dict[Any, Any] = {}  # run log path -> app.runs.RunSeen, as last read
        self.processes: list[Any] = []  # training processes by RSS (no GPU sampled)

    def model_names(self) -> list[str]:
        known = catalog.names()
        return known + [i for i in self.cached_ids if i not in known]

    def device_names(self) -> list[str]:
        from trainmem.devices.presets import list_presets

        return ["auto", *(t.name for t in list_presets())]
