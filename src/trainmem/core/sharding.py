"""What data-parallel sharding leaves on each GPU and puts in each node's host RAM.

One function per component; each cites the source it follows. Versions read: torch 2.13.0
(torch/distributed/fsdp, torch/nn/parallel), DeepSpeed edaa722 and 0.19.8 (deepspeed/runtime/zero;
the ZeRO parts checked against 0.19.8 runs, bench/measure/deepspeed_zero.py),
transformers 5.24 (integrations/deepspeed.py), accelerate 1.15.0.

The FSDP units are what accelerate's and the Trainer's transformer auto-wrap policy makes:
one unit per decoder layer, and the root (embeddings, final norm, lm_head); accelerate >= 1.14
carves an untied model's root into an embedding unit and a [final norm, lm_head] unit
(accelerate_carves). Sharding never divides activations or logits: every GPU runs its own
micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainmem.core.architecture import ModelSpec
from trainmem.core.plan import AUTO, Plan
from trainmem.core.precision import Dtypes

# deepspeed/runtime/zero/stage3.py DeepSpeedZeroOptimizer_Stage3.__init__: sub_group_size
# (config.py:175, default 1e9) bounds the fp32 gradient each optimizer sub-group steps on.
SUB_GROUP_SIZE = 1_000_000_000


@dataclass(frozen=True)
class Layout:
    """How one plan divides its states over ``world`` processes."""

    strategy: str  # "single" (one process), "ddp", "fsdp" or "zero"
    world: int
    shard: int  # processes a sharded state is divided over
    optimizer: bool  # optimizer state and master copy sharded
    gradients: bool
    weights: bool
    reshard_after_forward: bool  # FSDP frees a unit's gathered weights after its forward


SINGLE = Layout("single", 1, 1, False, False, False, True)  # one process: nothing divided


def layout(plan: Plan) -> Layout:
    """ZeRO (Rajbhandari et al. 2019, section 5): stage 1 shards optimizer state, 2 gradients
    too, 3 weights too, over every process. FSDP (torch/distributed/fsdp/api.py
    ShardingStrategy): FULL_SHARD and SHARD_GRAD_OP shard all three over every process,
    SHARD_GRAD_OP keeping weights gathered between forward and backward (FSDP2:
    reshard_after_forward=False); HYBRID_SHARD shards within a node and replicates across
    nodes; NO_SHARD shards nothing."""
    world = plan.world
    if world == 1 and plan.sharding == "ddp":
        return SINGLE
    if plan.sharding == "zero":
        z = plan.zero
        return Layout("zero", world, world, z >= 1, z >= 2, z >= 3, True)
    if plan.strategy == "fsdp" and plan.fsdp != "no-shard":
        shard = plan.gpus if plan.fsdp == "hybrid-shard" else world
        return Layout("fsdp", world, shard, True, True, True, plan.fsdp != "shard-grad-op")
    return Layout(plan.strategy, world, 1, False, False, False, True)


def divided(total: int, n: int) -> int:
    """One process's share of a flat buffer, padded up (DeepSpeed pads its flat partitions,
    stage_1_and_2.py flatten_dense_tensors_aligned; FSDP1 pads each flat parameter,
    _flat_param.py FlatParamHandle._get_shard)."""
    return -(-total // n)


def fsdp2_shard_elements(shapes: list[tuple[int, int, int]], n: int) -> int:
    """FSDP2 shards each parameter on dim 0, padded to a multiple of the world size
    (torch 2.13 _fully_shard/_fsdp_common.py _get_dim0_padded_size,
    _fsdp_param.py FSDPParam._init_sharded_param). ``shapes``: (rows, cols, count)."""
    return sum(-(-rows // n) * cols * count for rows, cols, count in shapes)


@dataclass(frozen=True)
class Units:
    """Parameters of the FSDP units in elements: one decoder layer and the root."""

    layer: int
    root: int
    largest_module: int  # the largest leaf module (ZeRO-3 gathers per module)
    persistent: int  # parameters at or below ZeRO-3's persistence threshold, all layers


def units(spec: ModelSpec, plan: Plan) -> Units:
    root = spec.vocab * spec.hidden * (1 if spec.tied_embeddings else 2) + spec.hidden
    layer = max(0, spec.params - root) // spec.layers
    largest = max(
        max(lin.params for lin in spec.linears()) if spec.linears() else 0,
        spec.vocab * spec.hidden,
    )
    threshold = zero3_persistence(plan, spec)
    vectors = spec.layer_norm_params() * spec.layers + spec.hidden
    biases = sum(lin.count * lin.out_features for lin in spec.linears() if lin.bias)
    # deepspeed/runtime/zero/parameter_offload.py:319 mark_persistent_parameters:
    # ds_numel <= param_persistence_threshold stays gathered. Norm weights and biases are
    # the parameters that small in these models (one norm is ``hidden`` elements).
    small = spec.hidden <= threshold
    persistent = (vectors + biases * spec.layers) if small else 0
    return Units(layer, root, largest, persistent)


def zero_reduce_bucket(plan: Plan, spec: ModelSpec) -> int:
    """reduce_bucket_size in elements: DeepSpeed's 5e8 (zero/config.py:113), or the
    Trainer's "auto" = hidden_size² (transformers integrations/deepspeed.py:232)."""
    return spec.hidden * spec.hidden if plan.reduce_bucket == AUTO else plan.reduce_bucket


