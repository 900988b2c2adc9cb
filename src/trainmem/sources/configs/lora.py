"""LoRA settings every framework passes to PEFT: target module names and modules_to_save,
turned into the plan's ``lora_targets`` and ``modules_to_save`` text."""

from __future__ import annotations

import re
from typing import Any

from trainmem.core.errors import PlanError
from trainmem.core.plan import HF_LINEAR_NAMES, SAVABLE_MODULES
from trainmem.core.units import shown
from trainmem.sources.configs.common import FIELD, Reading

_MODULES = HF_LINEAR_NAMES  # transformers names -> the plan's short ones
_ALL = ("all-linear", "all_linear", "all")  # PEFT's "all-linear", LLaMA-Factory's "all"
SAVABLE = SAVABLE_MODULES

# The module paths a string target_modules is matched against, as transformers names them:
# a causal LM's decoder (LlamaForCausalLM: model.layers.N.self_attn.q_proj) and the language
# model inside a multimodal one (Gemma3ForConditionalGeneration: model.language_model.layers.N).
_PARENTS = {"q": "self_attn", "k": "self_attn", "v": "self_attn", "o": "self_attn"}
_PREFIXES = ("model.layers", "model.language_model.layers")
_LAYERS = 128  # layer indices tried: a pattern matching only some of them is refused
_MAX_PATTERN = 500  # characters
_MAX_REPEATS = 4  # unbounded repetitions: each one multiplies the backtracking by the key length


def set_target_modules(r: Reading, key: str, *, one_item_is_string: bool = False) -> bool:
    """``lora_targets`` from a framework key PEFT receives as ``target_modules`` (False when
    absent). A list names modules; a string reaches PEFT as a string, which it full-matches
    against each module's path as a regex (peft 0.22.0 tuners/tuners_utils.py:2514
    check_target_module_exists -> match_target_against_key, utils/other.py:1630
    re.fullmatch); "all-linear" is PEFT's own word. On a command line a single value is a
    one-item list (nargs="+"), unless the framework turns a one-item list into its string
    (``one_item_is_string``: TRL)."""
    value = r.doc.lookup(key)
    if one_item_is_string and isinstance(value, list) and len(value) == 1:
        value = value[0]
    as_string = one_item_is_string or not r.doc.command
    if isinstance(value, str) and as_string and value.strip().lower() not in _ALL:
        set_target_regex(r, key, value)
        return True
    names = r.doc.names(key)
    if not names:
        return False
    set_targets(r, key, names)
    return True


def set_target_regex(r: Reading, key: str, pattern: str) -> None:
    """The module types a PEFT target_modules regex adapts in every decoder layer."""
    where = f"{r.doc.where(key)}: {key}"
    compiled = _compile(where, pattern)
    kept: list[str] = []
    partial: list[str] = []
    for name, short in _MODULES.items():
        parent = _PARENTS.get(short, "mlp")
        hits = max(
            sum(bool(compiled.fullmatch(f"{p}.{i}.{parent}.{name}")) for i in range(_LAYERS))
            for p in _PREFIXES
        )
        if hits == _LAYERS:
            kept.append(short)
        elif hits:
            partial.append(name)
    if partial:
        raise PlanError(
            FIELD,
            f"{where}: the pattern adapts {', '.join(partial)} in some layers only, which "
            "trainmem does not plan (it puts LoRA on a module in every layer)",
        )
    edges = [m for m in SAVABLE if compiled.fullmatch(f"model.{m}") or compiled.fullmatch(m)]
    # (lm_head's path is lm_head; embed_tokens' is model.embed_tokens)
    if edges:
        r.unmodelled_key(key, f"LoRA adapters on {', '.join(edges)}")
    if not kept:
        raise PlanError(
            FIELD,
            f"{where}: PEFT full-matches a string against module paths "
            f"(model.layers.0.self_attn.q_proj); {shown(pattern, 60)} matches no decoder "
            "linear layer (a list names modules: [q_proj, v_proj])",
        )
    r.set("lora_targets", ",".join(kept), key)


def _compile(where: str, pattern: str) -> re.Pattern[str]:
    """The pattern compiled, refused when matching it could take exponential time (a
    repetition of something that itself repeats or branches) or too many repetitions."""
    if len(pattern) > _MAX_PATTERN:
        raise PlanError(FIELD, f"{where}: a pattern over {_MAX_PATTERN} characters")
    try:
        compiled = re.compile(pattern)
        parsed = re._parser.parse(pattern)  # type: ignore[attr-defined]
    except (re.error, RecursionError, OverflowError) as err:
        raise PlanError(FIELD, f"{where}: not a regular expression ({err})") from None
    repeats = _repeats(list(parsed), nested=False)
    if repeats < 0 or repeats > _MAX_REPEATS:
        raise PlanError(
            FIELD,
            f"{where}: a pattern with nested or more than {_MAX_REPEATS} unbounded "
            "repetitions is not evaluated (matching it can take exponential time)",
        )
    return compiled


_REPEAT = ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT")


def _repeats(items: list[Any], nested: bool) -> int:
    """Unbounded repetitions in a parsed pattern (sre_parse items); -1 when a repetition of
    more than one holds a branch or another repetition (nested=True: inside such a one)."""
    total = 0
    for op, arg in items:
        name = str(op)
        if name in _REPEAT:
            _low, high, body = arg
            many = high > 1  # MAXREPEAT (unbounded) is a large int
            if many and nested:
                return -1
            inner = _repeats(list(body), nested or many)
            if inner < 0:
                return -1
            total += inner + (1 if many else 0)
        elif name == "BRANCH":
            if nested:
                return -1
            for branch in arg[1]:
                inner = _repeats(list(branch), nested)
                if inner < 0:
                    return -1
                total += inner
        elif name == "SUBPATTERN":
            inner = _repeats(list(arg[-1]), nested)
            if inner < 0:
                return -1
            total += inner
        elif name == "ATOMIC_GROUP":
            inner = _repeats(list(arg), nested)
            if inner < 0:
                return -1
            total += inner
        elif name in ("ASSERT", "ASSERT_NOT"):
            inner = _repeats(list(arg[1]), nested)
            if inner < 0:
                return -1
            total += inner
    return total


def set_targets(r: Reading, key: str, names: list[str]) -> None:
    """``lora_targets`` from module names (or all-linear); an adapter on embed_tokens or
    lm_head is not modelled; other names cannot be planned (one line naming them)."""
    if any(n.lower() in _ALL for n in names):
        r.set("lora_targets", "all-linear", key)
        return
    # PEFT matches a listed name as the module path's suffix (peft 0.22.0
    # tuners/tuners_utils.py:2520 key.endswith(f".{target_key}")): self_attn.q_proj is q_proj
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
