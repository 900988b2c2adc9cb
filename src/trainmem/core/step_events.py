"""One training step as the ordered allocations and frees the caching allocator sees.

The estimator (trainmem.core.estimator) says what is alive at six moments of the step; the
allocator (trainmem.core.allocator) needs the order in which tensors come and go, and their
sizes one by one, since a freed block is reused only by a request it can hold. This module
turns the same ``Step`` sizes into that sequence, so the live bytes at each moment are the
estimator's figures (tests/core/test_step_events.py checks it), in the order a Hugging Face
step runs them:

- loading: the weights (embedding, each layer's linears in forward order, lm_head), then the
  fp32 master copy and PEFT's adapters, then DDP / ZeRO-3 gradient buckets, which live for the
  whole run (ZeRO 1-2's come with the head's gradient and go when backward ends);
- forward, layer by layer: each layer's saved tensors (under checkpointing its input, and the
  layer's intermediates built and freed, as a no-grad forward does); a quantized linear's
  dequantized weight, made and freed per op (bitsandbytes dequantize_4bit);
- the loss: the logits, their fp32 upcast and log_softmax's output; its backward's gradients
  and, for 16-bit logits, their gradient cast down for the head's backward;
- backward, last layer to first: the layer's saves rebuilt under checkpointing, its gradients
  in flight, the layer's gradients (allocated by AccumulateGrad, in backward order), then the
  layer's saves freed;
- the optimizer step: its states (allocated lazily at the first step, torch/optim/adam.py
  _init_group) and its temporaries; then ``zero_grad(set_to_none=True)`` frees every gradient
  (torch >= 2.0's default, torch/optim/optimizer.py);
- under FSDP, the all-gathered weights (FSDP1) and the sharded gradients on the streams that
  allocate them, under ZeRO-3 the gathered weights (``_streams``); everything else on the
  default stream.

Two steps run back to back, the first without optimizer state, since the peak a run reserves
is over its first steps (the cached blocks of step one shape step two). The sequence is
synthetic: sizes come from the estimator's formulas, split into tensors of the layer's widths
(a layer's saves into its MLP-wide and hidden-wide tensors, its weights and gradients per
linear, in proportion to their elements). bench/measure/trace_events.py compares it with the
sequence a real step allocates.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

from trainmem.core.allocator import Alloc, Event, Free
from trainmem.core.architecture import ModelSpec
from trainmem.core.plan import Plan
from trainmem.core.precision import dtypes
from trainmem.core.step import Step

# The moments the estimator names, in the order the sequence reaches them.
MOMENTS = (
    "forward",
    "loss backward",
    "backward (last layer)",
    "backward (first layer)",
    "backward (embedding)",
    "optimizer step",
)


@dataclass(frozen=True)
class StepEvents:
    """The sequence and, per step and moment, the index of the event that reaches it."""

    events: tuple[Event, ...]
    moments: tuple[dict[str, int], ...]  # one per step simulated
    loaded: int = 0  # events[:loaded] load the model; the first step starts there


def split(total: int, shares: Sequence[int]) -> list[int]:
    """``total`` in parts proportional to ``shares`` (summing exactly to ``total``; zero
    parts dropped)."""
    weight = sum(shares)
    if total <= 0:
        return []
    if weight <= 0:
        return [total]
    parts, given, acc = [], 0, 0
    for share in shares:
        acc += share
        upto = total * acc // weight
        parts.append(upto - given)
        given = upto
    return [p for p in parts if p > 0]


def _pieces(total: int, unit: int, most: int) -> list[int]:
    """``total`` as up to ``most`` tensors of ``unit`` bytes and one for the rest."""
    if total <= 0:
        return []
    if unit <= 0:
        return [total]
    count = min(most, total // unit)
    rest = total - count * unit
    return [unit] * count + ([rest] if rest else [])


class _Builder:
    def __init__(self) -> None:
        self.events: list[Event] = []
        self.live: dict[Hashable, int] = {}

    def alloc(self, key: Hashable, size: int, stream: int = 0) -> None:
        if size > 0:
            self.events.append(Alloc(key, size, stream))
            self.live[key] = size

    def allocs(self, key: Hashable, sizes: Sequence[int], stream: int = 0) -> None:
        for index, size in enumerate(sizes):
            self.alloc((key, index), size, stream)

    def free(self, key: Hashable) -> None:
        if key in self.live:
            del self.live[key]
            self.events.append(Free(key))

    def frees(self, key: Hashable, count: int) -> None:
        for index in range(count):
            self.free((key, index))

    def swap(self, key: Hashable, size: int, stream: int = 0) -> None:
        """The tensor called ``key`` replaced by one of ``size`` (freed first)."""
        self.free(key)
        self.alloc(key, size, stream)


@dataclass(frozen=True)
class _Shapes:
    """How the step's totals split into tensors."""

    layer: list[int]  # one decoder layer's linear weights, elements, forward order
    linears: list[int]  # distinct linear sizes (elements), for dequantized weights
    hidden: int  # one hidden-wide activation of the batch (bytes per element: 1)
    wide: int  # one MLP-wide activation (elements)


