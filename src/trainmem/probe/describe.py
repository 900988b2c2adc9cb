"""The run's own description, read once from the objects the loop holds, so a trainmem plan
can be rebuilt without typing it: the model's config, what trains (PEFT adapters, a k-bit
base), dtypes, the optimizer, checkpointing, the ranks and the libraries' versions.

Everything here is read, never changed, and anything unreadable is left out (and named in
``unknown``): a description must never stop a run. Field names are trainmem plan keys
(trainmem.core.plan); the format is in trainmem.core.run_log.
"""

from __future__ import annotations

import os
import socket
import time
from importlib import metadata
from typing import Any

from trainmem.core.plan import HF_LINEAR_NAMES, LORA_MODULES, SAVABLE_MODULES
from trainmem.core.run_log import DESCRIBED, FORMAT_VERSION, RUN

_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
# Optimizer classes (module.Class) to the plan's optimizers; torch's AdamW by its flags below.
_OPTIMIZERS = {
    "bitsandbytes.optim.adamw.AdamW8bit": "adamw-8bit",
    "bitsandbytes.optim.adamw.PagedAdamW8bit": "paged-adamw-8bit",
    "bitsandbytes.optim.adamw.PagedAdamW32bit": "paged-adamw-32bit",
    "bitsandbytes.optim.lion.Lion": "lion",
    "bitsandbytes.optim.lion.Lion8bit": "lion-8bit",
    "torch.optim.sgd.SGD": "sgd",
    "transformers.optimization.Adafactor": "adafactor",
}


TORCH_PACKAGES = ("torch", "transformers", "peft", "trl", "accelerate", "trainmem-tui")


def versions(packages: tuple[str, ...] = TORCH_PACKAGES) -> dict[str, str | None]:
    """Installed versions (package metadata: nothing is imported)."""
    out: dict[str, str | None] = {}
    for name in packages:
        try:
            out[name.removesuffix("-tui")] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name.removesuffix("-tui")] = None
    return out


def ranks() -> dict[str, int]:
    """This process's rank, local rank and world size: torch.distributed when it is set up,
    else the variables torchrun and accelerate launch set (RANK, LOCAL_RANK, WORLD_SIZE)."""
    env = os.environ
    out = {
        "rank": _int(env.get("RANK"), 0),
        "local_rank": _int(env.get("LOCAL_RANK"), 0),
        "world_size": _int(env.get("WORLD_SIZE"), 1),
    }
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            out["rank"], out["world_size"] = dist.get_rank(), dist.get_world_size()
    except Exception:
        pass
    return out


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def describe_model(model: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(plan fields, model, run facts) read from a torch module (a transformers model, maybe
    wrapped by PEFT)."""
    plan: dict[str, Any] = {}
    run: dict[str, Any] = {}
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = getattr(base, "config", None)
    model_info: dict[str, Any] = {"name": getattr(config, "_name_or_path", None) or None}
    if config is not None and hasattr(config, "to_dict"):
        model_info["config"] = config.to_dict()
    peft_config = getattr(model, "peft_config", None)
    quantized = bool(
        getattr(base, "is_loaded_in_4bit", False)
        or getattr(base, "is_loaded_in_8bit", False)
        or getattr(config, "quantization_config", None)
    )
    if isinstance(peft_config, dict) and peft_config:
        plan["method"] = "qlora" if quantized else "lora"
        plan.update(_adapter(next(iter(peft_config.values()))))
        if quantized and getattr(base, "is_loaded_in_8bit", False):
            plan["quant"] = "int8"
    elif not quantized:
        plan["method"] = "full"
    dtype = _base_dtype(model)
    if dtype:
        run["dtype"] = dtype
    plan["grad_ckpt"] = any(
        bool(getattr(m, "gradient_checkpointing", False)) for m in model.modules()
    )
    total = trainable = 0
    for p in model.parameters():
        total += p.numel()
        trainable += p.numel() if p.requires_grad else 0
    run["params"], run["trainable_params"] = total, trainable
    return plan, model_info, run


def _adapter(cfg: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if getattr(cfg, "r", None) is not None:
        out["lora_rank"] = int(cfg.r)
    if getattr(cfg, "lora_alpha", None) is not None:
        out["lora_alpha"] = float(cfg.lora_alpha)
    if getattr(cfg, "lora_dropout", None) is not None:
        out["lora_dropout"] = float(cfg.lora_dropout)
    targets = getattr(cfg, "target_modules", None)
    if isinstance(targets, str) and targets == "all-linear":
        out["lora_targets"] = "all-linear"
    elif targets:
        names = [HF_LINEAR_NAMES.get(str(t).rsplit(".", 1)[-1]) for t in targets]
        known = [n for n in names if n is not None]
        if len(known) == len(names):  # other module names: the plan cannot say them
            out["lora_targets"] = ",".join(m for m in LORA_MODULES if m in known)
    saved = getattr(cfg, "modules_to_save", None)
    if saved:
        out["modules_to_save"] = ",".join(m for m in saved if m in SAVABLE_MODULES)
    return out


def _base_dtype(model: Any) -> str | None:
    """The floating dtype holding most of the parameters (a 4-bit base's are uint8 storage:
    the floating ones left are the compute dtype's)."""
    counts: dict[str, int] = {}
    for p in model.parameters():
        name = str(p.dtype).replace("torch.", "")
        if name in _DTYPES:
            counts[name] = counts.get(name, 0) + p.numel()
    return max(counts, key=lambda k: counts[k]) if counts else None


def precision(dtype: str | None, bf16: bool, fp16: bool) -> str | None:
    """The plan's precision: fp32 weights under autocast are "-mixed"; 16-bit weights are the
    dtype itself (autocast to the same dtype changes nothing)."""
    if dtype is None:
        return None
    short = _DTYPES[dtype]
    if short == "fp32" and (bf16 or fp16):
        return "bf16-mixed" if bf16 else "fp16-mixed"
    return short


def optimizer_name(optimizer: Any) -> tuple[str | None, str]:
    """(the plan's optimizer or None, the class as module.Class) for an optimizer, unwrapping
    accelerate's AcceleratedOptimizer."""
    opt = getattr(optimizer, "optimizer", optimizer)
    cls = f"{type(opt).__module__}.{type(opt).__name__}"
    if type(opt).__name__ == "AdamW" and type(opt).__module__.startswith("torch.optim"):
        fused = bool(getattr(opt, "defaults", {}).get("fused"))
        return ("adamw" if fused else "adamw-foreach"), cls
    return _OPTIMIZERS.get(cls), cls


def host() -> str:
    try:
        return socket.gethostname()
    except Exception:
        return ""


def unknown(plan: dict[str, Any]) -> list[str]:
    return [k for k in DESCRIBED if plan.get(k) is None]


def run_record(
    ranks: dict[str, int],
    *,
    device: dict[str, Any],
    peaks: str,
    plan: dict[str, Any],
    observed: list[str],
    model: dict[str, Any],
    run: dict[str, Any],
    versions: dict[str, str | None],
) -> dict[str, Any]:
    """The log's first record (trainmem.core.run_log RUN): what ran, where, and the plan
    fields read from it; ``unknown`` names the plan fields neither read nor observed later."""
    return {
        "format": FORMAT_VERSION,
        "kind": RUN,
        "time": time.time(),
        **ranks,
        "pid": os.getpid(),
        "host": host(),
        "device": device,
        "peaks": peaks,
        "plan": plan,
        "observed": observed,
        "model": model,
        "run": run,
        "versions": versions,
        "unknown": [k for k in unknown(plan) if k not in observed],
    }
