"""Messages that cross threads: samples from the Sampler, results from worker threads."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from textual.message import Message

from trainmem.core.architecture import ModelSpec
from trainmem.core.plan import Plan
from trainmem.plans_store import PlanSet
from trainmem.report import Report

if TYPE_CHECKING:  # imported by the sampler, which starts after the first frame
    from trainmem.devices.snapshot import Snapshot


@dataclass
class DevicesSampled(Message):
    snapshot: Snapshot


@dataclass
class ModelResolved(Message):
    text: str
    spec: ModelSpec | None
    error: str | None


@dataclass
class Solved(Message):
    """What-if and advice for ``plan``; ignored if the plan changed meanwhile."""

    plan: Plan
    report: Report


@dataclass
class PlansLoaded(Message):
    path: str
    plan_set: PlanSet
