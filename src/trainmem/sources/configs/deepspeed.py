"""DeepSpeed JSON (deepspeedai/DeepSpeed edaa722, deepspeed/runtime/zero/config.py and
offload_config.py), as the Hugging Face Trainer fills it (transformers 5.24
integrations/deepspeed.py): the ZeRO stage, offload, the reduce and prefetch buckets,
overlap_comm and the stage-3 limits map to plan fields ("auto" to -1: the Trainer sizes them
from hidden_size); the rest is named as not modelled."""

from __future__ import annotations

from trainmem.core.units import NumberError, checked_number, shown
from trainmem.sources.configs.common import ConfigPlan, Doc, Reading

FRAMEWORK = "DeepSpeed edaa722"
ZERO = "zero_optimization"
# zero_optimization keys that are plan fields (the config's aliases, zero/config.py:215-238);
# "auto" is the Trainer's (integrations/deepspeed.py:232-241) and becomes -1.
_SIZES = {
    "reduce_bucket_size": "reduce_bucket",
    "stage3_prefetch_bucket_size": "prefetch_bucket",
    "prefetch_bucket_size": "prefetch_bucket",
    "stage3_param_persistence_threshold": "persistence_threshold",
    "param_persistence_threshold": "persistence_threshold",
    "stage3_max_live_parameters": "max_live_params",
    "max_live_parameters": "max_live_params",
}
_NO_AUTO = ("max_live_params",)  # the Trainer fills no "auto" for it
# DeepSpeed 0.19.8 zero/config.py:113 reduce_bucket_size Field(gt=0); the others are ge=0
_POSITIVE = ("reduce_bucket",)
# Keys that size buffers or limits on the GPU and are not modelled.
_UNMODELLED = (
    "allgather_bucket_size",
    "stage3_max_reuse_distance",
    "sub_group_size",
    "zero_hpz_partition_size",
    "zero_quantized_weights",
    "zero_quantized_gradients",
    "mics_shard_size",
    "offload_param.buffer_count",
    "offload_param.buffer_size",
    "offload_param.max_in_cpu",
    "offload_optimizer.buffer_count",
    "offload_optimizer.ratio",
)
_DEVICES = ("none", "cpu", "nvme")


def looks_like(doc: Doc) -> int:
    """How many DeepSpeed-only top-level keys the document has."""
    keys = (ZERO, "train_micro_batch_size_per_gpu", "train_batch_size", "gradient_clipping")
    return sum(k in doc.data for k in keys) + (3 if ZERO in doc.data else 0)


# The blocks DeepSpeed's config model reads as objects (runtime/config.py, zero/config.py):
# one given as anything else is refused there, and here, not read as absent.
_BLOCKS = (ZERO, f"{ZERO}.offload_optimizer", f"{ZERO}.offload_param", "bf16", "fp16")


def read(doc: Doc) -> ConfigPlan:
    r = Reading(doc, FRAMEWORK, kind="launcher")
    for key in _BLOCKS:
        value = doc.lookup(key)
        if value is not None and not isinstance(value, dict):
            raise doc.error(key, f"{shown(value)} is not a block of keys ({{...}})")
    stage = doc.integer(f"{ZERO}.stage")
    if stage is None:
        r.default("zero", 0, "deepspeed/runtime/zero/config.py:95")
    elif stage not in (0, 1, 2, 3):
        raise doc.error(f"{ZERO}.stage", f"{stage} is not a ZeRO stage (0, 1, 2 or 3)")
    else:
        r.set("zero", stage, f"{ZERO}.stage")
    _offload(r)
    batch = doc.lookup("train_micro_batch_size_per_gpu")
    if batch is not None and batch != "auto":  # "auto": the Trainer's per-device batch
        r.set(
            "batch", doc.integer("train_micro_batch_size_per_gpu"), "train_micro_batch_size_per_gpu"
        )
    r.set("strategy", "zero", f"{ZERO}.stage" if stage is not None else ZERO)
    _precision(r)
    _sizes(r)
    overlap = doc.lookup(f"{ZERO}.overlap_comm")
    if overlap is not None and overlap != "auto":
        r.set("overlap_comm", bool(doc.flag(f"{ZERO}.overlap_comm")), f"{ZERO}.overlap_comm")
    for key in (f"{ZERO}.{k}" for k in _UNMODELLED):
        if doc.lookup(key) is not None:
            r.unmodelled_key(key)
    r.unmodelled_present({"activation_checkpointing": "DeepSpeed's own checkpointing"})
    return r.result()


def _sizes(r: Reading) -> None:
    doc = r.doc
    for short, field in _SIZES.items():
        key = f"{ZERO}.{short}"
        value = doc.lookup(key)
        if value is None:
            continue
        if value == "auto" and field not in _NO_AUTO:
            r.set(field, -1, key)
            continue
        if isinstance(value, str):  # DeepSpeed's pydantic model reads no text but "auto"
            raise doc.error(key, f'{shown(value)} is not a size in elements or "auto"')
        try:  # JSON often writes 5e8; Infinity, NaN and 400 digits are one line each
            low = 1 if field in _POSITIVE else 0
            r.set(field, int(checked_number(value, whole=True, low=low)), key)
        except NumberError as exc:
            raise doc.error(key, f'{exc} (a size in elements, or "auto")') from None