def zero3_prefetch(plan: Plan, spec: ModelSpec) -> int:
    """stage3_prefetch_bucket_size: 5e7 (zero/config.py:215), "auto" = 0.9·hidden_size²
    (integrations/deepspeed.py:235-237); never beyond stage3_max_live_parameters
    (partitioned_param_coordinator.py:452-454)."""
    n = (
        int(0.9 * spec.hidden * spec.hidden)
        if plan.prefetch_bucket == AUTO
        else plan.prefetch_bucket
    )
    return min(n, plan.max_live_params)


def zero3_persistence(plan: Plan, spec: ModelSpec) -> int:
    """stage3_param_persistence_threshold: 1e5 (zero/config.py:221), "auto" = 10·hidden_size
    (integrations/deepspeed.py:239-241)."""
    return 10 * spec.hidden if plan.persistence_threshold == AUTO else plan.persistence_threshold


def zero_buckets(plan: Plan, spec: ModelSpec, grad_bytes: int) -> tuple[int, int]:
    """ZeRO's gradient buffers on each GPU: (kept for the whole run, alive in backward only).
    Stage 3: one flat bucket made at init (stage3.py:733); overlap_comm only changes streams
    there. Stages 1-2 with contiguous_gradients (default True, config.py:102): one
    reduce_bucket_size buffer in the 16-bit dtype, a second with overlap_comm, made by the
    first gradient's hook (DeepSpeed 0.19.8 stage_1_and_2.py:2287 process_gradients ->
    setup_buckets :3256-3280) and dropped when backward ends (engine.py:3086
    allreduce_gradients -> independent_gradient_partition_epilogue :1061
    _release_ipg_buffers :924-931): none at forward, the loss or the optimizer step.
    Stage 0 reduces without buckets."""
    bucket = zero_reduce_bucket(plan, spec) * grad_bytes
    if plan.zero == 0:
        return 0, 0
    if plan.zero == 3:
        return bucket, 0
    count = 1 if not plan.overlap_comm else 2
    staging = 0
    if plan.offload == "optimizer":
        # DeepSpeed 0.19.8 stage_1_and_2.py:659-661: under cpu_offload a persistent
        # temp_grad_buffer_for_gpu_offload of the largest parameter's numel in the 16-bit
        # dtype stays on the GPU (measured: bench/results/measure-cpu-deepspeed.json)
        staging = units(spec, plan).largest_module * grad_bytes
    return staging, count * bucket


