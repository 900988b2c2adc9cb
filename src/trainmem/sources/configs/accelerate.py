"""accelerate config YAML (`accelerate config`, accelerate 1.15.0
commands/config/config_args.py; plugin defaults in utils/dataclasses.py): processes,
machines, mixed precision, the DeepSpeed plugin and the FSDP plugin (version, sharding
strategy or reshard_after_forward, parameter offload, cpu_ram_efficient_loading) map to plan
fields."""

from __future__ import annotations

from trainmem.core.units import shown
from trainmem.sources.configs import deepspeed
from trainmem.sources.configs.common import ConfigPlan, Doc, ReadFile, Reading, backward_prefetch

FRAMEWORK = "accelerate 1.15.0"
_PRECISION = {"bf16": "bf16-mixed", "fp16": "fp16-mixed"}  # autocast over fp32 weights
# FSDP1 sharding strategies by name or number (torch/distributed/fsdp/api.py ShardingStrategy,
# accelerate/utils/constants.py FSDP_SHARDING_STRATEGY)
_SHARDING = {
    "FULL_SHARD": "full-shard",
    "1": "full-shard",
    "SHARD_GRAD_OP": "shard-grad-op",
    "2": "shard-grad-op",
    "NO_SHARD": "no-shard",
    "3": "no-shard",
    "HYBRID_SHARD": "hybrid-shard",
    "4": "hybrid-shard",
}
# Wrapping one unit per decoder layer (TRANSFORMER_BASED_WRAP, accelerate's default,
# utils/dataclasses.py FullyShardedDataParallelPlugin) is what the plan counts.
_WRAP = "TRANSFORMER_BASED_WRAP"
# parallelism_config sizes (accelerate/parallelism_config.py ParallelismConfig, each 1 when
# unset, :270-283; launch.py --parallelism_config_*): above 1 each splits what the plan
# keeps whole on every GPU.
_PARALLEL = {
    "tp": "tensor parallelism over {n} GPUs; planned without it",
    "cp": "context parallelism over {n} GPUs, each holding part of the sequence; planned whole",
    "sp": "ALST/Ulysses sequence parallelism over {n} GPUs; planned with the whole sequence",
    "dp_replicate": "{n} replicas of the shard group (HSDP); planned as one group",
    "dp_shard": "sharding over {n} GPUs; planned over every GPU",
}


def looks_like(doc: Doc) -> int:
    keys = ("compute_environment", "distributed_type", "num_machines", "machine_rank")
    return sum(k in doc.data for k in keys) * 2


