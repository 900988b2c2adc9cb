"""Precision recipes of sharded full fine-tuning, one record each: in which dtype (bytes per
element) a framework keeps each state, as its source does it. Every other module asks
``recipe(plan)`` instead of comparing precision, strategy and stack names.

The recipe follows from the plan as the frameworks derive it: ``precision`` (-mixed),
``strategy`` and ``fsdp_version`` pick the framework path, ``stack`` picks who prepares the
model (accelerate for the Trainer, TRL and LLaMA-Factory; axolotl's own FSDP2 preparation; a
hand-written loop calling ``fully_shard`` itself), and ``reduce_dtype`` is the one choice
users make between recipes (accelerate's fsdp_config ``mixed_precision_policy``, torchtitan's
``mixed_precision_reduce``). LoRA, QLoRA and single-GPU / DDP plans have no recipe here: their
dtypes are trainmem.core.precision's.

Versions read: torch 2.13.0, accelerate 1.15.0, transformers 5.24.0, axolotl 067b021,
DeepSpeed 0acdb02 (deepspeedai/DeepSpeed).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainmem.core.errors import record_named
from trainmem.core.plan import Plan


@dataclass(frozen=True)
class Recipe:
    name: str
    label: str  # as people write it
    source: str  # the file and function it follows
    params: int  # the model's parameters as each GPU stores them (its shard, or all of them)
    master: int  # what the optimizer steps: the parameter itself or a separate fp32 copy
    gathered: int  # the unsharded weights the layers compute with (all-gathered unit)
    activations: int  # saved activations and the residual stream
    grad_compute: int  # a gradient as autograd produces it, before the reduce
    reduce: int  # the reduce-scatter / all-reduce buffer (default; the plan may override)
    grad_sharded: int  # the gradient the optimizer reads, after the reduce
    optimizer_state: int  # one Adam moment (torch's AdamW: the stepped parameter's dtype)
    autocast: bool  # torch.autocast also runs over the forward
    reduce_choosable: bool = True  # the plan's reduce_dtype applies

    @property
    def separate_master(self) -> bool:
        """A master copy beside the parameters (DeepSpeed), not the parameters themselves."""
        return self.master != self.params


# torch 2.13 torch/distributed/fsdp/_fully_shard: _fsdp_param.py FSDPParam.init_dtype_attrs
# (param_dtype for the unsharded parameter; the sharded one keeps its own dtype),
# _fsdp_collectives.py foreach_all_gather (the fp32 shard cast into a bf16 all-gather input)
# and foreach_reduce (the bf16 unsharded gradients copied into a reduce_dtype
# reduce-scatter input; the output cast to the sharded parameter's dtype,
# _to_dtype_if_needed(reduce_output, orig_dtype)); _fsdp_api.py MixedPrecisionPolicy:
# module-level mixed precision, "low-precision activations are saved for backward".
# Nothing autocasts: PyTorch's FSDP2 recipe and torchtitan reduce in fp32.
FSDP2_TORCH = Recipe(
    "fsdp2-torch",
    "FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)",
    "torch 2.13 _fully_shard/_fsdp_param.py, _fsdp_collectives.py foreach_reduce",
    params=4,
    master=4,
    gathered=2,
    activations=2,
    grad_compute=2,
    reduce=4,
    grad_sharded=4,
    optimizer_state=4,
    autocast=False,
)
# accelerate 1.15: FullyShardedDataParallelPlugin.set_mixed_precision (utils/dataclasses.py)
# builds MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16, output_dtype=bf16) from
# mixed_precision="bf16" (the Trainer's bf16=True) unless fsdp_config gives a policy;
# fsdp2_prepare_model (utils/fsdp_utils.py) upcasts every trainable parameter to fp32
# ("Upcast to fp32 master weights"); _prepare_fsdp2 (accelerator.py) never calls
# prepare_model, so no autocast wraps the forward.
FSDP2_ACCELERATE = replace(
    FSDP2_TORCH,
    name="fsdp2-accelerate",
    label="accelerate FSDP2: fp32 upcast, MixedPrecisionPolicy(bf16, reduce bf16)",
    source="accelerate 1.15 utils/fsdp_utils.py fsdp2_prepare_model, "
    "utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision",
    reduce=2,
)
# axolotl 067b021 src/axolotl/monkeypatch/accelerate/fsdp2.py fsdp2_prepare_model replaces
# accelerate's without its fp32 upcast; cfg.bf16 loads the model in bf16
# (utils/config/__init__.py: cfg.torch_dtype = torch.bfloat16), so the sharded parameters,
# their gradients and AdamW's moments stay bf16 under accelerate's bf16 policy.
FSDP2_AXOLOTL = Recipe(
    "fsdp2-axolotl",
    "axolotl FSDP2: bf16 parameters, no upcast",
    "axolotl 067b021 monkeypatch/accelerate/fsdp2.py fsdp2_prepare_model",
    params=2,
    master=2,
    gathered=2,
    activations=2,
    grad_compute=2,
    reduce=2,
    grad_sharded=2,
    optimizer_state=2,
    autocast=False,
)
# torch 2.13 torch/distributed/fsdp/_flat_param.py: the low-precision shard _mp_shard and the
# unsharded _full_param_padded in param_dtype; _runtime_utils.py _reduce_grad reduce-scatters
# in reduce_dtype and _cast_grad_to_param_dtype casts the sharded gradient back to the flat
# parameter's dtype unless keep_low_precision_grads (accelerate leaves it False). accelerate
# 1.15 builds MixedPrecision(param, reduce, buffer dtype = bf16) (set_mixed_precision), wraps
# the forward in autocast and convert_outputs_to_fp32 (Accelerator.prepare_model, native_amp)
# before FSDP1, then upcasts each flat parameter to fp32 ("we follow DeepSpeed's strategy").
FSDP1_ACCELERATE = Recipe(
    "fsdp1-accelerate",
    "FSDP1 MixedPrecision(param/reduce/buffer bf16) under autocast, fp32 flat parameters",
    "torch 2.13 fsdp/_flat_param.py, _runtime_utils.py _reduce_grad; accelerate 1.15 "
    "accelerator.py prepare_model",
    params=4,
    master=4,
    gathered=2,
    activations=2,
    grad_compute=2,
    reduce=2,
    grad_sharded=4,
    optimizer_state=4,
    autocast=True,
)
# DeepSpeed bf16 (ZeRO 1-3): the engine casts the module to bf16 (engine.py
# _configure_distributed_model), ZeRO keeps an fp32 master partition and fp32 Adam states
# (stage_1_and_2.py single_partition_of_fp32_groups; stage3.py per sub-group), reduces the
# bf16 gradients in buckets (communication_data_type: bf16 when bf16 is enabled) and makes
# the fp32 gradient partition at step(); the Trainer does not autocast under DeepSpeed
# (accelerate accelerator.py: native_amp is off for DistributedType.DEEPSPEED).
# ZeRO 0 with bf16 is not ZeRO (zero_enabled is stage > 0): DeepSpeed 0.19.8 engine.py
# _do_optimizer_sanity_check gives DDP_BFLOAT16, the fp16 optimizer wrapper run in bf16
# (_configure_fp16_optimizer, runtime/fp16/fused_optimizer.py), with a full-size fp32 master
# and fp32 gradients at step, not partitioned. BF16_Optimizer is stage 1 with
# data_types.grad_accum_dtype fp32 only.
ZERO_BF16 = Recipe(
    "zero-bf16",
    "DeepSpeed bf16: bf16 parameters, fp32 master partition",
    "DeepSpeed 0acdb02 runtime/zero/stage_1_and_2.py, stage3.py; 0.19.8 engine.py",
    params=2,
    master=4,
    gathered=2,
    activations=2,
    grad_compute=2,
    reduce=2,
    grad_sharded=2,
    optimizer_state=4,
    autocast=False,
    reduce_choosable=False,  # communication_data_type, a DeepSpeed key
)
# DeepSpeed fp16: the same layout in fp16, with a dynamic loss scaler
# (runtime/fp16/loss_scaler.py DynamicLossScaler: scalars only) and, at ZeRO 0,
# FP16_Optimizer's fp32 master (runtime/fp16/fused_optimizer.py).
ZERO_FP16 = replace(
    ZERO_BF16,
    name="zero-fp16",
    label="DeepSpeed fp16 with dynamic loss scaling, fp32 master partition",
    source="DeepSpeed 0acdb02 runtime/fp16/loss_scaler.py, runtime/zero/stage_1_and_2.py",
)

RECIPE_RECORDS = {
    r.name: r
    for r in (FSDP2_TORCH, FSDP2_ACCELERATE, FSDP2_AXOLOTL, FSDP1_ACCELERATE, ZERO_BF16, ZERO_FP16)
}
REDUCE_BYTES = {"fp32": 4, "16-bit": 2}


def recipe_record(name: str) -> Recipe:
    """The record of ``name``; a PlanError naming the known recipes otherwise."""
    return record_named(RECIPE_RECORDS, "recipe", name)


def recipe(plan: Plan) -> Recipe | None:
    """The recipe a sharded full fine-tune runs under, or None (its dtypes are the plan's
    precision as on one GPU)."""
    if not plan.training.trains_base or plan.precision == "fp32":
        return None
    if plan.sharding == "zero":
        return ZERO_FP16 if plan.precision.startswith("fp16") else ZERO_BF16
    if plan.strategy != "fsdp" or not plan.precision.endswith("-mixed"):
        return None
    v2 = plan.fsdp_version == 2
    found = recipe_record(plan.tooling.fsdp2_recipe) if v2 else FSDP1_ACCELERATE
    if plan.reduce_dtype in REDUCE_BYTES and found.reduce_choosable:
        found = replace(found, reduce=REDUCE_BYTES[plan.reduce_dtype])
    return found
