"""Turning a plan into a report for the dashboard, with the model looked up at most once.

Counts and catalogue ids resolve without touching the disk, so they are answered at once;
anything else (a path, a cached Hugging Face id) reads files and is resolved in a thread.
"""

from __future__ import annotations

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
    from trainmem.devices.snapshot import Snapshot


def resolves_in_memory(text: str) -> bool:
    return parse_count(text) is not None or catalog.find(text) is not None


class SpecCache:
    """Model specs by the text typed. Failures of ``resolve`` are remembered for views that
    must not retry forever (compare), and forgotten on the next ``resolve`` of that text."""

    def __init__(self) -> None:
        self._specs: dict[str, ModelSpec] = {}
        self._errors: dict[str, PlanError] = {}

    def get(self, text: str, *, known_errors: bool = False) -> ModelSpec | None:
        """The spec if known or resolvable in memory, else None (it needs ``resolve``).

        Raises PlanError for a model that cannot be resolved in memory, and with
        ``known_errors`` for one whose last ``resolve`` failed."""
        key = text.strip()
        spec = self._specs.get(key)
        if spec is None and known_errors and key in self._errors:
            raise self._errors[key]
        if spec is None and resolves_in_memory(key):
            spec = self._specs[key] = resolve_model(key)
        return spec

    def resolve(self, text: str) -> ModelSpec:
        """Resolve, reading files if needed (call from a worker thread); raises PlanError."""
        key = text.strip()
        self._errors.pop(key, None)
        try:
            spec = self._specs.get(key) or resolve_model(key)
        except PlanError as exc:
            self._errors[key] = exc
            raise
        self._specs[key] = spec
        return spec


def evaluate(plan: Plan, spec: ModelSpec, snapshot: Snapshot | None) -> Report:
    """Estimate and fit, no what-if: fast enough (~1 ms) to run on every keystroke.

    Raises PlanError for a bad plan and ValueError (from the device parser) for a bad device."""
    return build_report(plan, spec, plan_targets(plan.device, snapshot), solve=False)


def solve(plan: Plan, spec: ModelSpec, snapshot: Snapshot | None) -> Report:
    """The full report, advice and what-if for the first device included (tens of ms): run it
    in a worker thread."""
    return build_report(plan, spec, plan_targets(plan.device, snapshot), solve=True)
