"""A training plan: every input the estimate depends on, validated, with defaults filled in.

Defaults follow what most fine-tuners run today: LoRA rank 16 on all linear layers
(PEFT/TRL recipes), bf16 weights, fused AdamW (the Trainer's default with torch >= 2.8),
gradient checkpointing on (TRL's SFTConfig default), SDPA attention, 2048 tokens, batch 2.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from trainmem.core.errors import PlanError

METHODS = ("full", "lora", "qlora")
PRECISIONS = ("fp32", "bf16", "fp16", "bf16-mixed", "fp16-mixed")
OPTIMIZERS = ("adamw", "adamw-foreach", "adamw-8bit", "paged-adamw-8bit", "sgd", "adafactor")
ATTENTION = ("sdpa", "eager")
OFFLOAD = ("none", "optimizer", "params")
LORA_MODULES = ("q", "k", "v", "o", "gate", "up", "down")
LORA_PRESETS = {"all-linear": LORA_MODULES, "attention": ("q", "k", "v", "o")}

# Upper bounds that catch typos (a 10^9-token sequence) without limiting real plans.
_LIMITS = {
    "seq_len": (1, 10_000_000),
    "batch": (1, 65_536),
    "lora_rank": (1, 65_536),
    "gpus": (1, 65_536),
    "zero": (0, 3),
}


@dataclass(frozen=True)
class Plan:
    """One training configuration. ``validated()`` returns it checked and normalised."""

    model: str = "Qwen/Qwen2.5-7B"
    method: str = "lora"
    seq_len: int = 2048
    batch: int = 2
    grad_ckpt: bool = True
    attn: str = "sdpa"
    precision: str = "bf16"
    optimizer: str = "adamw"
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_targets: str = "all-linear"
    lora_dropout: float = 0.0
    kbit_prep: bool = True  # TRL's SFTTrainer calls prepare_model_for_kbit_training for QLoRA
    gpus: int = 1
    zero: int = 0
    offload: str = "none"
    device: str = "auto"
    rule_of_thumb: bool = False

    def validated(self) -> Plan:
        for name in ("method", "precision", "optimizer", "attn", "offload"):
            choices = {
                "method": METHODS,
                "precision": PRECISIONS,
                "optimizer": OPTIMIZERS,
                "attn": ATTENTION,
                "offload": OFFLOAD,
            }[name]
            value = getattr(self, name)
            if value not in choices:
                raise PlanError(name, f"{value!r} is not one of {', '.join(choices)}")
        for name, (low, high) in _LIMITS.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise PlanError(name, f"{value!r} is not a whole number")
            if not low <= value <= high:
                raise PlanError(name, f"{value:,} is outside {low:,}..{high:,}")
        if not isinstance(self.lora_alpha, (int, float)) or self.lora_alpha <= 0:
            raise PlanError("lora_alpha", f"{self.lora_alpha!r} must be a positive number")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise PlanError("lora_dropout", f"{self.lora_dropout!r} must be in [0, 1)")
        targets = parse_lora_targets(self.lora_targets)
        if self.offload == "optimizer" and self.zero == 0:
            raise PlanError("offload", "optimizer offload needs ZeRO stage 1, 2 or 3 (--zero)")
        if self.offload == "params" and self.zero != 3:
            raise PlanError("offload", "parameter offload needs ZeRO stage 3 (--zero 3)")
        if not self.model.strip():
            raise PlanError("model", "is empty; give a catalogue id, a count like 7B or a path")
        preset = self.lora_targets.strip().lower() in LORA_PRESETS
        return replace(
            self, lora_targets=self.lora_targets.strip().lower() if preset else ",".join(targets)
        )

    @property
    def trains_adapter(self) -> bool:
        return self.method in ("lora", "qlora")

    @property
    def target_modules(self) -> tuple[str, ...]:
        return parse_lora_targets(self.lora_targets)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Plan:
        """Build from a dict (a saved plan); unknown keys are an error, not silently dropped."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise PlanError(unknown[0], f"unknown plan field; known: {', '.join(sorted(known))}")
        return cls(**data).validated()


def parse_lora_targets(text: str) -> tuple[str, ...]:
    """``all-linear`` | ``attention`` | a comma list of q,k,v,o,gate,up,down (``*_proj`` ok)."""
    text = text.strip().lower()
    if text in LORA_PRESETS:
        return LORA_PRESETS[text]
    names = [t.strip().removesuffix("_proj") for t in text.split(",") if t.strip()]
    bad = [n for n in names if n not in LORA_MODULES]
    if bad or not names:
        raise PlanError(
            "lora_targets",
            f"{text!r} is not all-linear, attention or a list of {','.join(LORA_MODULES)}",
        )
    return tuple(m for m in LORA_MODULES if m in names)
