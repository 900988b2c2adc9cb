"""accelerate config YAML (`accelerate config`, accelerate 1.15.0
commands/config/config_args.py; plugin defaults in utils/dataclasses.py): processes,
machines, mixed precision and the DeepSpeed plugin map to plan fields; FSDP is named as
not modelled (issue 10)."""

from __future__ import annotations

from trainmem.sources.configs.common import ConfigPlan, Doc, ReadFile, Reading, named_path

FRAMEWORK = "accelerate 1.15.0"
_PRECISION = {"bf16": "bf16-mixed", "fp16": "fp16-mixed"}  # autocast over fp32 weights
_FSDP_KEYS = (
    "fsdp_version",
    "fsdp_sharding_strategy",
    "fsdp_reshard_after_forward",
    "fsdp_offload_params",
    "fsdp_activation_checkpointing",
    "fsdp_cpu_ram_efficient_loading",
    "fsdp_auto_wrap_policy",
)


def looks_like(doc: Doc) -> int:
    keys = ("compute_environment", "distributed_type", "num_machines", "machine_rank")
    return sum(k in doc.data for k in keys) * 2


def read(doc: Doc, read_file: ReadFile) -> ConfigPlan:
    r = Reading(doc, FRAMEWORK, kind="launcher")
    kind = (doc.text("distributed_type") or "NO").upper()
    processes = doc.integer("num_processes")
    if processes is not None and processes >= 1 and kind != "NO":
        r.set("gpus", processes, "num_processes")  # all processes, over every machine
    machines = doc.integer("num_machines")
    if machines is not None and machines > 1:
        r.unmodelled_key("num_machines", "several nodes: planned per GPU")
    precision = (doc.text("mixed_precision") or "no").lower()
    if precision in _PRECISION:
        r.set("precision", _PRECISION[precision], "mixed_precision")
    elif precision not in ("no", "none"):
        r.unmodelled_key("mixed_precision", f"{precision} is not modelled")
    if kind == "FSDP":
        r.unmodelled_key("distributed_type", "FSDP sharding is not modelled (issue 10)")
        for key in _FSDP_KEYS:
            if doc.has(f"fsdp_config.{key}"):
                r.unmodelled_key(f"fsdp_config.{key}")
    elif kind == "DEEPSPEED":
        _deepspeed(r, read_file)
    elif kind not in ("NO", "MULTI_GPU", "MULTI_CPU"):
        r.unmodelled_key("distributed_type", f"{kind} is not modelled")
    return r.result()


def _deepspeed(r: Reading, read_file: ReadFile) -> None:
    doc, prefix = r.doc, "deepspeed_config"
    file_key = f"{prefix}.deepspeed_config_file"
    text = doc.text(file_key)
    if text and text.lower() != "none":
        r.merged(read_file(named_path(doc, file_key, text), doc.origin(file_key)))
        return
    stage = doc.integer(f"{prefix}.zero_stage")
    if stage is None:  # env ACCELERATE_DEEPSPEED_ZERO_STAGE, else 2
        r.default("zero", 2, "accelerate/utils/dataclasses.py:1238")
    elif stage not in (0, 1, 2, 3):
        raise doc.error(f"{prefix}.zero_stage", f"{stage} is not a ZeRO stage (0-3)")
    else:
        r.set("zero", stage, f"{prefix}.zero_stage")
    param = (doc.text(f"{prefix}.offload_param_device") or "none").lower()
    optimizer = (doc.text(f"{prefix}.offload_optimizer_device") or "none").lower()
    if param != "none":
        r.set("offload", "params", f"{prefix}.offload_param_device")
    elif optimizer != "none":
        r.set("offload", "optimizer", f"{prefix}.offload_optimizer_device")
    else:
        r.default("offload", "none", "accelerate/utils/dataclasses.py:1240-1244")
