"""The 4-bit loads of bench/measure/bnb_moe_load.py against the estimate (no torch needed)."""

from __future__ import annotations

from typing import Any

from trainmem.core.architecture import spec_from_config
from trainmem.core.plan import Plan
from trainmem.core.precision import dtypes
from trainmem.core.states import stored_weight_bytes


def estimated(record: dict[str, Any]) -> dict[bool, int]:
    """The estimate's weights for a record's config, kbit_prep off and on."""
    spec = spec_from_config(record["config"], str(record["model_type"]))
    out = {}
    for prep in (False, True):
        plan = Plan(model=spec.name, method="qlora", kbit_prep=prep, device="80GB").validated()
        out[prep] = stored_weight_bytes(spec, plan, dtypes(plan))
    return out


def _pct(pred: int, measured: int) -> str:
    return f"{100 * (pred - measured) / measured:+.1f}%"


def bnb_load_section(records: list[dict[str, Any]]) -> list[str]:
    """The weights of a 4-bit load of each MoE model_type, measured against the estimate."""
    lines = [
        "",
        "## QLoRA of mixture-of-experts models: what a 4-bit load keeps "
        "(bench/measure/bnb_moe_load.py)",
        "",
        "Tiny random models of each MoE model_type the estimate follows, saved in bf16 and loaded "
        "with `BitsAndBytesConfig(load_in_4bit=True)` (NF4, double quantization) on a CPU, then "
        "passed through PEFT's `prepare_model_for_kbit_training`; every parameter's bytes (a "
        "Params4bit's packed storage and quant state included) against the estimate's weights "
        "(trainmem.core.states.stored_weight_bytes, `--no-kbit-prep` and `--kbit-prep`). "
        "bitsandbytes converts nn.Linear layers only (transformers 5.25 "
        "integrations/bitsandbytes.py replace_with_bnb_linear): the fused 3-D experts and the "
        "router stay bf16, and the preparation casts them to fp32 with every other 16-bit "
        "parameter. The remainder is the quant state's 256-entry code tables.",
        "",
        "| model_type | 4-bit in a layer | 16-bit in a layer | loaded B | ours | prepared B "
        "| ours |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in records:
        ours = estimated(r)
        names = [
            ", ".join(n.removesuffix(".weight") for n in r[k]) for k in ("four_bit", "sixteen_bit")
        ]
        lines.append(
            f"| {r['model_type']} | {names[0]} | {names[1]} | {r['loaded_bytes']:,} | "
            f"{_pct(ours[False], r['loaded_bytes'])} | {r['prepared_bytes']:,} | "
            f"{_pct(ours[True], r['prepared_bytes'])} |"
        )
    return lines
