"""The estimator core: maths and values only. No file, environment, network, UI or NVML
access (tests/test_layers.py enforces the imports).

Public entry points::

    spec = spec_from_count(7_600_000_000, "7B")       # or trainmem.sources.resolve_model(...)
    plan = Plan(model="Qwen/Qwen2.5-7B", method="lora", seq_len=2048)
    est = estimate(plan, spec)                        # components, two peaks, rule of thumb
"""

from trainmem.core.architecture import ModelSpec, spec_from_count
from trainmem.core.errors import PlanError
from trainmem.core.estimator import Component, Estimate, estimate
from trainmem.core.fit import FitResult, judge_fit
from trainmem.core.plan import Plan
from trainmem.core.rule_of_thumb import rule_of_thumb_bytes

__all__ = [
    "Component",
    "Estimate",
    "FitResult",
    "ModelSpec",
    "Plan",
    "PlanError",
    "estimate",
    "judge_fit",
    "rule_of_thumb_bytes",
    "spec_from_count",
]
