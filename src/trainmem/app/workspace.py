"""The plans open in the dashboard: an ordered list of named plans and the selected one.

Plain Python, no Textual. Every change goes through here and is announced once, through
``on_change`` (the App's counter that the screens watch), so no screen pairs a change with
a notification by hand. Plans without a name of the user's own are named by what
distinguishes them from the others (trainmem.planner.naming), and those names follow every
change.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from trainmem.core.plan import Plan
from trainmem.planner.naming import default_names
from trainmem.sources.plan_files import NamedPlan, PlanSet, plan_label


class Workspace:
    def __init__(
        self, plan_set: PlanSet | None = None, on_change: Callable[[], None] | None = None
    ) -> None:
        self._on_change = on_change or (lambda: None)
        plan_set = plan_set or PlanSet((NamedPlan("", Plan(), auto=True),))
        self.plans: list[NamedPlan] = list(plan_set.plans) or [NamedPlan("", Plan(), auto=True)]
        self.selected = min(max(plan_set.selected, 0), len(self.plans) - 1)
        self._rename_auto()

    @property
    def current(self) -> NamedPlan:
        return self.plans[self.selected]

    def to_plan_set(self) -> PlanSet:
        return PlanSet(tuple(self.plans), self.selected)

    def _rename_auto(self) -> None:
        """Give every auto-named plan its default name, unique among all the names."""
        defaults = default_names([p.plan for p in self.plans])
        taken = {p.name for p in self.plans if not p.auto}
        for i, named in enumerate(self.plans):
            if not named.auto:
                continue
            name, n = defaults[i], 2
            while name in taken:
                name, n = f"{defaults[i]} ({n})", n + 1
            taken.add(name)
            if name != named.name:
                self.plans[i] = replace(named, name=name)

    def replace_all(self, plan_set: PlanSet) -> None:
        self.plans = list(plan_set.plans)
        self.selected = min(plan_set.selected, len(self.plans) - 1)
        self._changed()

    def edit_current(self, plan: Plan) -> None:
        """The plan form's own edit, as it is typed: not announced (the form shows it, and a
        notification per keystroke would re-read the form it came from)."""
        if plan == self.current.plan:
            return  # re-estimated, not changed (a device sample, a resize)
        self.plans[self.selected] = replace(self.current, plan=plan)
        self._rename_auto()

    def update_current(self, plan: Plan) -> None:
        """The selected plan replaced from outside the form (a reset): announced, even when
        equal, so the form shows it again over whatever was typed."""
        self.edit_current(plan)
        self._on_change()

    def replace_at(self, index: int, plan: Plan) -> None:
        """Put ``plan`` in place of the one at ``index`` (a watched config re-read)."""
        self.plans[index] = replace(self.plans[index], plan=plan)
        self._changed()

    def select(self, index: int) -> None:
        self.selected = min(max(index, 0), len(self.plans) - 1)
        self._on_change()

    def _changed(self) -> None:
        self._rename_auto()
        self._on_change()

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
        self.plans.append(NamedPlan("", plan or Plan(), auto=True))
        self.selected = len(self.plans) - 1
        self._changed()
        return self.selected

    def append(self, named: NamedPlan) -> None:
        """Add a plan saved elsewhere (another dashboard's), its own name made unique; the
        selection stays."""
        if not named.auto:
            named = replace(named, name=self._unique(named.name))
        self.plans.append(named)
        self._changed()

    def duplicate(self, index: int) -> int:
        """A copy after ``index``; a user-named plan's copy is "name (2)", an auto-named
        one's stays auto (it is named by what the user then changes)."""
        source = self.plans[index]
        name = source.name if source.auto else self._unique(source.name)
        self.plans.insert(index + 1, NamedPlan(name, source.plan, auto=source.auto))
        self.selected = index + 1
        self._changed()
        return self.selected

    def rename(self, index: int, name: str) -> None:
        """A name of the user's own; an empty one goes back to the default name. Stored as a
        name read from a file is (escapes written out, cut to 200 characters), so it reads
        back the same after a save."""
        name = plan_label(name.strip())
        named = self.plans[index]
        if not name:
            self.plans[index] = replace(named, auto=True)
        elif name != named.name or named.auto:
            others = self.plans[:index] + self.plans[index + 1 :]
            unique = name if name not in {p.name for p in others} else self._unique(name)
            self.plans[index] = replace(named, name=unique, auto=False)
        self._changed()

    def delete(self, index: int) -> bool:
        """Remove a plan; the last one cannot be removed (the form always edits one)."""
        if len(self.plans) <= 1:
            return False
        del self.plans[index]
        if self.selected >= index and self.selected > 0:
            self.selected -= 1
        self._changed()
        return True