def _shapes(spec: ModelSpec, tokens: int) -> _Shapes:
    layer = [lin.count * lin.in_features * lin.out_features for lin in spec.linears()]
    distinct = sorted({lin.in_features * lin.out_features for lin in spec.quantized_linears()})
    wide = spec.expert_intermediate if spec.is_moe else spec.intermediate
    return _Shapes(layer, distinct, tokens * spec.hidden, tokens * wide)


def _activation_tensors(total: int, shapes: _Shapes, act: int, resid: int) -> list[int]:
    """A layer's saves as tensors: its MLP-wide ones (act(gate), act*up, up: at most three),
    linear outputs of ``act`` bytes an element, then hidden-wide ones of the residual stream's
    ``resid`` bytes, then what is left (log-sum-exp rows, norms' rows)."""
    wide = _pieces(total, shapes.wide * act, 3)
    rest = wide.pop() if wide and wide[-1] != shapes.wide * act else 0
    hidden = _pieces(rest, shapes.hidden * resid, 6)
    if len(hidden) > 6:  # the small rest joins the last hidden-wide tensor
        hidden[-2:] = [hidden[-2] + hidden[-1]]
    return wide + hidden


# Streams other than the default one (0). PyTorch's allocator keeps a block's stream and caches
# it, once freed, in that stream's pool, for requests on that stream only
# (CUDACachingAllocator.cpp get_free_block: BlockComparatorSize orders by stream first).
UNSHARD_STREAM = 1  # all-gathers: FSDP1's unshard stream, ZeRO-3's allgather stream
REDUCE_STREAM = 2  # FSDP's reduce-scatter outputs: the sharded gradients


def _streams(plan: Plan) -> tuple[int, int]:
    """The streams a plan's gathered weights and sharded gradients are allocated on.

    FSDP1 all-gathers a unit's flat parameter into storage allocated under its unshard stream
    (torch 2.13 distributed/fsdp/_runtime_utils.py:304-305 _unshard, _flat_param.py:1381,1408
    _alloc_padded_unsharded_flat_param) and reduce-scatters into a new sharded gradient made
    under its post-backward stream (_runtime_utils.py:755 _post_backward_hook, :901
    _get_reduce_scatter_tensors), which stays the parameter's gradient until zero_grad.
    FSDP2 copies its all-gather out into parameters allocated on the default stream
    (_fully_shard/_fsdp_collectives.py:463 alloc_all_gather_outputs) but reduce-scatters
    into an output allocated under its reduce-scatter stream (:611-612), whose views are the
    sharded gradients (:685-700). DeepSpeed ZeRO-3 gathers parameters into buffers allocated
    under its allgather stream (0.19.8 runtime/zero/partitioned_param_coordinator.py:606-609,
    partition_parameters.py:1343 _all_gather_dtype, :1388 _all_gather_sequential), a stream of
    its own with overlap_comm (parameter_offload.py:195-196), which stage 3 turns on unless the
    config says otherwise (zero/config.py:384-386; the plan's overlap_comm field is stages
    1-2's); its gradients go to partition buffers made at init. Derived from source: a CPU
    trace has no streams. Against the published FSDP1 A100 runs
    (bench/accuracy/published_cuda.py) the per-stream pools bring the full fine-tunes' device
    peak from 10-20% under to within 3%; no ZeRO-3 run with the GPU's memory published is here
    to check its stream."""
    if plan.world <= 1:
        return 0, 0
    if plan.strategy == "zero":
        return (UNSHARD_STREAM if plan.zero == 3 else 0), 0
    if plan.strategy != "fsdp" or plan.fsdp == "no-shard":
        return 0, 0
    return (UNSHARD_STREAM if plan.fsdp_version == 1 else 0), REDUCE_STREAM


