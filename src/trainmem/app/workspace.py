"""The plans open in the dashboard: an ordered list of named plans and the selected one.

Plain Python, no Textual: the app owns one and bumps a reactive counter when it changes.
"""

from __future__ import annotations

from dataclasses import replace

from trainmem.core.plan import Plan
from trainmem.sources.plan_files import NamedPlan, PlanSet, plan_name


class Workspace:
    def __init__(self, plan_set: PlanSet | None = None) -> None:
        plan_set = plan_set or PlanSet((NamedPlan(plan_name(Plan()), Plan()),))
        self.plans: list[NamedPlan] = list(plan_set.plans) or [NamedPlan("plan", Plan())]
        self.selected = min(max(plan_set.selected, 0), len(self.plans) - 1)

    @property
    def current(self) -> NamedPlan:
        return self.plans[self.selected]

    def to_plan_set(self) -> PlanSet:
        return PlanSet(tuple(self.plans), self.selected)

    def replace_all(self, plan_set: PlanSet) -> None:
        self.plans = list(plan_set.plans)
        self.selected = min(plan_set.selected, len(self.plans) - 1)

    def update_current(self, plan: Plan) -> None:
        self.plans[self.selected] = replace(self.current, plan=plan)

    def select(self, index: int) -> None:
        self.selected = min(max(index, 0), len(self.plans) - 1)

    def _unique(self, name: str) -> str:
        names = {p.name for p in self.plans}
        if name not in names:
            return name
        n = 2
        while f"{name} ({n})" in names:
            n += 1
        return f"{name} ({n})"

    def add(self, plan: Plan | None = None) -> int:
        """Add a plan (the defaults when none is given), select it and return its index."""
        plan = plan or Plan()
        self.plans.append(NamedPlan(self._unique(plan_name(plan)), plan))
        self.selected = len(self.plans) - 1
        return self.selected

    def duplicate(self, index: int) -> int:
        source = self.plans[index]
        self.plans.insert(index + 1, NamedPlan(self._unique(source.name), source.plan))
        self.selected = index + 1
        return self.selected

    def rename(self, index: int, name: str) -> None:
        name = name.strip()
        if name and name != self.plans[index].name:
            self.plans[index] = replace(self.plans[index], name=self._unique(name))

    def delete(self, index: int) -> bool:
        """Remove a plan; the last one cannot be removed (the form always edits one)."""
        if len(self.plans) <= 1:
            return False
        del self.plans[index]
        if self.selected >= index and self.selected > 0:
            self.selected -= 1
        return True
