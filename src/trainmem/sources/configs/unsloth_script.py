"""An Unsloth training script (Python) read as a config: the calls a notebook makes, parsed
with ``ast`` and never executed.

Read: ``FastLanguageModel.from_pretrained`` (or ``FastModel``'s), ``get_peft_model``, the
``SFTConfig`` / ``TrainingArguments`` call (its keys go through the TrainingArguments reader)
and ``SFTTrainer``'s own length and packing keywords. A keyword is read only when it is a
literal (``ast.literal_eval``), a module-level name bound once to a literal, or a torch dtype
for ``dtype``; anything else is named in the notes as not a literal, as are calls of Unsloth,
TRL or transformers classes this reader does not know. The origin of each value is the line
of that value. Defaults are Unsloth's at 015bdef (unslothai/unsloth), each with its file.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from trainmem.core.errors import PlanError
from trainmem.sources import files
from trainmem.sources.configs import trainer_args
from trainmem.sources.configs.common import FIELD, ConfigPlan, Doc, ReadFile, Reading
from trainmem.sources.configs.lora import set_modules_to_save, set_targets

UNSLOTH = "Unsloth 015bdef"
MAX_SCRIPT = 2**20  # a training notebook's code is kilobytes
MAX_NODES = 200_000  # syntax nodes walked, at most
LOADERS = ("FastLanguageModel", "FastModel")
CONFIGS = {"SFTConfig": True, "UnslothTrainingArguments": False, "TrainingArguments": False}
TRAINERS = ("SFTTrainer", "UnslothTrainer", "Trainer")
TORCH_DTYPES = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}
# Positional parameters, as the signatures order them (unsloth/models/loader.py
# FastLanguageModel.from_pretrained, unsloth/models/llama.py FastLlamaModel.get_peft_model).
POSITIONAL = {
    "from_pretrained": ("model_name", "max_seq_length", "dtype", "load_in_4bit"),
    "get_peft_model": ("model", "r", "target_modules", "lora_alpha", "lora_dropout"),
}
_FAMILY = re.compile(r"^(Fast\w*|\w*Trainer|\w*Config|\w*Arguments)$")
LOADER_PY = "unsloth/models/loader.py FastLanguageModel.from_pretrained"
PEFT_PY = "unsloth/models/llama.py FastLlamaModel.get_peft_model"
_DTYPE_NAMES = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16"}
_DTYPE_NAMES |= {"fp32": "fp32", "float32": "fp32"}
_DROPPED = ("stack", "seq_len", "method", "loss", "precision", "base_dtype")


def is_script(path: Path) -> bool:
    return path.suffix == ".py"


@dataclass
class _Call:
    name: str  # from_pretrained, get_peft_model, SFTConfig, ...
    line: int
    values: dict[str, Any] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)


def read_file(path: Path, read_named: ReadFile) -> ConfigPlan:
    """The plan of the script at ``path``; PlanError (one line) when it cannot be read."""
    try:
        text = files.read_text(path, limit=MAX_SCRIPT, what="Unsloth script")
    except files.FileReadError as exc:
        raise PlanError(FIELD, str(exc)) from None
    return read_script(text, files.show(path), path, read_named)


def read_script(text: str, name: str, path: Path | None, read_named: ReadFile) -> ConfigPlan:
    tree = _parse(text, name)
    notes: list[str] = []
    bound = _module_literals(tree)
    calls: dict[str, _Call] = {}
    for node in _walk(tree, name):
        if not isinstance(node, ast.Call):
            continue
        dotted = _dotted(node.func)
        kind = _kind(dotted)
        if kind is None:
            last = dotted.rsplit(".", 1)[-1]
            owner = dotted.split(".")[0]
            if owner in LOADERS or _FAMILY.match(last):
                notes.append(f"{name}:{node.lineno}: {dotted}(...) is not read")
            continue
        if kind in calls:
            notes.append(f"{name}:{node.lineno}: a second {dotted}(...) is not read")
            continue
        calls[kind] = _read_call(kind, node, bound, name, notes)
    if "from_pretrained" not in calls:
        raise PlanError(
            FIELD,
            f"{name}: no FastLanguageModel.from_pretrained(...) call: not an Unsloth script "
            "trainmem reads",
        )
    plan = _unsloth_plan(calls, name, path, notes)
    config = next((calls[k] for k in CONFIGS if k in calls), None)
    if config is None:
        return plan
    # lengths are Unsloth's (_length): TRL 1.16 alone would refuse max_seq_length
    keys = {k: v for k, v in config.values.items() if k not in ("max_seq_length", "max_length")}
    doc = Doc(name, keys, config.lines, path)
    sft = trainer_args.read(doc, read_named, trl=CONFIGS[config.name])
    kept = {k: v for k, v in sft.values.items() if k not in _DROPPED}
    sft = replace(
        sft,
        values=kept,
        origins={k: sft.origins[k] for k in kept},
        explicit=sft.explicit & set(kept),
        notes=tuple(n for n in sft.notes if "names no model" not in n),  # from_pretrained does
    )
    return sft.under(plan)


def _parse(text: str, name: str) -> ast.Module:
    try:
        return ast.parse(text, filename=name)
    except SyntaxError as exc:
        why = " ".join(str(exc.msg).split())
        raise PlanError(FIELD, f"{name}:{exc.lineno or 1}: not valid Python: {why}") from None
    except (ValueError, RecursionError, MemoryError, OverflowError) as exc:
        # CPython's parser raises MemoryError, with no text, for a deep enough expression
        deep = isinstance(exc, (RecursionError, MemoryError)) or not str(exc).strip()
        why = "nested too deeply" if deep else " ".join(str(exc).split())
        raise PlanError(FIELD, f"{name}: not valid Python: {why[:120]}") from None


def _walk(tree: ast.Module, name: str) -> list[ast.AST]:
    nodes: list[ast.AST] = []
    for node in ast.walk(tree):
        nodes.append(node)
        if len(nodes) > MAX_NODES:
            raise PlanError(FIELD, f"{name}: over {MAX_NODES:,} syntax nodes: not a notebook")
    return nodes


def _module_literals(tree: ast.Module) -> dict[str, tuple[Any, int]]:
    """Names bound exactly once at module level, to a literal: (value, line)."""
    seen: dict[str, int] = {}
    values: dict[str, tuple[Any, int]] = {}
    for stmt in tree.body:
        if isinstance(stmt, ast.Assign):
            targets, value = stmt.targets, stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            targets, value = [stmt.target], stmt.value
        else:
            continue
        for target in targets:
            if not isinstance(target, ast.Name):
                continue
            seen[target.id] = seen.get(target.id, 0) + 1
            literal = _literal(value)
            if literal is not _NOT:
                values[target.id] = (literal, stmt.lineno)
    return {k: v for k, v in values.items() if seen[k] == 1}


_NOT = object()


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT


def _dotted(node: ast.AST) -> str:
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    elif isinstance(node, ast.Call):
        parts.append(_dotted(node.func) + "()")
    return ".".join(reversed(parts)) if parts else "?"


def _kind(dotted: str) -> str | None:
    parts = dotted.split(".")
    last = parts[-1]
    if last in ("from_pretrained", "get_peft_model") and len(parts) > 1 and parts[-2] in LOADERS:
        return last
    if last in CONFIGS or last in TRAINERS:
        return last
    return None


def _read_call(
    kind: str, node: ast.Call, bound: dict[str, tuple[Any, int]], name: str, notes: list[str]
) -> _Call:
    call = _Call(kind, node.lineno)
    names = POSITIONAL.get(kind, ())
    pairs: list[tuple[str, ast.expr]] = [
        (names[i], arg) for i, arg in enumerate(node.args) if i < len(names)
    ]
    for kw in node.keywords:
        if kw.arg is None:
            notes.append(f"{name}:{kw.value.lineno}: {kind}(**...) is not read")
        else:
            pairs.append((kw.arg, kw.value))
    for key, value in pairs:
        if key in ("model", "args", "train_dataset", "eval_dataset", "tokenizer"):
            continue  # objects, not settings
        read = _value(key, value, bound)
        if read is _NOT:
            notes.append(f"{name}:{value.lineno}: {kind}.{key} is not a literal, not read")
            continue
        call.values[key], call.lines[key] = read
    return call


def _value(key: str, node: ast.expr, bound: dict[str, tuple[Any, int]]) -> Any:
    """(value, line) of a keyword: a literal, a module-level literal name, a torch dtype."""
    if isinstance(node, ast.Name) and node.id in bound:
        return bound[node.id]
    if key == "dtype" and _dotted(node) in TORCH_DTYPES:
        return TORCH_DTYPES[_dotted(node)], node.lineno
    literal = _literal(node)
    return _NOT if literal is _NOT else (literal, node.lineno)


def _unsloth_plan(
    calls: dict[str, _Call], name: str, path: Path | None, notes: list[str]
) -> ConfigPlan:
    data: dict[str, Any] = {}
    lines: dict[str, int] = {}
    for kind, call in calls.items():
        if kind in ("from_pretrained", "get_peft_model", *TRAINERS):
            data[kind] = call.values
            lines.update({f"{kind}.{k}": n for k, n in call.lines.items()})
    config = next((calls[k] for k in CONFIGS if k in calls), None)
    if config is not None:
        data["config"] = config.values
        lines.update({f"config.{k}": n for k, n in config.lines.items()})
    doc = Doc(name, data, lines, path)
    r = Reading(doc, UNSLOTH)
    r.notes.extend(notes)
    r.values["stack"], r.origins["stack"] = "unsloth", f"{name}: FastLanguageModel"
    r.explicit.add("stack")
    r.values["loss"], r.origins["loss"] = (
        "auto",
        f"{UNSLOTH} (unsloth/models/rl.py _pin_pristine_sft_loss_type: loss_type nll, so its "
        "own fused loss runs)",
    )
    load = "from_pretrained"
    r.keyed("model", f"{load}.model_name", doc.text, "unsloth/Llama-3.2-1B-Instruct", LOADER_PY)
    _method(r)
    _precision(r)
    if r.values["method"] != "full":
        _adapter(r, "get_peft_model" in calls)
    _length(r)
    trainer = next((k for k in TRAINERS if k in calls), None)
    if trainer and doc.flag(f"{trainer}.packing"):
        r.set("packing", True, f"{trainer}.packing")
    blocked = trainer is not None and "data_collator" in calls[trainer].values
    if not blocked and not (config is not None and config.values.get("packing")):
        r.notes.append(
            f"{UNSLOTH} turns on padding-free batching (unsloth/trainer.py "
            "_patch_sft_trainer_auto_packing): each row is as long as its example; the "
            "estimate counts the longest"
        )
    return r.result()


def _method(r: Reading) -> None:
    doc = r.doc
    full = doc.flag("from_pretrained.full_finetuning")
    eight = doc.flag("from_pretrained.load_in_8bit")
    sixteen = doc.flag("from_pretrained.load_in_16bit")
    four = doc.flag("from_pretrained.load_in_4bit")
    if full:
        r.set("method", "full", "from_pretrained.full_finetuning")
    elif eight:
        r.set("method", "qlora", "from_pretrained.load_in_8bit")
        r.set("quant", "int8", "from_pretrained.load_in_8bit")
    elif sixteen or four is False:
        key = "from_pretrained.load_in_16bit" if sixteen else "from_pretrained.load_in_4bit"
        r.set("method", "lora", key)
    else:
        if four:
            r.set("method", "qlora", "from_pretrained.load_in_4bit")
        else:
            r.default("method", "qlora", f"{LOADER_PY}: load_in_4bit True")
        # NF4 with double quant (unsloth/models/llama.py FastLlamaModel.from_pretrained)
        r.default("quant", "nf4", "unsloth/models/llama.py BitsAndBytesConfig")
        r.default("double_quant", True, "unsloth/models/llama.py BitsAndBytesConfig")
        r.notes.append(
            f"{UNSLOTH} maps a model name to its pre-quantized 4-bit checkpoint "
            "(unsloth/models/loader_utils.py get_model_name); a 'dynamic' -unsloth-bnb-4bit one "
            "keeps some linears in 16-bit: plan that checkpoint's config.json to count them"
        )


def _precision(r: Reading) -> None:
    """The dtype Unsloth loads the model in (dtype None: bf16 where the GPU has it), under
    the Trainer's autocast of the same 16-bit type for adapters, as its notebooks run."""
    doc = r.doc
    dtype = doc.text("from_pretrained.dtype")
    config = doc.lookup("config") or {}
    for flag, mixed in (("bf16", "bf16"), ("fp16", "fp16")):
        if config.get(flag) is True:
            dtype = mixed
    chosen = _DTYPE_NAMES.get((dtype or "bf16").lower().removeprefix("torch."))
    if chosen is None:
        raise doc.error("from_pretrained.dtype", f"{dtype!r} is not a torch dtype")
    adapter = r.values["method"] != "full"
    precision = f"{chosen}-mixed" if adapter and chosen != "fp32" else chosen
    if doc.has("from_pretrained.dtype"):
        r.set("precision", precision, "from_pretrained.dtype")
    else:
        r.default("precision", precision, f"{LOADER_PY}: dtype None is bf16 where supported")