def step_events(plan: Plan, spec: ModelSpec, step: Step) -> StepEvents:
    """The allocation sequence of two training steps of a validated ``plan`` on ``spec``,
    from the estimator's ``step`` sizes (trainmem.core.estimator.Step); activations split
    into tensors of the plan's dtypes (trainmem.core.precision.dtypes)."""
    s = step
    tokens = plan.batch * plan.seq_len
    shapes = _shapes(spec, tokens)
    b = _Builder()
    layers = s.layers
    unshard, reduced = _streams(plan)
    model_shares = [spec.embedding_params, *([sum(shapes.layer)] * layers), spec.lm_head_params]
    for name, total in (("weight", s.states.weights), ("master", s.states.master)):
        for index, part in enumerate(split(total, model_shares)):
            b.allocs((name, index), split(part, shapes.layer) if 0 < index <= layers else [part])
    b.allocs("adapter", split(s.states.adapter, [1] * max(1, layers)))
    b.alloc("buckets", s.buckets)
    b.alloc("offload buffer", s.ckpt_buffer)  # Unsloth's reload buffer, made once
    grad_layer = split(s.grad_layer, shapes.layer) if s.grad_layer else []
    inflight = s.grad_layer if s.grad_inflight < 0 else s.grad_inflight
    optimizer = split(s.states.optimizer, [1] * (2 * max(1, layers)))
    # Foreach AdamW's temporaries one per trained parameter, shaped as the gradients
    # (torch 2.13 torch/optim/adamw.py _multi_tensor_adamw: _foreach_sqrt(exp_avg_sqs)). As
    # one lump, once freed, it served step 2's logits, which the real step's per-parameter
    # blocks cannot: traced, Mistral-7B's full fine-tune reserves 2.1 GB more in each of step
    # 2's forward and backward (bench/accuracy/published_cuda.py).
    per_param = [s.grad_embed, *(grad_layer * layers), s.grad_head]
    if sum(per_param) <= 0:
        per_param = [1] * max(1, layers)
    temps = (
        split(s.states.optimizer_temp, per_param)
        if plan.optimizer == "adamw-foreach"
        else [s.states.optimizer_temp]
    )
    moments: list[dict[str, int]] = []
    dt = dtypes(plan)
    kept = _activation_tensors(s.kept_per_layer, shapes, dt.act, dt.resid)
    recompute = _activation_tensors(s.recompute, shapes, dt.act, dt.resid)
    transient = _activation_tensors(s.layer_transient, shapes, dt.act, dt.resid)
    dequant = [2 * n for n in shapes.linears] if s.dequant else []
    logit_unit = tokens * spec.vocab
    loaded = len(b.events)
    for number in range(2):
        at: dict[str, int] = {}
        b.free("loop output")  # a loop's ``out`` of the step before, replaced
        b.frees("loop cache", layers)
        # forward
        copies = split(s.forward_copies, [1] * layers + [0]) if s.forward_copies else []
        b.alloc("first input", s.ckpt_first)  # a leaf the autograd graph keeps
        for j in range(layers):
            if j < len(copies):
                b.alloc(("copy", j), copies[j])
            b.allocs(("kept", j), kept)
            if plan.grad_ckpt:  # the layer's intermediates, built and freed without grad
                b.allocs("forward temp", recompute)
                b.frees("forward temp", len(recompute))
            for size in dequant:
                b.alloc("dequant", size)
                b.free("dequant")
            if s.cache and not s.cache_is_saved:
                b.alloc(("loop cache", j), s.cache // layers)
        if s.forward_copies > sum(copies):
            b.alloc("copy head", s.forward_copies - sum(copies))
        head_saved = s.saved_after_forward - layers * s.kept_per_layer - s.ckpt_first
        b.alloc("head saved", head_saved)
        logits = _logit_tensors(s.logits_forward, logit_unit)
        b.allocs("logits", logits)
        b.alloc("early head grad", s.early_head_grad)
        b.swap("gathered", s.gathered.forward, unshard)
        if s.dequant:
            b.alloc("dequant", s.dequant)
        at["forward"] = len(b.events) - 1
        b.free("dequant")
        # the loss's backward: the logits' gradients beside log_softmax's saved output (a
        # chunked or fused loss: its own tensors, one figure)
        b.frees("copy", layers)
        b.free("copy head")
        standard = len(logits) > 1 and logits[-1] == 4 * logit_unit <= s.loss_backward
        # the upcast goes before the 16-bit logits (the order a traced transformers 5 step
        # frees them: bench/results/trace-cpu.json); log_softmax's output stays for backward
        for index in reversed(range(len(logits) - 1 if standard else len(logits))):
            b.free(("logits", index))
        rest = s.loss_backward - (logits[-1] if standard else 0)
        b.allocs("loss grad", _logit_tensors(rest, logit_unit) if standard else [rest])
        b.alloc("loop output", s.kept_output)
        b.swap("gathered", s.gathered.loss_backward, unshard)
        at["loss backward"] = len(b.events) - 1
        # nll_loss's gradient and log_softmax's output go first; with 16-bit logits the
        # upcast's backward (aten _to_copy) casts log_softmax's input gradient down before
        # that goes, and the head's backward reads the 16-bit one
        b.free(("loss grad", 0))
        b.frees("logits", len(logits))
        if standard and logits[0] == 2 * logit_unit:
            b.alloc("logits grad", logits[0])
        b.frees("loss grad", 3)
        b.free("early head grad")  # a fused loss's head gradient: now the head's own
        b.alloc("grad head", s.grad_head)
        b.alloc("tail reduce", s.tail_reduce)  # accelerate's tail reduce-scatters it at once
        b.alloc("backward buckets", s.backward_buckets)  # the first gradient's hook makes them
        b.free("logits grad")
        b.free("head saved")
        # backward through the layers, last to first
        for j in reversed(range(layers)):
            last, first = j == layers - 1, j == 0
            if last and s.ckpt_last:
                b.alloc("last input", s.ckpt_last)
            b.allocs("recompute", recompute)
            b.allocs("transient", transient)
            for size in dequant[:-1]:
                b.alloc("dequant", size)
                b.free("dequant")
            if s.dequant:
                b.alloc("dequant", s.dequant)
            b.alloc("inflight", inflight)
            if first:
                b.alloc("reduce buffer", s.gathered.reduce_buffer)
            if last or first:
                g = s.gathered.backward_last if last else s.gathered.backward_first
                b.swap("gathered", g, unshard)
                at["backward (last layer)" if last else "backward (first layer)"] = (
                    len(b.events) - 1
                )
            b.free("dequant")
            b.frees("transient", len(transient))
            b.frees("recompute", len(recompute))
            b.frees(("kept", j), len(kept))
            b.free("last input")
            b.free("inflight")
            b.free("tail reduce")  # popped by the last layer's reduce-scatter
            b.allocs(("grad", j), grad_layer, reduced)
            if s.cache and s.cache_is_saved:  # the cache holds the k/v the layer saved
                b.alloc(("loop cache", j), s.cache // layers)
        # the embedding's backward
        b.alloc("grad embed", s.grad_embed)
        held = sum(size for key, size in b.live.items() if _is_grad(key))
        target = (s.states.gradients if s.embedding_grads < 0 else s.embedding_grads) + s.buckets
        target += s.backward_buckets
        b.alloc("grad root", target - held)  # FSDP's whole root gradients before reduce
        b.alloc("first input grad", s.ckpt_first)
        b.swap("gathered", s.gathered.embedding, unshard)
        b.alloc("embed temp", s.tied_sum)  # beside the last unit's reduce-scatter input
        during = len(b.events) - 1
        b.free("embed temp")
        b.free("reduce buffer")  # freed before the root's own input is made
        computing = s.tied_sum + s.gathered.reduce_buffer
        if s.carved:  # the embedding unit reshards first, then reduces into a new shard
            b.swap("gathered", 0)
            b.alloc("root shard", s.root_shard, reduced)
            computing += s.gathered.embedding
        b.alloc("root reduce", s.root_reduce)
        reducing = s.root_reduce + s.root_shard > computing
        at["backward (embedding)"] = len(b.events) - 1 if reducing else during
        b.free("root reduce")
        b.free("root shard")  # counted with the step's gradients from here
        b.free("first input")  # the loss is freed after backward, and the graph with it
        b.free("first input grad")
        b.free("backward buckets")  # ZeRO's backward epilogue releases them
        # optimizer step: FSDP's root gradients reduce-scattered to their shard
        if s.embedding_grads >= 0:
            b.free("grad head")
            b.free("grad embed")
            held = sum(size for key, size in b.live.items() if _is_grad(key) and key != "grad root")
            b.swap("grad root", s.states.gradients + s.buckets - held, reduced)
        b.swap("gathered", s.gathered.step, unshard)
        if number == 0:
            b.allocs("optimizer", optimizer)
        b.allocs("optimizer temp", temps)
        at["optimizer step"] = len(b.events) - 1
        b.frees("optimizer temp", len(temps))
        b.free("gathered")
        for key in [key for key in b.live if _is_grad(key) and key != "buckets"]:
            b.free(key)
        moments.append(at)
    return StepEvents(tuple(b.events), tuple(moments), loaded)


# the sequence's gradient tensors (the step's "gradients" component)
_GRADS = frozenset(
    (
        "grad",
        "grad head",
        "grad embed",
        "grad root",
        "early head grad",
        "buckets",
        "backward buckets",
    )
)


def _is_grad(key: Hashable) -> bool:
    name = key[0] if isinstance(key, tuple) else key
    if isinstance(name, tuple):  # ((name, layer), index)
        name = name[0]
    return name in _GRADS


def _logit_tensors(total: int, unit: int) -> list[int]:
    """The loss's tensors over the logits (``unit``: batch x seq x vocab elements): 16-bit
    logits (2 bytes an element) first when the total is not a multiple of 4, then fp32 ones."""
    if total <= 0:
        return []
    if unit <= 0 or total % unit:
        return [total]
    per = total // unit
    sizes = [2 * unit] if per % 4 else []
    sizes += [4 * unit] * ((per - (2 if per % 4 else 0)) // 4)
    return sizes if sum(sizes) == total else [total]