def zero_grad_norm(plan: Plan, spec: ModelSpec, trainable: int) -> int:
    """ZeRO 1-2 norm each gradient slice of this rank's partition in fp64 (DeepSpeed 0.19.8
    runtime/zero/utils.py get_norm_dtype): in step() before the fp32 gradient partition
    exists (stage_1_and_2.py:2684 get_grad_norm_direct), or under cpu_offload as each
    gradient is ready (:1886 set_norm_for_param_grad_in_gpu). One fp64 copy at a time: the
    largest slice, min(largest parameter, partition)."""
    if plan.sharding != "zero" or plan.zero not in (1, 2):
        return 0
    return 8 * min(units(spec, plan).largest_module, divided(trainable, layout(plan).world))


def zero2_gradient_partition(plan: Plan, spec: ModelSpec, trainable: int) -> int:
    """Gradient elements ZeRO-2 keeps on the worst rank: copy_grads_in_partition (DeepSpeed
    0.19.8 stage_1_and_2.py:2184-2200) sizes grads_in_partition to every parameter that
    overlaps the rank's partition, whole. The flat buffer starts with the embedding
    (model.parameters() order), so when it is larger than a partition the rank holding its
    end keeps all of it and the rest of its own partition; one layer parameter may straddle
    the far end."""
    n = layout(plan).world
    part = divided(trainable, n)
    embedding = spec.vocab * spec.hidden
    layer_largest = max((lin.out_features * lin.in_features for lin in spec.linears()), default=0)
    worst = -(-embedding // part) * part if embedding > part else part  # up to the end rank's end
    return min(trainable, worst + layer_largest)


def zero_offload_clone(plan: Plan, spec: ModelSpec, grad_bytes: int) -> int:
    """Under ZeRO-2 cpu_offload a gradient larger than reduce_bucket_size bypasses the
    bucket as a clone of itself (DeepSpeed 0.19.8 stage_1_and_2.py:1443-1446,
    _offload_gradient_safety_enabled): the largest parameter's, alive with its fp64 norm.
    Stage 1 keeps every gradient whole already; the clone replaces the original there."""
    if plan.sharding != "zero" or plan.zero != 2 or plan.offload != "optimizer":
        return 0
    largest = units(spec, plan).largest_module
    return largest * grad_bytes if largest > zero_reduce_bucket(plan, spec) else 0


def ddp_buckets(plan: Plan, trainable_grad_bytes: int) -> int:
    """DDP's reducer copies every gradient into its own bucket tensors unless
    gradient_as_bucket_view=True (torch/nn/parallel/distributed.py DistributedDataParallel
    docstring: the saving "will be equal to the total gradients size"); accelerate and the
    Trainer leave it False (accelerate/utils/dataclasses.py DistributedDataParallelKwargs)."""
    lay = layout(plan)
    return trainable_grad_bytes if lay.strategy == "ddp" and lay.world > 1 else 0


@dataclass(frozen=True)
class Gathered:
    """Weights all-gathered on one GPU beyond its shard, at each moment of the step, and the
    gradient communication buffers (bytes)."""

    forward: int
    loss_backward: int
    backward_last: int
    backward_first: int
    embedding: int
    layer_grad_inflight: int  # one unit's unsharded gradient while it is reduced
    reduce_buffer: int  # FSDP: the previous unit's reduce-scatter input, held
    step: int  # gathered during the optimizer step


NONE = Gathered(0, 0, 0, 0, 0, 0, 0, 0)


def gathered(
    plan: Plan,
    spec: ModelSpec,
    dt: Dtypes,
    weight_bytes: int,
    trainable_layer: int,
    adapter_shapes: tuple[tuple[int, int, int], ...] = (),
    root_bytes: int | None = None,
) -> Gathered:
    """``weight_bytes``: the whole model's weights as gathered, unsharded (a mixed-precision
    recipe's 16-bit units: ``dt.gathered``); ``trainable_layer``: one decoder layer's
    trainable elements; ``adapter_shapes``: one layer's LoRA matrices (rows, cols, count).
    A unit's gradient is in flight in the dtype autograd makes it (``dt.grad_compute``) and
    reduced in ``dt.reduce`` (MixedPrecisionPolicy reduce_dtype). ``root_bytes``: the root's
    gathered bytes where they are not the weights' average per parameter (a quantized base);
    the layers then share the rest."""
    lay = layout(plan)
    if not lay.weights:
        return NONE
    u = units(spec, plan)
    per_elem = weight_bytes / max(1, spec.params)  # quantized bases are < 1 byte each
    unit, root = round(u.layer * per_elem), round(u.root * per_elem)
    if root_bytes is not None:
        root, unit = root_bytes, max(0, weight_bytes - root_bytes) // spec.layers
    if plan.trains_adapter:
        # A LoRA unit mixes the 16-bit base with fp32 adapters; FSDP2 all-gathers one dtype
        # per unit, so the adapters are gathered in the base's (MixedPrecisionPolicy
        # param_dtype, as bench/measure/sharded.py runs it)
        # FSDP2 gathers into padded buffers (_fsdp_param.py:626: padded shard x world), which
        # a rank-16 LoRA A over 64 GPUs quadruples
        n = lay.shard
        gathered_elements = (
            fsdp2_shard_elements(list(adapter_shapes), n) * n
            if plan.fsdp_version == 2 and adapter_shapes
            else trainable_layer
        )
        unit += gathered_elements * min(dt.trainable, 2 if dt.weight == 2 else dt.trainable)
    grad_unit = trainable_layer * dt.grad_compute
    reduce_unit = trainable_layer * dt.reduce
    if lay.strategy == "fsdp" and plan.fsdp_version == 1:
        # FSDP1's post-backward hook reduce-scatters a unit's gradient and drops the input
        # before it returns (torch 2.13 fsdp/_runtime_utils.py _post_backward_hook,
        # _reduce_grad): nothing is held until the next unit's. A reduce dtype other than the
        # gradient's first copies the whole unsharded gradient (flat_param.grad.to(
        # _reduce_dtype)), alive beside autograd's while it is reduced.
        inflight = grad_unit + (reduce_unit if dt.reduce != dt.grad_compute else 0)
        return fsdp_gathered(plan, spec, unit, root, inflight, 0)
    if lay.strategy == "fsdp":
        return fsdp_gathered(plan, spec, unit, root, grad_unit, reduce_unit)
    return zero3_gathered(plan, spec, u, per_elem, dt.grad_compute)


def accelerate_carves(plan: Plan, spec: ModelSpec) -> bool:
    """accelerate >= 1.14's fsdp2_prepare_model (1.16 utils/fsdp_utils.py) makes an untied
    model's input embedding a unit of its own (resharded after forward as the layers are) and
    [final norm, lm_head] a unit never resharded after forward, leaving the root empty; tied
    embeddings go with the norm into one such unit, which is the root as before. The Trainer,
    TRL and LLaMA-Factory use it (Stack.fsdp2_recipe); axolotl's own and a loop's fully_shard
    do not carve. Measured: bench/results/measure-cpu-sharded-accelerate.json."""
    return (
        plan.strategy == "fsdp"
        and plan.fsdp != "no-shard"
        and plan.fsdp_version == 2
        and plan.tooling.fsdp2_recipe == "fsdp2-accelerate"
        and not spec.tied_embeddings
    )


def fsdp_gathered(
    plan: Plan, spec: ModelSpec, unit: int, root: int, grad_unit: int, reduce_unit: int
) -> Gathered:
    """FSDP per unit. The root is never resharded after forward (torch 2.13
    _fsdp_state.py:203-207), so embeddings and lm_head stay gathered from forward to the end
    of backward. In backward each unit prefetches the next one's all-gather
    (_fsdp_param_group.py:795 _backward_prefetch; FSDP1 under BackwardPrefetch.BACKWARD_PRE:
    Plan.prefetches_backward), so two layer units are gathered; layer 0 prefetches the root,
    gathered already. Without it each layer is gathered at its own pre-backward. With
    reshard_after_forward=False (shard-grad-op) every layer stays gathered until its
    backward. A unit's gradient is copied into a reduce-scatter input in the
    reduce dtype (_fsdp_collectives.py:597 foreach_reduce), which the param group keeps until
    the next reduce-scatter (comm_ctx.reduce_scatter_state)."""
    layers = spec.layers
    lay = layout(plan)
    if accelerate_carves(plan, spec):
        embed = root * spec.vocab * spec.hidden // max(1, units(spec, plan).root)
        return _carved(lay, layers, unit, root - embed, embed, grad_unit, reduce_unit)
    if lay.reshard_after_forward:
        # the root's pre-backward prefetches the last layer before the loss's backward runs
        ahead = unit if plan.prefetches_backward else 0
        forward, loss, last = root, root + ahead, root + unit + ahead
    else:
        forward = loss = last = root + layers * unit
    # FSDP1 reduce-scatters a padded flat gradient into a new sharded one
    # (_runtime_utils.py _reduce_grad); FSDP2 the same per unit: one unit's buffer either way.
    return Gathered(
        forward=forward,
        loss_backward=loss,
        backward_last=last,
        backward_first=root + unit,
        embedding=root,
        layer_grad_inflight=grad_unit,
        reduce_buffer=reduce_unit,
        step=0,  # the root reshards at the end of backward
    )


def _carved(
    lay: Layout, layers: int, unit: int, tail: int, embed: int, grad_unit: int, reduce_unit: int
) -> Gathered:
    """accelerate's carved units (accelerate_carves), from the measured per-moment figures
    (bench/accuracy/accelerate_layout.py): at the end of forward the tail is gathered twice,
    its all-gather output held until the root's post-forward (torch 2.13 _fsdp_state.py
    _post_forward); the loss's backward runs before the tail's pre-backward prefetches the
    last layer; the tail reshards after its backward (right after the final norm's); layer 0
    prefetches the embedding, whose all-gather output it holds until the embedding's
    pre-backward. Shard-grad-op keeps the embedding and the layers gathered until their
    backward."""
    kept = embed + layers * unit if not lay.reshard_after_forward else 0
    return Gathered(
        forward=kept + 2 * tail,
        loss_backward=kept + tail,
        backward_last=kept if kept else 2 * unit,
        backward_first=unit + embed,
        embedding=embed,
        layer_grad_inflight=grad_unit,
        reduce_buffer=reduce_unit,
        step=0,
    )


# deepspeed/runtime/zero/config.py:251 stage3_max_reuse_distance (0.19.8), which neither the
# Trainer's "auto" nor the usual configs change
MAX_REUSE_DISTANCE = 1_000_000_000


def zero3_reused_layers(spec: ModelSpec, u: Units) -> int:
    """Decoder layers ZeRO-3 keeps gathered from their forward to their backward: a module's
    parameters are not released when the trace uses them again within
    stage3_max_reuse_distance parameters (DeepSpeed 0.19.8 partitioned_param_coordinator.py
    :653-666 __params_to_release). Layer k is used again in its backward, after the layers
    above it twice and the lm_head's forward and backward; the last layers stay."""
    head = spec.vocab * spec.hidden
    if not u.layer or 2 * head >= MAX_REUSE_DISTANCE:
        return 0
    return min(spec.layers, (MAX_REUSE_DISTANCE - 2 * head) // (2 * u.layer) + 1)


def zero3_gathered(
    plan: Plan, spec: ModelSpec, u: Units, per_elem: float, grad_bytes: int
) -> Gathered:
    """ZeRO-3 gathers each module's parameters when it runs and prefetches up to
    stage3_prefetch_bucket_size elements ahead (partitioned_param_coordinator.py:452-454);
    parameters under the persistence threshold stay gathered. The module running in backward
    has its unsharded gradient until it is copied into the reduce bucket
    (stage3.py:1533-1548). DeepSpeed's own estimate counts this as 4 x largest layer
    (stage3.py:3755)."""
    live = round((u.largest_module + zero3_prefetch(plan, spec) + u.persistent) * per_elem)
    whole = round(spec.params * per_elem)
    live = min(live, whole)  # never more than the whole model
    kept = min(whole, live + round(zero3_reused_layers(spec, u) * u.layer * per_elem))
    # stage3.py: fetched parameters are released after their module's backward; the
    # persistent ones stay gathered through the step.
    persistent = round(u.persistent * per_elem)
    return Gathered(
        forward=kept,
        loss_backward=kept,
        backward_last=kept,
        backward_first=live,
        embedding=live,
        layer_grad_inflight=u.largest_module * grad_bytes if plan.trains_lm_head else 0,
        reduce_buffer=0,
        step=persistent,
    )


@dataclass(frozen=True)
class Host:
    """Host RAM of one node (bytes): what training keeps there and what loading needs."""

    offloaded: int  # offloaded states of every process on the node
    loading: int  # the weights loaded by the node's processes before sharding

    @property
    def peak(self) -> int:
        # The loaded copies are freed once the model is sharded or moved to the GPU, before
        # the optimizer states exist (the Trainer creates the optimizer after wrapping).
        return max(self.offloaded, self.loading)


def host_memory(
    plan: Plan, load_bytes: int, offloaded_per_gpu: int, ckpt_offload_per_gpu: int
) -> Host:
    """``load_bytes``: the model's weights as loaded. Every process loads the whole model
    (from_pretrained per rank) unless FSDP's cpu_ram_efficient_loading loads it once per
    node, the others on the meta device (accelerate/utils/dataclasses.py
    FullyShardedDataParallelPlugin.cpu_ram_efficient_loading)."""
    loaders = 1 if plan.strategy == "fsdp" and plan.ram_efficient_loading else plan.gpus
    return Host(plan.gpus * (offloaded_per_gpu + ckpt_offload_per_gpu), loaders * load_bytes)


def offloaded_states(
    plan: Plan, weights: int, gradients: int, master: int, optimizer: int, largest: int = 0
) -> int:
    """One process's offloaded states (unsharded sizes in, the shard out).
    ZeRO-Offload keeps the fp32 master partition, the optimizer states and an fp32 gradient
    partition on the CPU (stage_1_and_2.py: single_partition_of_fp32_groups and its .grad on
    the CPU under cpu_offload; stage3.py the same per sub-group), and with offload_param the
    16-bit parameter and gradient partitions too (stage3.py:742-746,
    lp_grad_partitions_flat_pin_buffers). FSDP's CPUOffload(offload_params=True) keeps the
    sharded parameters and gradients on the CPU, and the optimizer steps there
    (torch/distributed/fsdp/api.py CPUOffload). ``largest``: the largest parameter's
    elements. Measured on DeepSpeed 0.19.8 (bench/results/measure-cpu-deepspeed.json), the
    host also holds, for ZeRO 1-2, a 16-bit copy of the largest parameter's gradient
    (stage_1_and_2.py:653 temp_grad_buffer_for_cpu_offload) and a 16-bit partition staging
    buffer (:567-575 param_buffer_of_bit16_for_cpu_offload_groups); for ZeRO-3 the 16-bit
    gradient partitions (stage3.py:791 grad_partitions_flat_buffer on the offload device)."""
    lay = layout(plan)
    n = lay.shard
    if plan.offload == "none":
        return 0
    if lay.strategy == "fsdp":
        return divided(weights + gradients + master + optimizer, n)
    fp32_grads = 4 * divided(master // 4, n) if master else divided(gradients, n)
    states = divided(master, n) + divided(optimizer, n) + fp32_grads
    if plan.offload == "params":
        states += divided(weights, n) + divided(gradients, n)
    elif plan.zero == 3:
        states += divided(gradients, n)
    else:  # in the model's dtype: 16-bit beside an fp32 master, else fp32
        states += (2 if master else 4) * largest + divided(weights, n)
    return states


def full_plan(plan: Plan) -> Plan:
    """The same plan training every weight: its trainable shapes are the base's shapes."""
    return replace(plan, method="full", modules_to_save="")