def _adapter(r: Reading, called: bool) -> None:
    doc = r.doc
    peft = "get_peft_model"
    if not called:
        r.notes.append(f"{doc.name}: no get_peft_model(...) call: LoRA planned at its defaults")
    r.keyed("lora_rank", f"{peft}.r", doc.integer, 16, PEFT_PY)
    r.keyed("lora_alpha", f"{peft}.lora_alpha", doc.number, 16.0, PEFT_PY)
    r.keyed("lora_dropout", f"{peft}.lora_dropout", doc.number, 0.0, PEFT_PY)
    targets = doc.names(f"{peft}.target_modules")
    if targets:
        set_targets(r, f"{peft}.target_modules", targets)
    else:  # q, k, v, o, gate, up and down
        r.default("lora_targets", "all-linear", PEFT_PY)
    saved = doc.names(f"{peft}.modules_to_save")
    if saved:
        set_modules_to_save(r, f"{peft}.modules_to_save", saved)
    bias = doc.text(f"{peft}.bias")
    if bias and bias != "none":
        r.unmodelled_key(f"{peft}.bias", "trained biases; Unsloth's fused LoRA is then off")
    r.unmodelled_present({f"{peft}.use_dora": "DoRA magnitude vectors"})
    key = f"{peft}.use_gradient_checkpointing"
    if not doc.has(key) and doc.has("from_pretrained.use_gradient_checkpointing"):
        key = "from_pretrained.use_gradient_checkpointing"
    mode = doc.lookup(key)
    if mode is None:
        r.default("grad_ckpt", True, f'{PEFT_PY}: use_gradient_checkpointing="unsloth"')
        r.default("ckpt_offload", True, f'{PEFT_PY}: use_gradient_checkpointing="unsloth"')
    elif mode == "unsloth":
        r.set("grad_ckpt", True, key)
        r.set("ckpt_offload", True, key)
    elif isinstance(mode, bool):
        r.set("grad_ckpt", mode, key)
        r.set("ckpt_offload", False, key)
    else:
        raise doc.error(key, f"{mode!r} is not 'unsloth', True or False")


def _length(r: Reading) -> None:
    """Unsloth's SFTTrainer trains at SFTConfig's max_seq_length, else the model's
    (from_pretrained's max_seq_length); a max_length alone is replaced by the model's
    (unsloth/models/rl.py, the generated trainer's max_length check)."""
    doc = r.doc
    for key in ("config.max_seq_length", "SFTTrainer.max_seq_length"):
        if doc.has(key):
            r.set("seq_len", doc.integer(key), key)
            return
    r.keyed("seq_len", "from_pretrained.max_seq_length", doc.integer, 2048, LOADER_PY)
    if doc.has("config.max_length"):
        r.notes.append(
            f"{doc.origin('config.max_length')}: replaced by the model's max_seq_length "
            "(unsloth/models/rl.py)"
        )