def _precision(r: Reading) -> None:
    """bf16.enabled / fp16.enabled: the engine casts the model's parameters to that dtype
    (runtime/engine.py _configure_distributed_model, _cast_module_mixed_precision) and ZeRO
    keeps the fp32 master (trainmem.core.recipes ZERO_BF16 / ZERO_FP16); nothing autocasts.
    "auto" is the Trainer's bf16 / fp16 (transformers integrations/deepspeed.py:183-184)."""
    doc = r.doc
    # runtime/config.py _do_error_check: "bfloat16 and fp16 modes cannot be simultaneously
    # enabled"
    if all(doc.lookup(f"{n}.enabled") is True for n in ("bf16", "fp16")):
        raise doc.error("fp16.enabled", "fp16 and bf16 are both enabled, which DeepSpeed refuses")
    for name in ("bf16", "fp16"):
        key = f"{name}.enabled"
        value = doc.lookup(key)
        if value is None or value == "auto":
            continue
        if doc.flag(key):
            r.set("precision", name, key)
            return


def _offload(r: Reading) -> None:
    """The two offload blocks, or the deprecated switches that stand for them: cpu_offload
    true is offload_optimizer on the CPU, cpu_offload_param true offload_param (zero/config.py
    :181-188, :202-210; DeepSpeedConfigModel refuses a switch beside the block it replaces,
    runtime/config_utils.py _process_deprecated_field)."""
    doc = r.doc
    devices: list[tuple[str, str]] = []
    for block, legacy in (
        ("offload_optimizer", "cpu_offload"),
        ("offload_param", "cpu_offload_param"),
    ):
        key, legacy_key = f"{ZERO}.{block}.device", f"{ZERO}.{legacy}"
        switch = doc.flag(legacy_key)
        if switch is None:
            devices.append((key, device_at(r, key)))
        elif doc.has(f"{ZERO}.{block}"):
            raise doc.error(
                legacy_key, f"deprecated for {block}, which is given too: DeepSpeed refuses both"
            )
        else:
            devices.append((legacy_key, "cpu" if switch else "none"))
    (optimizer_key, optimizer), (param_key, param) = devices
    set_offload(
        r,
        optimizer_key,
        optimizer,
        param_key,
        param,
        "deepspeed/runtime/zero/offload_config.py:24, :58",
    )


def read_offload(r: Reading, optimizer_key: str, param_key: str, default_source: str) -> None:
    """ZeRO's offload from its two device keys (DeepSpeed's OffloadDeviceEnum: none, cpu,
    nvme; anything else is refused, as DeepSpeed refuses it)."""
    optimizer, param = device_at(r, optimizer_key), device_at(r, param_key)
    set_offload(r, optimizer_key, optimizer, param_key, param, default_source)


def device_at(r: Reading, key: str) -> str:
    doc = r.doc
    device = (doc.text(key) or "none").lower() if doc.lookup(key) != "auto" else "none"
    if device not in _DEVICES:
        raise doc.error(key, f"{shown(device)} is not none, cpu or nvme")
    return device


def set_offload(
    r: Reading, optimizer_key: str, optimizer: str, param_key: str, param: str, default_source: str
) -> None:
    """The plan's offload: params (optimizer and parameters), optimizer, or none. Parameters
    offloaded alone are planned as none: without offload_optimizer ZeRO-3 keeps the fp32
    master, the optimizer states and the gradient partitions on the GPU (stage3.py:328
    self.device, :742-744, :1107-1120), which the plan's params moves to the CPU (it would
    err low); none counts the 16-bit parameter partition on the GPU too, 2·P/N bytes over
    (DeepSpeed 0.19.8 partition_parameters.py:1160-1168 keeps it in pinned host RAM: 2 GB a
    GPU for an 8B model on 8). Below stage 3 offload_param is read by nothing (only stage3.py's
    optimizer takes zero_config.offload_param, engine.py:2655-2773 _configure_zero_optimizer),
    so it is named and left out."""
    stage = r.values.get("zero", 0)
    if param != "none" and stage != 3:
        r.unmodelled_key(param_key, f"read by ZeRO-3 only: DeepSpeed ignores it at stage {stage}")
        param = "none"
    planned = []  # the keys whose offload the plan keeps, for the NVMe note
    if param != "none" and optimizer != "none":
        r.set("offload", "params", param_key)
        planned = [(optimizer_key, optimizer), (param_key, param)]
    elif optimizer != "none":
        r.set("offload", "optimizer", optimizer_key)
        planned = [(optimizer_key, optimizer)]
    elif param != "none":
        r.set("offload", "none", param_key)
        r.unmodelled_key(
            param_key,
            "parameters offloaded without the optimizer: planned as no offload, their 16-bit "
            "partition counted on the GPU (over by 2 bytes a parameter / GPUs), where the "
            "master, optimizer states and gradients stay",
        )
    else:
        r.default("offload", "none", default_source)
    for key, device in planned:  # said only where it is planned (not beside "no offload")
        if device == "nvme":
            r.unmodelled_key(key, "NVMe offload: planned as CPU offload")
