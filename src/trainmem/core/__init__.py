"""The estimator core: pure Python, no UI or NVML imports (a test enforces it).

Public entry points::

    spec = resolve_model("Qwen/Qwen2.5-7B")          # or "7B", a config.json path, a cached id
    plan = Plan(model="Qwen/Qwen2.5-7B", method="lora", seq_len=2048)
    est = estimate(plan, spec)                        # components, two peaks, rule of thumb
"""

from trainmem.core.architecture import ModelSpec
from trainmem.core.errors import PlanError
from trainmem.core.estimator import Component, Estimate, estimate
from trainmem.core.fit import FitResult, judge_fit
from trainmem.core.plan import Plan
from trainmem.core.resolve import resolve_model
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
    "resolve_model",
    "rule_of_thumb_bytes",
]
