"""DeepSpeed JSON (deepspeedai/DeepSpeed edaa722, deepspeed/runtime/zero/config.py and
offload_config.py), as the Hugging Face Trainer fills it (transformers 5.24
integrations/deepspeed.py): the ZeRO stage and offload map to plan fields; buckets and
stage-3 limits change memory but are not modelled, and are named."""

from __future__ import annotations

from trainmem.sources.configs.common import ConfigPlan, Doc, Reading

FRAMEWORK = "DeepSpeed edaa722"
ZERO = "zero_optimization"
# What the Trainer puts in place of "auto" (integrations/deepspeed.py), for the notes.
_AUTO = {
    "reduce_bucket_size": "hidden_size² (transformers integrations/deepspeed.py:232)",
    "stage3_prefetch_bucket_size": "0.9·hidden_size² (integrations/deepspeed.py:235-237)",
    "stage3_param_persistence_threshold": "10·hidden_size (integrations/deepspeed.py:239-241)",
}
# Keys that size buffers or limits on the GPU; none is a plan field yet (issue 10).
_UNMODELLED = (
    "reduce_bucket_size",
    "allgather_bucket_size",
    "overlap_comm",
    "stage3_prefetch_bucket_size",
    "prefetch_bucket_size",
    "stage3_param_persistence_threshold",
    "param_persistence_threshold",
    "stage3_max_live_parameters",
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


def read(doc: Doc) -> ConfigPlan:
    r = Reading(doc, FRAMEWORK, kind="launcher")
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
    for key in (f"{ZERO}.{k}" for k in _UNMODELLED):
        value = doc.lookup(key)
        if value is None:
            continue
        short = key.split(".")[-1]
        why = f"auto = {_AUTO[short]}" if value == "auto" and short in _AUTO else ""
        r.unmodelled_key(key, why)
    if stage in (1, 2) and not doc.has(f"{ZERO}.reduce_bucket_size"):
        r.notes.append(
            f"{doc.name}: DeepSpeed's default gradient buckets (reduce_bucket_size 5e8 "
            "elements, deepspeed/runtime/zero/config.py:113; a second one with overlap_comm) "
            "are not in the estimate"
        )
    r.unmodelled_present({"activation_checkpointing": "DeepSpeed's own checkpointing"})
    return r.result()


def _offload(r: Reading) -> None:
    doc = r.doc
    where: dict[str, tuple[str, bool]] = {}
    for part in ("offload_optimizer", "offload_param"):
        key = f"{ZERO}.{part}.device"
        device = (doc.text(key) or "none").lower() if doc.lookup(key) != "auto" else "none"
        if device not in _DEVICES:
            raise doc.error(key, f"{device!r} is not none, cpu or nvme")
        if device == "nvme":
            r.unmodelled_key(key, "NVMe offload: planned as CPU offload")
        where[part] = (key, device != "none")
    param_key, params = where["offload_param"]
    opt_key, optimizer = where["offload_optimizer"]
    if params:
        r.set("offload", "params", param_key)
    elif optimizer:
        r.set("offload", "optimizer", opt_key)
    else:
        r.default("offload", "none", "deepspeed/runtime/zero/offload_config.py:24, :58")
