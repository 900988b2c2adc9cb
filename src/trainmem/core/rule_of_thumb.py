"""The guide's rule of thumb, reproduced exactly (shared/reference/training-memory-guide.md).

- LoRA: 2 GB per billion parameters (frozen 16-bit base) + 3 GB.
- Full: 12 GB per billion (16-bit weight and gradient, two fp32 Adam moments) + 4 GB, or
  16 GB per billion with a 32-bit master copy (the classic mixed-precision recipe; fp32
  training stores the same 16 bytes per weight).
- QLoRA: the guide prints figures, not a formula: 8B ~ 9 GB, 27-32B ~ 22-26 GB. The line
  0.7 GB per billion + 3.4 GB passes through all of them (9.0, 22.3 and 25.8 GB).
"""

from __future__ import annotations

from trainmem.core.plan import Plan
from trainmem.core.units import GB


def rule_coefficients(plan: Plan) -> tuple[float, float]:
    """(GB per billion parameters, fixed GB) for the plan's method (its record holds them)."""
    method = plan.training
    master = plan.precision == "fp32" or plan.precision.endswith("-mixed")
    if master and method.rule_master is not None:
        return method.rule_master
    return method.rule


def rule_of_thumb_bytes(params: int, plan: Plan) -> int:
    per_billion, fixed = rule_coefficients(plan)
    return round((per_billion * params / 1e9 + fixed) * GB)
