"""Turning a plan into a report for the dashboard, with the model looked up at most once.

Counts and catalogue ids resolve without touching the disk, so they are answered at once;
anything else (a path, a cached Hugging Face id) reads files and is resolved in a thread.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from trainmem.app.targets import plan_targets
from trainmem.core.architecture import ModelSpec
from trainmem.core.errors import PlanError
from trainmem.core.plan import Plan
from trainmem.core.units import parse_count
from trainmem.planner.report import Report, build_report
from trainmem.sources import catalog
from trainmem.sources.resolve import resolve_model

if TYPE_CHECKING:
    from trainmem.core.calibration import Calibration
    from trainmem.devices.snapshot import Snapshot


def resolves_in_memory(text: str) -> bool:
    return parse_count(text) is not None or catalog.find(text) is not None


class SpecCache:
    """Model specs by the text typed, for the UI thread. Failures are remembered for views
    that must not retry forever (compare), and forgotten when that text resolves."""

    def __init__(self) -> None:
        self._specs: dict[str, ModelSpec] = {}
        self._errors: dict[str, PlanError] = {}

    def get(self, text: str, *, known_errors: bool = False) -> ModelSpec | None:
        """The spec if known or resolvable in memory, else None (it needs ``read_model``).

        Raises PlanError for a model that cannot be resolved in memory, and with
        ``known_errors`` for one whose last reading failed."""
        key = text.strip()
        spec = self._specs.get(key)
        if spec is None and known_errors and key in self._errors:
            raise self._errors[key]
        if spec is None and resolves_in_memory(key):
            spec = self._specs[key] = resolve_model(key)
        return spec

    def remember(self, text: str, spec: ModelSpec | None, error: PlanError | None) -> None:
        """Keep what a worker found for ``text`` (on the UI thread: workers never write here);
        a success forgets an earlier failure."""
        key = text.strip()
        if spec is not None:
            self._specs[key] = spec
            self._errors.pop(key, None)
        elif error is not None:
            self._errors[key] = error


def read_model(text: str) -> tuple[ModelSpec | None, PlanError | None]:
    """Resolve ``text``, reading files if needed: call from a worker thread, then hand the
    result to ``SpecCache.remember`` on the UI thread (a ModelResolved message)."""
    try:
        return resolve_model(text.strip()), None
    except PlanError as exc:
        return None, exc


def evaluate(
    plan: Plan,
    spec: ModelSpec,
    snapshot: Snapshot | None,
    calibrations: Mapping[str, Calibration],
) -> Report:
    """Estimate and fit, no what-if: fast enough (~1 ms) to run on every keystroke, so the
    device peak is the quick figure; the screens replace it with ``simulated``'s report,
    made in a worker, which has the same inputs as `plan` gives build_report (this machine's
    calibrations included), so the dashboard and the CLI show the same figures.

    Raises PlanError for a bad plan and ValueError (from the device parser) for a bad device."""
    return _report(plan, spec, snapshot, calibrations, solve=False, simulate=False)


def simulated(
    plan: Plan,
    spec: ModelSpec,
    snapshot: Snapshot | None,
    calibrations: Mapping[str, Calibration],
) -> Report:
    """``evaluate`` with the allocator simulated (tens of ms for a large model): in a worker."""
    return _report(plan, spec, snapshot, calibrations, solve=False)


def solve(
    plan: Plan,
    spec: ModelSpec,
    snapshot: Snapshot | None,
    calibrations: Mapping[str, Calibration],
    stop: Callable[[], bool] | None = None,
) -> Report:
    """The full report, advice and what-if for the first device included (tens of ms, seconds
    for a 70B): run it in a worker thread. ``stop``: build_report's (Stale once it says so)."""
    return _report(plan, spec, snapshot, calibrations, solve=True, stop=stop)


def _report(
    plan: Plan,
    spec: ModelSpec,
    snapshot: Snapshot | None,
    calibrations: Mapping[str, Calibration],
    *,
    solve: bool,
    simulate: bool = True,
    stop: Callable[[], bool] | None = None,
) -> Report:
    return build_report(
        plan,
        spec,
        plan_targets(plan.device, snapshot),
        calibrations=calibrations,
        solve=solve,
        node_ram_bytes=_ram(plan, snapshot),
        simulate=simulate,
        stop=stop,
    )


def _ram(plan: Plan, snapshot: Snapshot | None) -> int | None:
    """This machine's RAM as the node's, when the plan is for this machine (``auto``)."""
    if snapshot is None or "auto" not in plan.device.lower():
        return None
    return next((d.usable_bytes for d in snapshot.devices if d.kind == "system"), None)
