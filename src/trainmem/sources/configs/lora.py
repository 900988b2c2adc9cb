"""LoRA settings every framework passes to PEFT: target module names and modules_to_save,
turned into the plan's ``lora_targets`` and ``modules_to_save`` text."""

from __future__ import annotations

from trainmem.core.errors import PlanError
from trainmem.core.plan import HF_LINEAR_NAMES, SAVABLE_MODULES
from trainmem.sources.configs.common import FIELD, Reading

_MODULES = HF_LINEAR_NAMES  # transformers names -> the plan's short ones
_ALL = ("all-linear", "all_linear", "all")  # PEFT's "all-linear", LLaMA-Factory's "all"
SAVABLE = SAVABLE_MODULES


def set_targets(r: Reading, key: str, names: list[str]) -> None:
    """``lora_targets`` from module names (or all-linear); an adapter on embed_tokens or
    lm_head is not modelled; other names cannot be planned (one line naming them)."""
    if any(n.lower() in _ALL for n in names):
        r.set("lora_targets", "all-linear", key)
        return
    # PEFT matches a listed name as the module path's suffix (peft 0.21.2
    # tuners/tuners_utils.py:2376 key.endswith(f".{target_key}")): self_attn.q_proj is q_proj
    names = [_suffix(n) for n in names]
    kept = [_MODULES[n] for n in names if n in _MODULES]
    on_edges = [n for n in names if n in SAVABLE]
    unknown = [n for n in names if n not in _MODULES and n not in SAVABLE]
    if unknown:
        raise PlanError(
            FIELD,
            f"{r.doc.where(key)}: {key}: {', '.join(unknown)} not planned: trainmem puts "
            f"LoRA on {', '.join(_MODULES)} (or all-linear)",
        )
    if on_edges:
        r.unmodelled_key(key, f"LoRA adapters on {', '.join(on_edges)}")
    if not kept:
        raise PlanError(FIELD, f"{r.doc.where(key)}: {key}: no decoder linear layer targeted")
    r.set("lora_targets", ",".join(kept), key)


def _suffix(name: str) -> str:
    parent, _, last = name.rpartition(".")
    return last if parent in ("self_attn", "mlp") and last in _MODULES else name


def set_modules_to_save(r: Reading, key: str, names: list[str]) -> None:
    """``modules_to_save``: embed_tokens and lm_head are planned; others are not modelled."""
    kept = [n for n in SAVABLE if n in names]
    other = [n for n in names if n not in SAVABLE]
    if other:
        r.unmodelled_key(key, f"modules_to_save {', '.join(other)}")
    r.set("modules_to_save", ",".join(kept), key)
