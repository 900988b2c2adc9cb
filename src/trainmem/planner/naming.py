"""Default plan names that say what distinguishes a plan from the others open beside it.

Every name starts with the model and the method and gives sequence x batch; then come the
fields on which the open plans differ (precision, optimizer, rank, GPUs, ZeRO...), so seven
plans of one model never all read "Qwen2.5-7B lora". A name follows its plan's edits until
the user renames it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import Any

from trainmem.core.plan import FIELDS_BY_NAME, Plan

# Field -> how it reads inside a name. Order is the order in the name.
_PARTS: dict[str, Callable[[Any], str]] = {
    "precision": str,
    "optimizer": str,
    "grad_ckpt": lambda on: "ckpt" if on else "no-ckpt",
    "attn": str,
    "lora_rank": lambda r: f"r{r}",
    "lora_targets": str,
    "lora_dropout": lambda p: f"drop {p:g}",
    "kbit_prep": lambda on: "kbit-prep" if on else "no-kbit-prep",
    "gpus": lambda n: f"{n} GPU" + ("s" if n != 1 else ""),
    "zero": lambda z: f"ZeRO-{z}",
    "offload": lambda o: f"offload {o}",
    "device": lambda d: f"on {d}",
    "rule_of_thumb": lambda on: "rule" if on else "detailed",
}


def short_model(model: str) -> str:
    return model.rstrip("/").split("/")[-1] or model


def describe(plan: Plan, others: Sequence[Plan] = ()) -> str:
    """``plan``'s default name among ``others`` (the other open plans)."""
    return default_names([plan, *others])[0]


def _applies(plan: Plan, name: str) -> bool:
    applies = FIELDS_BY_NAME[name].applies
    return applies is None or bool(applies(plan))


def default_names(plans: Sequence[Plan]) -> list[str]:
    """Each plan's default name among all of them. A field is named when some other plan
    has another value there: its value is not held by every plan. Linear in the number of
    plans (a count per value), so 20,000 plans are named in well under a second."""
    counts = {name: Counter(getattr(p, name) for p in plans) for name in _PARTS}
    names = []
    for plan in plans:
        parts = [short_model(plan.model), plan.method, f"{plan.seq_len}x{plan.batch}"]
        for name, show in _PARTS.items():
            value = getattr(plan, name)
            if counts[name][value] < len(plans) and _applies(plan, name):
                parts.append(show(value))
        names.append(" ".join(parts))
    return names


def fit_name(name: str, width: int, shared: Collection[str] = ()) -> str:
    """``name`` in at most ``width`` characters, cut between words, never inside one: the
    first word (the model) and as many of the last ones as fit stay, since the end is what
    sets a copy apart ("... on h100 (2)"); "…" stands for the words left out. Words in
    ``shared`` (said by every name in a column) are left out first."""
    if len(name) <= width:
        return name
    words = name.split(" ")
    if shared:
        words = [w if w not in shared else "…" for w in words[:-1]] + words[-1:]
        if len(_join(words)) <= width:
            return _join(words)
    head, tail = words[:1], list[str]()
    for word in reversed(words[1:]):  # the last words first, then the first ones
        if len(_join([*head, "…", word, *tail])) > width:
            break
        tail.insert(0, word)
    for word in words[1 : len(words) - len(tail)]:
        if len(_join([*head, word, "…", *tail])) > width:
            break
        head.append(word)
    fitted = _join([*head, "…", *tail])
    if len(fitted) <= width:
        return fitted
    # The first word alone does not fit with the rest: as much of the start as fits.
    return name[: max(width - 1, 0)] + "…"


def _join(words: Sequence[str]) -> str:
    """Words with a space between, one "…" for a run of them."""
    out: list[str] = []
    for word in words:
        if not (word == "…" and out and out[-1] == "…"):
            out.append(word)
    return " ".join(out)
