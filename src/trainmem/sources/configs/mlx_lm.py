"""mlx-lm's LoRA trainer: its YAML config (``mlx_lm.lora --config FILE``) and its command line
(``mlx_lm.lora --model ... --train --fine-tune-type dora --num-layers 8``, also ``python -m
mlx_lm lora ...``), read as mlx-lm 0.32.2 reads them (mlx_lm/lora.py): the command line's
options over the file's keys, then CONFIG_DEFAULTS (lora.py:45-82) for what neither sets
(main(), lora.py:373-392). Options are the file's keys with ``-`` for ``_``
(``--fine-tune-type`` is ``fine_tune_type``); ``lora_parameters`` only a file can give."""

from __future__ import annotations

import re

from trainmem.core.units import shown
from trainmem.sources.configs.common import ConfigPlan, Doc, Reading
from trainmem.sources.configs.lora import set_targets

FRAMEWORK = "mlx-lm 0.32.2"
SRC = "mlx_lm/lora.py"
# Keys no other framework's config has (lora.py CONFIG_DEFAULTS and build_parser).
MARKERS = (
    "fine_tune_type",
    "num_layers",
    "lora_parameters",
    "grad_checkpoint",
    "iters",
    "steps_per_report",
    "steps_per_eval",
    "val_batches",
    "test_batches",
    "adapter_path",
    "resume_adapter_file",
    "save_every",
    "grad_accumulation_steps",
    "clear_cache_threshold",
)
_KNOWN = (
    *MARKERS,
    "model",
    "train",
    "optimizer",
    "optimizer_config",
    "data",
    "seed",
    "batch_size",
    "learning_rate",
    "test",
    "max_seq_length",
    "config",
    "lr_schedule",
    "mask_prompt",
    "report_to",
    "project_name",
    "trust_remote_code",
    "hf_dataset",
    "wandb",
)
_OPTIMIZERS = {"adam": "adamw", "adamw": "adamw", "sgd": "sgd", "adafactor": "adafactor"}
# An MLX conversion as the Hub names it (mlx_lm.convert; mlx-community's "...-4bit",
# "...-bf16"): the source model's name plus a quantization or dtype; its bits are in its
# config.json "quantization", which is not read here.
_CONVERTED = re.compile(r"(?:-mlx)?-(?:([2-8])bit|(bf16|fp16|bfloat16|float16))$", re.IGNORECASE)
_QUANTIZED = re.compile(r"-([2-8])bit$", re.IGNORECASE)
_DTYPES = {"bf16": "bf16", "bfloat16": "bf16", "fp16": "fp16", "float16": "fp16"}


def looks_like(doc: Doc) -> int:
    return sum(k in doc.data for k in MARKERS) * 2


def read(doc: Doc) -> ConfigPlan:
    r = Reading(doc, FRAMEWORK)
    r.values["stack"], r.origins["stack"] = "mlx", f"{doc.name}: mlx-lm keys"
    r.explicit.add("stack")
    model = doc.text("model")
    if model:
        _model(r, model)
    else:
        r.notes.append(f"{doc.name} names no model: the plan's model is --model's")
    if doc.flag("train") is not True:
        r.notes.append(
            f"{doc.name}: train is not set: mlx_lm.lora then does not train "
            f"({SRC} run: 'Must provide at least one of --train or --test'); planned as "
            "if it did"
        )
    _method(r, model or "")
    r.keyed("mlx_num_layers", "num_layers", doc.integer, 16, f"{SRC}:59")
    r.keyed("batch", "batch_size", doc.integer, 4, f"{SRC}:60")
    # iterate_batches pads each batch to its longest row (a multiple of 32, plus one),
    # at most max_seq_length (mlx_lm/tuner/trainer.py:158-161): the longest step's length
    r.keyed("seq_len", "max_seq_length", doc.integer, 2048, f"{SRC}:71")
    r.keyed("grad_ckpt", "grad_checkpoint", doc.flag, False, f"{SRC}:73")
    _optimizer(r)
    accumulation = doc.integer("grad_accumulation_steps")
    if accumulation is not None and accumulation > 1:  # trainer.py train(): grad kept
        r.unmodelled_key(
            "grad_accumulation_steps",
            "the summed gradient is held between micro-steps (mlx_lm/tuner/trainer.py)",
        )
    r.typos(_KNOWN)
    return r.result()