def read(doc: Doc, read_file: ReadFile) -> ConfigPlan:
    r = Reading(doc, FRAMEWORK, kind="launcher")
    kind = (doc.text("distributed_type") or "NO").upper()
    processes = doc.integer("num_processes")
    machines = doc.integer("num_machines")  # absent: 1 (commands/config/config_args.py:182)
    if machines is None:
        machines = 1
    elif machines < 1:  # 0 too: `or 1` here once planned a machine count of 0 as 1
        raise doc.error("num_machines", f"{machines} is not a number of machines (1 or more)")
    if processes is not None and (processes == 0 or processes < -1):
        # -1 is config_args.py:180's "not set" (SLURM passes it); 0 processes run nothing
        raise doc.error("num_processes", f"{processes} is not a number of processes")
    if processes is not None and processes >= 1 and kind != "NO":
        # num_processes counts every machine's processes; gpus is per node
        if processes % machines:
            raise doc.error(
                "num_processes", f"{processes} does not divide over {machines} machines"
            )
        r.set("gpus", processes // machines, "num_processes")
    if machines > 1:
        r.set("nodes", machines, "num_machines")
    precision = (doc.text("mixed_precision") or "no").lower()
    if precision in _PRECISION:
        r.set("precision", _PRECISION[precision], "mixed_precision")
    elif precision not in ("no", "none"):
        r.unmodelled_key("mixed_precision", f"{precision} is not modelled")
    if kind == "FSDP":
        _fsdp(r)
    elif kind == "DEEPSPEED":
        _deepspeed(r, read_file)
    elif kind not in ("NO", "MULTI_GPU", "MULTI_CPU"):
        r.unmodelled_key("distributed_type", f"{kind} is not modelled")
    _parallelism(r, processes)
    return r.result()


def _parallelism(r: Reading, processes: int | None) -> None:
    keys = {f"parallelism_config.parallelism_config_{n}_size": why for n, why in _PARALLEL.items()}
    shard = "parallelism_config.parallelism_config_dp_shard_size"
    if r.doc.integer(shard) == processes:  # a shard group of every process: what is planned
        del keys[shard]
    r.unmodelled_sizes(keys)


def _fsdp(r: Reading) -> None:
    doc, prefix = r.doc, "fsdp_config"
    r.set("strategy", "fsdp", "distributed_type")
    version = doc.integer(f"{prefix}.fsdp_version")
    if version is None:  # env FSDP_VERSION, else 1
        r.default("fsdp_version", 1, "accelerate/utils/dataclasses.py:1831")
        version = 1
    elif version not in (1, 2):
        raise doc.error(f"{prefix}.fsdp_version", f"{version} is not 1 or 2")
    else:
        r.set("fsdp_version", version, f"{prefix}.fsdp_version")
    # FSDP2 takes reshard_after_forward (True: full shard); FSDP1 a strategy name in the same
    # key or in fsdp_sharding_strategy (accelerate/utils/dataclasses.py:1598, 1859)
    for key in (f"{prefix}.fsdp_reshard_after_forward", f"{prefix}.fsdp_sharding_strategy"):
        value = doc.lookup(key)
        if value is None:
            continue
        if isinstance(value, bool) or str(value).lower() in ("true", "false"):
            full = value is True or str(value).lower() == "true"
            r.set("fsdp", "full-shard" if full else "shard-grad-op", key)
        elif str(value).upper() in _SHARDING:
            r.set("fsdp", _SHARDING[str(value).upper()], key)
        else:
            raise doc.error(key, f"{shown(value)} is not a sharding strategy")
        break
    else:
        r.default("fsdp", "full-shard", "accelerate/utils/dataclasses.py:1859")
    backward_prefetch(r, doc, f"{prefix}.fsdp_backward_prefetch", version)
    if doc.flag(f"{prefix}.fsdp_offload_params"):
        r.set("offload", "params", f"{prefix}.fsdp_offload_params")
    efficient = doc.flag(f"{prefix}.fsdp_cpu_ram_efficient_loading")
    if efficient is not None:
        r.set("ram_efficient_loading", efficient, f"{prefix}.fsdp_cpu_ram_efficient_loading")
    if doc.flag(f"{prefix}.fsdp_activation_checkpointing"):  # off is not worth a word
        r.unmodelled_key(f"{prefix}.fsdp_activation_checkpointing", "FSDP's own checkpointing")
    wrap = doc.text(f"{prefix}.fsdp_auto_wrap_policy")
    if wrap and wrap.upper() != _WRAP:
        r.unmodelled_key(
            f"{prefix}.fsdp_auto_wrap_policy", f"{shown(wrap)}; planned as one unit per layer"
        )


def _deepspeed(r: Reading, read_file: ReadFile) -> None:
    doc, prefix = r.doc, "deepspeed_config"
    r.set("strategy", "zero", "distributed_type")
    file_key = f"{prefix}.deepspeed_config_file"
    text = doc.text(file_key)
    if text and text.lower() != "none":
        r.merged(read_file(r.named(file_key, text), doc.origin(file_key)))
        return
    stage = doc.integer(f"{prefix}.zero_stage")
    if stage is None:  # env ACCELERATE_DEEPSPEED_ZERO_STAGE, else 2
        r.default("zero", 2, "accelerate/utils/dataclasses.py:1238")
    elif stage not in (0, 1, 2, 3):
        raise doc.error(f"{prefix}.zero_stage", f"{stage} is not a ZeRO stage (0-3)")
    else:
        r.set("zero", stage, f"{prefix}.zero_stage")
    deepspeed.read_offload(
        r,
        f"{prefix}.offload_optimizer_device",
        f"{prefix}.offload_param_device",
        "accelerate/utils/dataclasses.py:1240-1244",
    )
