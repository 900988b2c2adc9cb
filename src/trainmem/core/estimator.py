"""One training step's memory, component by component, and its two peaks.

The step is modelled as a timeline (after a warm-up step, so optimizer state exists):
forward and loss, loss backward, backward through the layers (last to first), the embedding's
backward, optimizer step. One function per moment says what is alive then. ``allocated`` is
the largest sum of live tensors over those moments, as ``torch.cuda.max_memory_allocated``
would report it; ``device`` adds what the runtime of the target device holds
(trainmem.core.runtime: the CUDA context and the caching allocator's reserve on CUDA).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from trainmem.core.activations import Kernels, autocast_copy_bytes, layer_activations
from trainmem.core.architecture import ModelSpec
from trainmem.core.losses import loss_head
from trainmem.core.mlx_step import mlx_runtime_note, mlx_step
from trainmem.core.nccl import nccl_buffer_bytes
from trainmem.core.offload import checkpoint_offload
from trainmem.core.plan import Plan
from trainmem.core.precision import Dtypes, dtypes, kbit_upcast
from trainmem.core.recipes import recipe
from trainmem.core.rule_of_thumb import rule_of_thumb_bytes
from trainmem.core.runtime import (
    RUNTIME_COMPONENTS,
    TYPICAL,
    RuntimeFigures,
    runtime_note,
    runtime_overhead,
)
from trainmem.core.sharding import (
    SINGLE,
    Layout,
    accelerate_carves,
    ddp_buckets,
    divided,
    gathered,
    host_memory,
    layout,
    units,
    zero_buckets,
    zero_grad_norm,
    zero_offload_clone,
)
from trainmem.core.states import (
    model_states,
    peft_refusal,
    saved_module_bytes,
    stored_weight_bytes,
    trainable_matrices,
    unsharded_4bit_bytes,
)
from trainmem.core.step import Step
from trainmem.core.target import TargetKind
from trainmem.core.units import fmt_bytes

if TYPE_CHECKING:  # the allocator's simulation loads when a GPU estimate first needs it
    from trainmem.core.allocator import Oom
    from trainmem.core.device_peak import DevicePeak

TENSOR_COMPONENTS = (
    "weights",
    "master copy",
    "adapter",
    "gradients",
    "optimizer state",
    "activations",
    "logits",
    "temporaries",
)
COMPONENTS = TENSOR_COMPONENTS + RUNTIME_COMPONENTS
RUNTIME = set(RUNTIME_COMPONENTS)


@dataclass(frozen=True)
class Component:
    name: str
    bytes: int
    kind: str  # "tensor" (counted in the allocated peak) or "runtime"


@dataclass(frozen=True)
class Estimate:
    plan: Plan
    model: ModelSpec
    components: tuple[Component, ...]  # alive at the allocated peak, then runtime
    allocated_bytes: int
    device_bytes: int  # allocated + the runtime of ``runtime_kind``
    peak_phase: str
    phases: dict[str, int]  # allocated total at each moment of the step
    breakdown: dict[str, dict[str, int]]  # tensor components at each moment
    rule_of_thumb_bytes: int
    trainable_params: int
    saved_activation_bytes: int  # what autograd holds once forward ends
    notes: tuple[str, ...] = field(default=())
    runtime_kind: TargetKind = "gpu"
    runtime_figures: RuntimeFigures = TYPICAL  # the CUDA runtime's (built-in or calibrated)
    # On a GPU: the caching allocator simulated over the step (trainmem.core.device_peak),
    # the reserve part of the device peak unless a calibration measured it; None on another
    # kind of device or with simulate=False.
    device_peak: DevicePeak | None = None
    # Per node (trainmem.core.sharding.host_memory): host RAM the run needs at its peak, of
    # which the offloaded states and the weights loaded before sharding.
    host_bytes_per_node: int = 0
    host_offloaded_bytes: int = 0
    host_loading_bytes: int = 0
    # At the allocated peak, one GPU's weights beyond its shard (FSDP / ZeRO-3 all-gathers)
    # and its gradient buckets (DDP, ZeRO); both are inside "weights" / "gradients".
    gathered_bytes: int = 0
    bucket_bytes: int = 0
    # How the plan divides its states over its processes (trainmem.core.sharding.layout),
    # computed once per estimate: widgets, notes and what-ifs read it from here.
    layout: Layout = SINGLE

    def component(self, name: str) -> int:
        return next((c.bytes for c in self.components if c.name == name), 0)

    def device_bytes_on(self, kind: TargetKind, figures: RuntimeFigures | None = None) -> int:
        """The device peak on a device of ``kind`` whose CUDA runtime has ``figures`` (default:
        this estimate's own): the same tensors, another runtime part."""
        figures = figures or self.runtime_figures
        if kind == self.runtime_kind and figures == self.runtime_figures:
            return self.device_bytes
        if kind == "gpu" and self.device_peak is not None:
            peak = self.device_peak
            if figures.gpu_family != self.runtime_figures.gpu_family:  # its own workspaces
                from trainmem.core.device_peak import device_peak

                step = step_sizes(self.plan, self.model, lay=self.layout)
                peak = device_peak(
                    self.plan, self.model, step, self.allocated_bytes, figures.gpu_family
                )
            reserve = _simulated_reserve(peak, self.allocated_bytes, figures)
            if reserve is not None:
                return self.allocated_bytes + outside_allocator(self, figures) + reserve
        nccl = _nccl_bytes(self.plan, self.layout, figures)
        overhead = runtime_overhead(kind, self.allocated_bytes, figures, nccl)
        return self.allocated_bytes + sum(overhead.values())

    def judged_bytes_on(self, kind: TargetKind, figures: RuntimeFigures | None = None) -> int:
        """The figure a fit on a device of ``kind`` is judged on: its device peak, or the
        guide's rule when the plan asks for it."""
        if self.plan.rule_of_thumb:
            return self.rule_of_thumb_bytes
        return self.device_bytes_on(kind, figures)

    @property
    def judged_bytes(self) -> int:
        return self.judged_bytes_on(self.runtime_kind)


def _loop_output(
    plan: Plan, spec: ModelSpec, precision: Dtypes, tokens: int, output: int
) -> tuple[int, int, bool]:
    """What a hand-written loop's ``out`` holds past the loss (docs/research/
    training-stacks.md section 3, from transformers 5.24): ``out.logits`` in the model's output
    dtype, and without checkpointing the DynamicCache (``use_cache`` falls back to the
    config's True; cache_utils.py DynamicLayer.update copies k/v with torch.cat). With SDPA,
    or eager without GQA, the cache tensors are the k/v attention saves; with eager and GQA
    attention saves ``repeat_kv`` copies and the cache is extra.
    Returns (kept output, cache, whether the cache is the saved k/v)."""
    if not plan.tooling.keeps_output:
        return 0, 0, True
    cache = 0
    if not plan.grad_ckpt:  # checkpointing in training forces use_cache off
        cache_e = 2 if precision.autocast else precision.act  # k/v as attention gets them
        cache = 2 * spec.layers * tokens * spec.kv_dim * cache_e
    gqa_eager = plan.attn == "eager" and spec.kv_heads != spec.heads
    return output, cache, not gqa_eager


def _dequant_bytes(spec: ModelSpec, plan: Plan, precision: Dtypes) -> int:
    """A quantized base's largest linear, dequantized for one op: bf16 for 4-bit
    (bitsandbytes dequantize_4bit), the input's dtype for LLM.int8's backward
    (MatMul8bitLt.backward: ``CB.to(ctx.dtype_A, copy=True)``)."""
    if not plan.training.quantized_base:
        return 0
    largest = max(lin.in_features * lin.out_features for lin in spec.quantized_linears())
    return (precision.resid if plan.quant == "int8" else 2) * largest


def step_sizes(
    plan: Plan, spec: ModelSpec, kernels: Kernels = "cuda", lay: Layout | None = None
) -> Step:
    """The step's building blocks for a validated plan (``lay``: its layout, when the caller
    has it already)."""
    precision = dtypes(plan)  # as stored (shards, master, states)
    compute = _compute_dtypes(plan, precision)  # as the layers see them
    states = model_states(spec, plan, precision)
    layer = layer_activations(spec, plan, compute, kernels)
    head = loss_head(spec, plan, compute, kernels)
    tokens = plan.batch * plan.seq_len
    layers = spec.layers
    method = plan.training

    layer_saved = (
        tokens * layer.saved + tokens * plan.seq_len * layer.attention_scores + layer.saved_fixed
    )
    # torch.autocast makes a 16-bit copy of each fp32 weight; it caches the copies of leaf
    # weights that require grad for the whole forward (aten/src/ATen/autocast_mode.cpp
    # cached_cast), and a frozen weight's copy lives as long as the matmul saves it for the
    # input's gradient. A 16-bit or quantized base is used as it is (bitsandbytes dequantizes
    # per op, bitsandbytes/nn/modules.py Linear4bit.forward).
    copies = compute.autocast and compute.weight == 4 and not method.quantized_base
    copy_layer, copy_head = autocast_copy_bytes(spec) if copies else (0, 0)
    if plan.loss_kind != "standard":
        copy_head = 0  # the chunked and fused losses cast lm_head's weight a chunk at a time
    cached = method.trains_base  # full fine-tuning: cached until autocast exits
    head_saved = head.saved

    # Gradients arrive in backward order: lm_head (or the tied embedding), layers, embedding.
    saved_e = saved_module_bytes(plan, precision)
    matrix = spec.vocab * spec.hidden
    if method.trains_base:
        # as autograd makes them (bf16 under FSDP's mixed precision); stored: ``trainable``
        root_e, stored_e = compute.trainable, precision.trainable
        grad_head = matrix * root_e
        grad_embed = grad_head if not spec.tied_embeddings else 0
    else:  # modules_to_save copies, untied
        root_e = stored_e = saved_e
        grad_head = matrix * saved_e if "lm_head" in plan.saved_modules else 0
        grad_embed = matrix * saved_e if "embed_tokens" in plan.saved_modules else 0
    lay = lay or layout(plan)
    head_full, embed_full = grad_head, grad_embed
    root_elements = (head_full + embed_full) // root_e
    if lay.gradients and lay.strategy == "zero":  # ZeRO-2/3: each GPU keeps its shard
        grad_head, grad_embed = divided(grad_head, lay.shard), divided(grad_embed, lay.shard)
    root_sharded = divided(root_elements * stored_e, lay.shard) if lay.gradients else 0
    if lay.strategy == "fsdp":
        # the root's gradients stay whole until its reduce-scatter at the end of backward
        grad_layer = max(0, states.gradients - root_sharded) // layers
    else:
        grad_layer = max(0, states.gradients - grad_head - grad_embed) // layers
    trainable_layer = max(0, states.trainable_params - root_elements) // layers
    adapters = tuple(
        (m.rows, m.cols, m.count // layers)
        for m in (trainable_matrices(spec, plan) if lay.strategy == "fsdp" else [])
        if plan.trains_adapter and m.count % layers == 0
    )
    # what FSDP all-gathers: not the 4-bit weights it leaves whole on every GPU
    gathered_weights = stored_weight_bytes(spec, plan, precision.computed())
    gathered_weights -= unsharded_4bit_bytes(spec, plan)
    # a quantized base's root (embeddings, lm_head, final norm) is in the residual dtype, its
    # layers mostly 4-bit: the bytes are not spread evenly over the parameters
    root_bytes = units(spec, plan).root * precision.computed().resid
    gather = gathered(
        plan,
        spec,
        precision,
        gathered_weights,
        trainable_layer,
        adapters,
        root_bytes if method.quantized_base else None,
    )
    buckets = ddp_buckets(plan, states.gradients)
    carved = accelerate_carves(plan, spec)
    tail_reduce = root_shard = 0
    embedding_grads = layers * grad_layer + head_full + embed_full
    reduce_e = precision.reduce if method.trains_base else root_e  # a root gradient reduced
    root_reduce_fsdp = root_elements * reduce_e
    if carved and (head_full or embed_full):
        # lm_head's gradient is reduce-scattered as soon as the tail's backward ends: its
        # shard stays, its reduce-scatter input until the last layer's; the embedding's own
        # reduce-scatter comes at the end, from its whole gradient (head_full, embed_full:
        # as autograd makes them)
        head_elements, embed_elements = head_full // root_e, embed_full // root_e
        grad_head = divided(head_elements * stored_e, lay.shard)
        tail_reduce = head_elements * reduce_e
        embedding_grads = layers * grad_layer + grad_head + embed_full
        root_reduce_fsdp = embed_elements * reduce_e
        root_shard = divided(embed_elements * stored_e, lay.shard)
    tied_sum = 2 * grad_head if method.trains_base and spec.tied_embeddings else 0
    if tied_sum and lay.strategy == "zero" and lay.gradients:
        # ZeRO 2-3 sum the tied weight's two whole gradients (autograd, before DeepSpeed's
        # hooks), none of them in the gradient partition buffers: old, new and sum (measured)
        tied_sum = 3 * head_full
    root_reduce = backward_buckets = 0
    if lay.strategy == "zero":  # DeepSpeed's 16-bit gradients under its bf16 / fp16
        kept_buckets, backward_buckets = zero_buckets(plan, spec, precision.reduce)
        buckets += kept_buckets
        if plan.offload == "optimizer":  # at the last (largest) gradient: its clone, fp64 norm
            root_reduce = zero_offload_clone(plan, spec, precision.reduce)
            root_reduce += zero_grad_norm(plan, spec, states.trainable_params)
    early_grads = head.early_head_grad
    if lay.strategy == "zero" and plan.zero == 3 and plan.offload == "none":
        # ZeRO-3's 16-bit gradient partitions are one buffer made at init (DeepSpeed 0.19.8
        # stage3.py:791 grad_partitions_flat_buffer), alive through forward too
        early_grads += states.gradients
    reentrant = plan.tooling.reentrant_ckpt
    offload = checkpoint_offload(plan, spec, compute.resid)
    if plan.grad_ckpt:
        # transformers' gradient checkpointing keeps each layer's input and recomputes the
        # layer in backward (torch/utils/checkpoint.py): one layer's saves exist at a time.
        # Offloaded, the inputs wait in host RAM (trainmem.core.offload) and come back one at
        # a time, into Unsloth's persistent GPU buffer where it keeps one.
        kept_per_layer = 0 if offload.active else tokens * layer.checkpoint
        if not reentrant:  # bitsandbytes' int8 inputs escape the checkpoint's hooks
            kept_per_layer += tokens * layer.int8_inputs
        reload = tokens * layer.checkpoint if offload.active and not offload.gpu_buffer else 0
        recompute = layer_saved + copy_layer + reload
        forward_copies = (layers * copy_layer + copy_head) if cached else 0
        saved_after_forward = layers * kept_per_layer + head_saved + (0 if cached else copy_head)
        saved_after_forward += offload.last_input + offload.first_input
    else:
        # a layer whose own saves hold its input (Unsloth's RMSNorm saves X) keeps it too
        kept_per_layer = layer_saved + copy_layer
        kept_per_layer += tokens * (layer.int8_inputs_extra + layer.input_kept)
        recompute = forward_copies = 0
        saved_after_forward = layers * kept_per_layer + head_saved + copy_head
    kept_output, cache, cache_is_saved = _loop_output(plan, spec, compute, tokens, head.output)
    scores = tokens * plan.seq_len * layer.scores_transient
    return Step(
        states=states,
        layers=layers,
        kept_per_layer=kept_per_layer,
        recompute=recompute,
        saved_after_forward=saved_after_forward,
        forward_copies=forward_copies,
        logits_forward=head.forward,
        loss_backward=head.backward,
        layer_transient=tokens * layer.backward_transient + layer.transient_fixed + scores,
        dequant=_dequant_bytes(spec, plan, compute),
        grad_head=grad_head,
        grad_embed=grad_embed,
        grad_layer=grad_layer,
        tied_sum=tied_sum,
        kept_output=kept_output,
        cache=cache,
        cache_is_saved=cache_is_saved,
        early_head_grad=early_grads,
        gathered=gather,
        buckets=buckets,
        backward_buckets=backward_buckets,
        grad_inflight=gather.layer_grad_inflight if lay.weights else -1,
        embedding_grads=embedding_grads if lay.strategy == "fsdp" else -1,
        root_reduce=root_reduce_fsdp if lay.strategy == "fsdp" else root_reduce,
        tail_reduce=tail_reduce,
        root_shard=root_shard,
        carved=carved,
        ckpt_buffer=offload.gpu_buffer,
        ckpt_last=offload.last_input,
        ckpt_first=offload.first_input,
    )


def _compute_dtypes(plan: Plan, precision: Dtypes) -> Dtypes:
    """The dtypes the layers compute in: a sharded recipe's gathered units and gradients
    (Dtypes.computed). FSDP all-gathers a LoRA unit's fp32 adapters in the 16-bit base's
    dtype (sharding.fsdp_gathered), so PEFT casts no input up to fp32."""
    if plan.strategy == "fsdp" and plan.trains_adapter and precision.weight == 2:
        return replace(precision, trainable=2)
    return precision.computed()


def _unsharded_weight_bytes(plan: Plan, spec: ModelSpec) -> int:
    """The whole model's weights as stored (what a shard is a part of)."""
    return stored_weight_bytes(spec, plan, dtypes(plan))


def _cache_held(s: Step, layers_freed: int) -> int:
    """The part of a loop's KV cache that the moment does not count already, once backward
    has freed the saved tensors of ``layers_freed`` layers (0 outside a loop)."""
    if s.cache_is_saved:
        return s.cache * layers_freed // s.layers
    return s.cache


def forward_and_loss(s: Step) -> dict[str, int]:
    """End of forward: every saved activation, the logits and the loss's fp32 upcast
    (transformers/loss/loss_utils.py ForCausalLMLoss: ``logits.float()``)."""
    activations = s.saved_after_forward + _cache_held(s, 0)
    temps = s.forward_copies + s.dequant
    grads = s.early_head_grad + s.buckets
    return s.alive(activations, s.logits_forward, grads, temps, s.gathered.forward)


def loss_backward(s: Step) -> dict[str, int]:
    """log_softmax backward: grad input, grad output and the saved fp32 output at once (and a
    loop's ``out.logits``)."""
    activations = s.saved_after_forward + _cache_held(s, 0)
    logits = s.loss_backward + s.kept_output
    grads = s.early_head_grad + s.buckets
    return s.alive(activations, logits, grads, 0, s.gathered.loss_backward)


def backward_last_layer(s: Step) -> dict[str, int]:
    """Backward through the last layer: its saves (recomputed under checkpointing) and those
    of every layer below are alive; the head's gradient exists."""
    activations = s.layers * s.kept_per_layer + s.recompute + s.ckpt_last + _cache_held(s, 0)
    activations += s.ckpt_first
    grads = s.grad_head + _inflight(s) + s.buckets + s.backward_buckets
    temps = s.layer_transient + s.dequant + s.tail_reduce
    return s.alive(activations, s.kept_output, grads, temps, s.gathered.backward_last)


def backward_first_layer(s: Step) -> dict[str, int]:
    """Backward through the first layer: every layer's gradient, one layer's activations."""
    activations = s.kept_per_layer + s.recompute + _cache_held(s, s.layers - 1) + s.ckpt_first
    grads = s.grad_head + (s.layers - 1) * s.grad_layer + _inflight(s) + s.buckets
    grads += s.backward_buckets
    temps = s.layer_transient + s.dequant + s.gathered.reduce_buffer
    return s.alive(activations, s.kept_output, grads, temps, s.gathered.backward_first)


def _inflight(s: Step) -> int:
    """The gradient of the layer running backward: whole until FSDP reduce-scatters it."""
    return s.grad_layer if s.grad_inflight < 0 else s.grad_inflight


def backward_embedding(s: Step) -> dict[str, int]:
    """The embedding's backward. A tied weight's two gradients (lm_head's, held in autograd's
    input buffer since backward began, and the embedding's) are summed out of place before
    AccumulateGrad (torch/csrc/autograd/input_buffer.cpp): old, new and sum are alive.
    An offloaded embedding output kept as a leaf (trainmem.core.offload) has its gradient."""
    held = _cache_held(s, s.layers) + 2 * s.ckpt_first
    grads = (s.states.gradients if s.embedding_grads < 0 else s.embedding_grads) + s.buckets
    grads += s.backward_buckets
    # FSDP then copies the root's gradients into its reduce-scatter input (foreach_reduce),
    # once the previous unit's is freed (torch 2.13 _fsdp_param_group.py post_backward keeps
    # reduce_scatter_max_input_buffers = 1); the embedding's backward runs beside that one
    during = s.tied_sum + s.gathered.reduce_buffer
    if s.carved:  # the embedding unit reshards, then reduce-scatters into a new shard
        computing = s.alive(held, s.kept_output, grads, during, s.gathered.embedding)
        reducing = s.alive(held, s.kept_output, grads + s.root_shard, s.root_reduce, 0)
        return max(computing, reducing, key=lambda parts: sum(parts.values()))
    temps = max(during, s.root_reduce)
    return s.alive(held, s.kept_output, grads, temps, s.gathered.embedding)


def optimizer_step(s: Step) -> dict[str, int]:
    """optimizer.step(): gradients, states and the optimizer's own temporaries (and a loop's
    ``out``, alive until the next forward replaces it)."""
    held = _cache_held(s, s.layers)
    grads = s.states.gradients + s.buckets
    return s.alive(held, s.kept_output, grads, s.states.optimizer_temp, s.gathered.step)


MOMENTS = {
    "forward": forward_and_loss,
    "loss backward": loss_backward,
    "backward (last layer)": backward_last_layer,
    "backward (first layer)": backward_first_layer,
    "backward (embedding)": backward_embedding,
    "optimizer step": optimizer_step,
}


def _mlx_estimate(plan: Plan, spec: ModelSpec, kernels: Kernels, runtime: TargetKind) -> Estimate:
    """The mlx stack's step (trainmem.core.mlx_step): MLX's CPU kernels off a GPU or when
    asked (``kernels="cpu"``), Metal's on unified memory. No CUDA runtime is added."""
    step = mlx_step(plan, spec, gpu_loss=kernels != "cpu" and runtime == "unified")
    totals = {name: sum(parts.values()) for name, parts in step.phases.items()}
    peak_phase = max(totals, key=lambda name: totals[name])
    parts = step.phases[peak_phase]
    components = tuple(
        Component(name, int(parts.get(name, 0)), "runtime" if name in RUNTIME else "tensor")
        for name in COMPONENTS
    )
    stack = plan.tooling
    notes = (*spec.notes, f"stack: {stack.label}: {stack.defaults}", *step.notes)
    return Estimate(
        plan=plan,
        model=spec,
        components=components,
        allocated_bytes=totals[peak_phase],
        device_bytes=totals[peak_phase],
        peak_phase=peak_phase,
        phases=totals,
        breakdown=step.phases,
        rule_of_thumb_bytes=rule_of_thumb_bytes(spec.params, plan),
        trainable_params=step.trainable_params,
        saved_activation_bytes=step.saved_after_forward,
        notes=(*notes, *_ignored_note(plan), mlx_runtime_note(runtime)),
        runtime_kind=runtime,
    )


def estimate(
    plan: Plan,
    spec: ModelSpec,
    kernels: Kernels = "cuda",
    runtime: TargetKind = "gpu",
    figures: RuntimeFigures = TYPICAL,
    simulate: bool = True,
) -> Estimate:
    """Estimate one training step. ``kernels="cpu"`` models CPU kernels where they keep
    different tensors (dropout), for comparison with measurements taken on a CPU;
    ``runtime`` is the kind of device whose overhead the device peak adds, with ``figures``
    for a CUDA runtime (built-in, or this machine's calibration of that GPU). On a GPU the
    device peak is the caching allocator's simulated reserve plus the context; a calibrated
    reserve (measured on this machine) replaces the simulation, and ``simulate=False`` gives
    the quick figure searches bracket with (allocated + the typical reserve fraction)."""
    if kernels not in ("cuda", "cpu"):
        raise ValueError(f"kernels must be 'cuda' or 'cpu', not {kernels!r}")
    plan = plan.validated()
    if plan.tooling.engine == "mlx":
        return _mlx_estimate(plan, spec, kernels, runtime)
    # On unified memory or a CPU, host RAM is the device: offloading saves nothing there.
    counted = replace(plan, ckpt_offload=False) if runtime != "gpu" else plan
    lay = layout(counted)
    step = step_sizes(counted, spec, kernels, lay)
    phases = {name: moment(step) for name, moment in MOMENTS.items()}
    totals = {name: sum(parts.values()) for name, parts in phases.items()}
    peak_phase = max(totals, key=lambda name: totals[name])
    allocated = totals[peak_phase]
    nccl_bytes = _nccl_bytes(counted, lay, figures)
    overhead = runtime_overhead(runtime, allocated, figures, nccl_bytes)
    peak = None
    if runtime == "gpu" and simulate:
        from trainmem.core.device_peak import device_peak

        peak = device_peak(counted, spec, step, allocated, figures.gpu_family)
        reserve = _simulated_reserve(peak, allocated, figures)
        if reserve is not None:
            overhead["allocator reserve"] = reserve
    parts = {**phases[peak_phase], **overhead}
    # What offload keeps in host RAM, counted on the plan as given (on unified memory or a
    # CPU it is the same memory, which the note says; the step above counts no saving there).
    ckpt_host = checkpoint_offload(plan, spec, dtypes(plan).resid).host
    host = host_memory(plan, _unsharded_weight_bytes(plan, spec), step.states.offloaded, ckpt_host)
    gathered_now = phases[peak_phase]["weights"] - step.states.weights
    components = tuple(
        Component(name, int(parts.get(name, 0)), "runtime" if name in RUNTIME else "tensor")
        for name in COMPONENTS
    )
    return Estimate(
        plan=plan,
        model=spec,
        components=components,
        allocated_bytes=allocated,
        device_bytes=allocated + sum(overhead.values()),
        peak_phase=peak_phase,
        phases=totals,
        breakdown=phases,
        rule_of_thumb_bytes=rule_of_thumb_bytes(spec.params, plan),
        trainable_params=step.states.trainable_params,
        saved_activation_bytes=step.saved_after_forward,
        notes=(*_notes(spec, plan, runtime, ckpt_host, lay), runtime_note(runtime, figures)),
        runtime_kind=runtime,
        runtime_figures=figures,
        device_peak=peak,
        host_bytes_per_node=host.peak,
        host_offloaded_bytes=host.offloaded,
        host_loading_bytes=host.loading,
        gathered_bytes=gathered_now,
        bucket_bytes=step.buckets
        + (step.backward_buckets if peak_phase.startswith("backward") else 0),
        layout=lay,
    )


def _nccl_bytes(plan: Plan, lay: Layout, figures: RuntimeFigures) -> int:
    """NCCL's buffers on one process of the plan, on a GPU of ``figures``."""
    fsdp = plan.fsdp if lay.strategy == "fsdp" else None
    zero = plan.zero if lay.strategy == "zero" else None
    # DDP, FSDP1's NO_SHARD and ZeRO-0 all-reduce the gradients; the sharded ones
    # reduce-scatter them. DeepSpeed and HSDP run them on groups of their own.
    groups = "clone" if zero is not None else "hybrid" if fsdp == "hybrid-shard" else "default"
    return nccl_buffer_bytes(
        plan.gpus,
        plan.nodes,
        all_reduce=lay.strategy == "ddp" or fsdp == "no-shard" or zero == 0,
        nvswitch=figures.nvswitch,
        family=figures.gpu_family,
        groups=groups,
    )


def outside_allocator(est: Estimate, figures: RuntimeFigures | None = None) -> int:
    """What a GPU holds beside PyTorch's allocator for ``est``: the CUDA context and NCCL."""
    figures = figures or est.runtime_figures
    return figures.context_bytes + _nccl_bytes(est.plan, est.layout, figures)


def _simulated_reserve(peak: DevicePeak, allocated: int, figures: RuntimeFigures) -> int | None:
    """The reserve part of the device peak from the simulation: as simulated, or scaled by a
    calibration's correction (measured / simulated reserved of its own run). None: a
    calibration without a correction, whose measured fraction of the allocated peak stands."""
    if not figures.calibrated:
        return peak.overhead
    if figures.reserve_correction is None:
        return None
    return max(0, round(peak.reserved * figures.reserve_correction) - allocated)


@dataclass(frozen=True)
class OnDevice:
    """The step on one device of ``usable`` bytes. Where the allocator, with memory to spare,
    would reserve more than the GPU has, the step is simulated again within it, as PyTorch
    runs it (CUDACachingAllocator.cpp malloc): when cudaMalloc fails the allocator frees its
    wholly free cached segments and retries, and only then raises OutOfMemoryError."""

    bytes: int  # the device peak there (the one with memory to spare, unless retried)
    unlimited: int  # the device peak with memory to spare (Estimate.device_bytes_on)
    retried: bool = False  # over the device on that peak, but run within it by the retry
    failure: tuple[str, Oom] | None = None  # the moment and first allocation that fails


def device_peak_on(
    est: Estimate, usable_bytes: int, kind: TargetKind, figures: RuntimeFigures | None = None
) -> OnDevice:
    """``est`` on a device of ``kind`` with ``usable_bytes`` and runtime ``figures``: where
    its device peak is over them, the simulation run again within the GPU's memory (the
    context's share left out); a calibration's reserve correction (measured over simulated
    bytes) shrinks that capacity in the same proportion.

    Verdicts are judged on this run (``bytes``): a step the retry saves fits, but tight
    (trainmem.core.fit.judge_fit), since it runs at the device's limit and each retry waits
    for the GPU; the reports say so beside the verdict. The published A100 run that needed it
    (bench/accuracy/published_cuda.py, Mistral-7B full at batch 8) ran."""
    figures = figures or est.runtime_figures
    unlimited = est.device_bytes_on(kind, figures)
    if kind != "gpu" or est.device_peak is None or unlimited <= usable_bytes:
        return OnDevice(unlimited, unlimited)
    run = _run_within(est, usable_bytes, figures)
    if run is None:
        return OnDevice(unlimited, unlimited)
    if run[1].oom is not None:
        return OnDevice(unlimited, unlimited, failure=(run[1].moment, run[1].oom))
    return OnDevice(run[0], unlimited, retried=True)


def fits_within(est: Estimate, usable_bytes: int, figures: RuntimeFigures) -> OnDevice | None:
    """For a quick ``est`` (simulate=False) of a GPU plan: the step simulated within the GPU
    only, one simulation where device_peak_on makes two. The OnDevice device_peak_on would
    give where the step runs there, by the cache retry or without it (then its ``unlimited``
    is the same run's); None where it fails, or where no simulation decides the reserve."""
    run = _run_within(est, usable_bytes, figures)
    if run is None or run[1].oom is not None or run[0] > usable_bytes:
        return None
    return OnDevice(run[0], run[0], retried=run[1].retried)


def within_correction(figures: RuntimeFigures) -> float | None:
    """What a run within the GPU's reserve is scaled by: a calibration's correction, 1.0
    without one; None where a calibration measured no correction (its fraction stands and
    no simulation decides the reserve)."""
    correction = figures.reserve_correction if figures.calibrated else 1.0
    return correction or None


def _run_within(
    est: Estimate, usable_bytes: int, figures: RuntimeFigures
) -> tuple[int, DevicePeak] | None:
    """The step simulated within ``usable_bytes`` of a GPU (less the context and NCCL; a
    calibration's reserve correction shrinks it in proportion): the device peak it runs at,
    and the run. None where a calibration measured no correction (its fraction stands)."""
    correction = within_correction(figures)
    if correction is None:
        return None
    from trainmem.core.device_peak import device_peak

    plan, spec, allocated = est.plan, est.model, est.allocated_bytes
    outside = outside_allocator(est, figures)
    capacity = int(max(0, usable_bytes - outside) / correction)
    step = step_sizes(plan, spec, lay=est.layout)
    run = device_peak(plan, spec, step, allocated, figures.gpu_family, capacity=capacity)
    return allocated + outside + max(0, round(run.reserved * correction) - allocated), run


def _notes(
    spec: ModelSpec, plan: Plan, runtime: TargetKind, ckpt_host: int, lay: Layout
) -> tuple[str, ...]:
    notes = list(spec.notes)
    refused = peft_refusal(spec, plan)
    if refused:
        notes.append(refused)
    if plan.method in ("lora", "qlora") and plan.lora_rank > spec.hidden:
        notes.append(
            f"LoRA rank {plan.lora_rank:,} is above the hidden size {spec.hidden:,}: an "
            "adapter's rank cannot exceed its layer's smaller side, so the extra parameters "
            "cost memory and add nothing"
        )
    if plan.attn == "eager":
        notes.append("eager attention keeps batch x heads x seq^2 scores per layer; sdpa does not")
    if spec.final_logit_softcap and plan.attn == "sdpa":
        notes.append("Gemma 2 soft-caps attention logits, which only eager attention applies")
    if spec.is_moe and plan.training.quantized_base:
        if kbit_upcast(plan):  # PEFT's k-bit preparation casts them up
            kept = ", in fp32 after prepare_model_for_kbit_training"
        else:
            kept = ", in fp32" if dtypes(plan).weight == 4 else ", in 16-bit"
        notes.append(
            "bitsandbytes quantizes nn.Linear layers only: transformers 5 keeps the experts as "
            "fused 3-D parameters, so they and the router stay unquantized" + kept
        )
    if plan.attn in ("flash-attention-2", "flex"):
        notes.append(
            f"{plan.attn} is counted as SDPA's flash kernel (the same saves: q, k, v, "
            "output, log-sum-exp); derived from source, not measured (needs a GPU)"
        )
    notes.extend(_stack_notes(spec, plan, runtime, ckpt_host))
    notes.extend(_sharding_notes(spec, plan, lay))
    notes.extend(_ignored_note(plan))
    return tuple(notes)


def _ignored_note(plan: Plan) -> list[str]:
    ignored = plan.ignored_fields()
    return [f"{', '.join(ignored)} do not apply to this plan and change nothing"] if ignored else []


def _sharding_notes(spec: ModelSpec, plan: Plan, lay: Layout) -> list[str]:
    if lay.strategy == "single":
        return []
    where = f"{plan.gpus} GPU{'s' if plan.gpus > 1 else ''} x {plan.nodes} node" + (
        "s" if plan.nodes > 1 else ""
    )
    notes = [f"per GPU of {where}: activations and logits are never divided by sharding"]
    if lay.world == 1 and plan.offload == "none" and lay.strategy in ("zero", "fsdp"):
        notes.append(f"{plan.sharding} on one GPU shards nothing; it only adds its buffers")
    if lay.strategy == "zero":
        notes.append(
            "DeepSpeed ZeRO follows 0.19.8's source, measured per rank on its CPU "
            "accelerator (real gloo runs); NCCL's own buffers are derived from its source"
        )
    if lay.strategy == "ddp":
        notes.append("DDP keeps a bucket copy of every gradient (derived from torch's source)")
    found = recipe(plan)
    if found is not None:
        notes.append(f"precision recipe: {found.label} ({found.source})")
    if lay.strategy == "fsdp" and plan.fsdp_version == 1:
        notes.append("FSDP1 is counted per unit like FSDP2, with flat-parameter padding")
    if accelerate_carves(plan, spec):
        notes.append(
            "FSDP2 units as accelerate >= 1.14 makes them for untied embeddings (the embedding "
            "and [norm, lm_head] each a unit); an older accelerate keeps one root unit, which "
            "needs more (measured up to 9.6% on Llama-3.1-8B: docs/accuracy.md)"
        )
    whole = unsharded_4bit_bytes(spec, plan)
    if whole:
        notes.append(
            f"the 4-bit weights ({fmt_bytes(whole)}) stay whole on every GPU: accelerate leaves "
            "bitsandbytes' default uint8 storage out of FSDP2's sharding; load with "
            "bnb_4bit_quant_storage=torch.bfloat16 to shard them (as axolotl and LLaMA-Factory do)"
        )
    return notes


LOSS_NOTES = {
    "standard": "loss: transformers' cross-entropy on the full logits, upcast to fp32",
    "chunked": "loss: TRL's chunked head, 4096 x 32768 logit tiles recomputed in backward, "
    "no full logits (trl/kernels/chunked_logprob.py)",
    "fused": "loss: Liger's fused linear cross-entropy, logits one chunk at a time; derived "
    "from its source, not measured (Triton kernels need a GPU); Cut Cross-Entropy keeps less",
    "unsloth": "loss: Unsloth's fused cross-entropy, logits one chunk at a time, chunks sized "
    "for 4 GiB of fp32 logits (with less than 8 GiB free Unsloth makes them smaller); derived "
    "from unsloth_zoo's source, not measured",
}


def _stack_notes(spec: ModelSpec, plan: Plan, runtime: TargetKind, ckpt_host: int) -> list[str]:
    """What the stack does by default and what the plan's stack-level fields change."""
    stack = plan.tooling
    fused_by = stack.fused_loss if plan.loss_kind == "fused" else ""
    loss_note = LOSS_NOTES["unsloth" if fused_by == "unsloth" else plan.loss_kind]
    notes = [f"stack: {stack.label}: {stack.defaults}", loss_note]
    if plan.fp32_base and plan.precision.endswith("-mixed"):
        notes.append(
            "the frozen base is fp32 under autocast: 4 bytes per weight, and each "
            "linear runs on a 16-bit copy of its weight"
        )
    if plan.training.quantized_base and plan.quant == "int8":
        notes.append(
            "LLM.int8 base: 1 byte per weight + an fp32 scale per row; its inputs are "
            "kept by bitsandbytes outside checkpointing's hooks (derived from source)"
        )
    if ckpt_host:
        where = "in pinned host RAM" if runtime == "gpu" else "in the same memory (no saving)"
        notes.append(f"checkpoint offload keeps {fmt_bytes(ckpt_host)} of layer inputs {where}")
    if plan.packing:
        notes.append(
            "packing: every row holds seq_len real tokens, as the estimate assumes; "
            "without packing, rows are padded to the longest example in the batch"
        )
    if plan.optimizer.startswith("paged-"):
        notes.append(
            "paged optimizer state lives in CUDA unified memory: counted on the "
            "device, though the driver may evict it to host RAM under pressure"
        )
    return notes