def _model(r: Reading, model: str) -> None:
    """The model; an mlx-community conversion as the model it converts (same architecture),
    its dtype suffix as the precision it trains in (mlx-lm trains in the weights' dtype)."""
    org, _, name = model.rpartition("/")
    found = _CONVERTED.search(name)
    if found is None or org.lower() != "mlx-community":
        r.set("model", model, "model")
        return
    source = name[: found.start()]
    r.set("model", source, "model")
    r.origins["model"] += f" ({shown(model)}: mlx_lm.convert's conversion of {shown(source)})"
    dtype = found.group(2)
    if dtype:
        r.set("precision", _DTYPES[dtype.lower()], "model")


def _method(r: Reading, model: str) -> None:
    doc = r.doc
    kind = (doc.text("fine_tune_type") or "lora").lower()  # lora.py:48
    if kind not in ("lora", "dora", "full"):
        raise doc.error("fine_tune_type", f"{shown(kind)} is not lora, dora or full")
    quantized = _QUANTIZED.search(model)
    if kind == "full":
        if quantized:
            raise doc.error(
                "fine_tune_type",
                f"full: {shown(model)} is MLX-quantized; a full fine-tune trains its weights",
            )
        if doc.has("fine_tune_type"):
            r.set("method", "full", "fine_tune_type")
        else:
            r.default("method", "full", f"{SRC}:48")
        return
    method = "qlora" if quantized else "lora"
    if doc.has("fine_tune_type"):
        r.set("method", method, "fine_tune_type")
        r.set("dora", kind == "dora", "fine_tune_type")
    else:
        r.default("method", method, f"{SRC}:48")
        r.default("dora", False, f"{SRC}:48")
    if quantized:
        r.set("mlx_bits", int(quantized.group(1)), "model")
        r.origins["method"] += f"; {doc.origin('model')} names an MLX-quantized checkpoint"
        r.origins["mlx_bits"] += " (its name's -Nbit, as mlx_lm.convert -q writes them)"
        r.notes.append(
            f"{doc.origin('model')}: quantized as its name says; the group size (64 unless "
            "--q-group-size) is in its config.json, not read here"
        )
    _lora(r)


def _lora(r: Reading) -> None:
    """``lora_parameters`` (lora.py:77: rank 8, dropout 0.0, scale 20.0; ``keys``: every
    Linear of the trained layers, mlx_lm/tuner/utils.py linear_to_lora_layers)."""
    doc = r.doc
    params = doc.lookup("lora_parameters")
    if params is not None and not isinstance(params, dict):
        raise doc.error("lora_parameters", f"{shown(params)} is not a mapping")
    r.keyed("lora_rank", "lora_parameters.rank", doc.integer, 8, f"{SRC}:77")
    r.keyed("lora_dropout", "lora_parameters.dropout", doc.number, 0.0, f"{SRC}:77")
    keys = doc.names("lora_parameters.keys")
    if keys:
        set_targets(r, "lora_parameters.keys", keys)
    else:
        r.default("lora_targets", "all-linear", "mlx_lm/tuner/utils.py linear_to_lora_layers")


def _optimizer(r: Reading) -> None:
    doc = r.doc
    name = (doc.text("optimizer") or "").lower()
    if not name:
        r.default("optimizer", "adamw", f"{SRC}:49 adam (m and v, as AdamW)")
        return
    planned = _OPTIMIZERS.get(name)
    if planned is None:
        raise doc.error(
            "optimizer",
            f"{shown(name)} is not planned: adam, adamw, sgd or adafactor (muon's states are "
            "not modelled)",
        )
    r.set("optimizer", planned, "optimizer")
