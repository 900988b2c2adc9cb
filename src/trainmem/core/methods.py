"""Training methods, one record each: what is trained, how the base weights are stored, which
casts the libraries make, and the guide's rule of thumb for it.

A new method is one record here plus its formulas and tests; every other module asks the
record (``method_record(plan.method)``) instead of comparing names, and an unknown name is a
``PlanError`` everywhere rather than a silent full fine-tune.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from trainmem.core.errors import record_named

BaseStorage = Literal["precision", "quantized"]


@dataclass(frozen=True)
class Method:
    name: str
    label: str  # as people write it
    trains_base: bool  # every weight is trained (gradients and optimizer state for all)
    # How the base weights are stored: in the plan's precision, or quantized by bitsandbytes
    # in the plan's ``quant`` format (bitsandbytes/nn/modules.py Linear4bit / Linear8bitLt,
    # dequantized per op; no autocast copies).
    base: BaseStorage
    # PEFT's prepare_model_for_kbit_training applies (peft/utils/other.py): quantized bases only.
    kbit_prep: bool
    # The guide's rule of thumb, (GB per billion parameters, fixed GB); see rule_of_thumb.py.
    rule: tuple[float, float]
    # Full fine-tuning with an fp32 master copy (fp32 or -mixed precision) has its own rule.
    rule_master: tuple[float, float] | None = None

    @property
    def trains_adapter(self) -> bool:
        return not self.trains_base

    @property
    def quantized_base(self) -> bool:
        return self.base != "precision"


FULL = Method(
    "full",
    "full fine-tune",
    trains_base=True,
    base="precision",
    kbit_prep=False,
    rule=(12.0, 4.0),  # 16-bit weight and gradient, two fp32 Adam moments
    rule_master=(16.0, 4.0),  # plus a 32-bit master copy
)
LORA = Method("lora", "LoRA", trains_base=False, base="precision", kbit_prep=False, rule=(2.0, 3.0))
# The guide prints QLoRA figures, not a formula: 8B ~ 9 GB, 27-32B ~ 22-26 GB; the line
# 0.7 GB per billion + 3.4 GB passes through all of them (9.0, 22.3 and 25.8 GB).
QLORA = Method(
    "qlora", "QLoRA", trains_base=False, base="quantized", kbit_prep=True, rule=(0.7, 3.4)
)

METHOD_RECORDS = {m.name: m for m in (FULL, LORA, QLORA)}
METHODS = tuple(METHOD_RECORDS)


def method_record(name: str) -> Method:
    """The record of ``name``; a PlanError naming the known methods otherwise."""
    return record_named(METHOD_RECORDS, "method", name)
