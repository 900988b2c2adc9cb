"""One mlx-lm training step's memory: the ``mlx`` stack (issue 23).

mlx-lm 0.32.2 (ml-explore/mlx-lm) on MLX 0.32, read from source; each part cites its file.
What differs from the PyTorch stacks:

- What trains (mlx_lm/lora.py train_model): ``model.freeze()``, then LoRA / DoRA layers on the
  last ``num_layers`` decoder layers (mlx_lm/tuner/utils.py linear_to_lora_layers: every
  Linear of ``model.layers`` by default, ``model.layers[-max(num_layers, 0):]``, so -1 and 0
  mean all), or, for a full fine-tune, ``unfreeze()`` of those layers only: the embedding,
  the final norm and lm_head never train. Frozen layers below the first trained one are
  differentiated by nothing, so they keep no activation for backward.
- LoRA weights are fp32 whatever the model's dtype (mlx_lm/tuner/lora.py LoRALinear:
  ``mx.random.uniform`` and ``mx.zeros`` default to float32), so a 16-bit model's adapted
  inputs are promoted: ``x @ lora_a`` keeps an fp32 copy of each adapted input for the
  gradient of ``lora_a``. DoRA (mlx_lm/tuner/dora.py DoRALinear) adds ``m`` (fp32, one per
  output row), keeps each adapted layer's output before the magnitude scaling, and, on a
  quantized base, the dequantized weight (``_dequantized_weight`` feeds ``x @ w.T``, whose
  gradient with respect to ``x`` needs ``w``).
- Quantization is MLX's own affine format (mlx/nn/layers/quantized.py, mlx_lm/utils.py
  quantize_model): every Linear and Embedding whose input width is a multiple of the group
  size, embedding and lm_head included, stores ``bits`` per weight packed in uint32 plus a
  scale and a bias per group in the model's dtype. QuantizedLinear's gradient with respect to
  its input is another quantized_matmul: nothing is dequantized (LoRA).
- The step (mlx_lm/tuner/trainer.py train): ``nn.value_and_grad`` of ``default_loss`` and
  ``optimizer.update`` inside one ``mx.compile``d function, evaluated lazily by
  ``mx.eval(state, ...)``. A buffer lives until the last array that reads it is evaluated
  (and elementwise ops donate their inputs' buffers), so the peak is the loss's backward:
  the trained layers' saves (under ``grad_checkpoint``, mx.checkpoint around every layer's
  __call__, each layer's input plus the last layer's recomputation), the loss's
  logits-sized buffers, and the last layer's backward working set, about one more layer's
  saves (LoRA's, without DoRA's outputs; on a 16-bit model plus the fp32 gradient of each
  adapted output, LoRA's branch being fp32), which the evaluation order starts while the
  loss's buffers are still alive (not with DoRA under checkpointing, measured). The last
  two are measured, not read: the real step with one size varied at a time
  (bench/measure/mlx_peak_terms.py, its output in bench/results/mlx_peak_terms.txt). The
  update itself runs in place.
- Optimizers (mlx/optimizers/optimizers.py): Adam and AdamW keep m and v in the parameter's
  dtype; SGD always creates v (init_single), used or not; Adafactor keeps a row and a column
  factor per matrix (no first moment by default).
- The loss (trainer.py default_loss: ``nn.losses.cross_entropy`` on the full logits, in the
  model's dtype). Off the GPU it is built from ops (mlx/nn/losses.py: the shifted logits,
  logsumexp and take_along_axis; their vjps an exp and a scatter, each logits-sized); in the
  whole compiled step on MLX's CPU build its peak holds 4 logits-sized buffers in fp32 and
  in 16-bit alike (the vocabulary doubled, mlx_peak_terms.py; a cross-entropy head compiled
  alone holds 5 and 7, bench/results/mlx_loss_head.txt at 84a9883: not what the step does).
  On a Mac's GPU it is ``mx.fast.cross_entropy``, one fused kernel; its source is not in
  the MLX tree read here (ml-explore/mlx 846d176, 0.32.2), so it is counted as the logits
  and their gradient, derived, not measured.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainmem.core.architecture import Linear, ModelSpec
from trainmem.core.errors import PlanError
from trainmem.core.plan import Plan

LORA_BYTES = 4  # mlx-lm's adapters are float32 (tuner/lora.py, tuner/dora.py)
# Logits-sized buffers alive at the step's peak: MLX 0.32.4's CPU build, measured in the whole
# compiled step (bench/measure/mlx_peak_terms.py), in units of one logits tensor of the
# model's dtype; and on the GPU's fused kernel (the logits and their gradient; derived).
CPU_LOSS_BUFFERS = 4
METAL_LOSS_BUFFERS = 2
OPTIMIZERS = ("adamw", "sgd", "adafactor")  # Adam / AdamW, SGD, Adafactor in mlx.optimizers


@dataclass(frozen=True)
class MlxStep:
    """The step's moments (tensor components alive at each), and what they are built from."""

    phases: dict[str, dict[str, int]]
    trainable_params: int
    trained_layers: int
    saved_after_forward: int
    notes: tuple[str, ...]


def trained_layers(plan: Plan, spec: ModelSpec) -> int:
    """The layers mlx-lm trains: ``model.layers[-max(num_layers, 0):]`` (mlx_lm/lora.py)."""
    n = plan.mlx_num_layers
    if n > spec.layers:  # train_model raises the same ValueError
        raise PlanError("mlx_num_layers", f"{n} layers asked for, but the model has {spec.layers}")
    return spec.layers if n <= 0 else n


def dtype_bytes(plan: Plan) -> int:
    if plan.precision.endswith("-mixed"):
        raise PlanError(
            "precision",
            "MLX has no autocast: the model trains in its own dtype (bf16, fp16 or fp32)",
        )
    return 4 if plan.precision == "fp32" else 2


def quantized_bytes(rows: int, cols: int, bits: int, group: int, dtype: int) -> int:
    """One matrix as MLX's affine quantization stores it (mlx/ops.cpp quantize, affine mode):
    ``rows x cols x bits / 8`` packed bytes, and a scale and a bias per ``group`` weights of a
    row in the weight's dtype. A matrix whose rows are not a multiple of the group stays
    unquantized (mlx_lm/utils.py quantize_model: ``weight.shape[-1] % group_size``)."""
    if cols % group:
        return rows * cols * dtype
    return rows * cols * bits // 8 + 2 * rows * (cols // group) * dtype


def weight_bytes(plan: Plan, spec: ModelSpec) -> int:
    """The model's weights as stored: in its dtype, or MLX-quantized (QLoRA)."""
    d = dtype_bytes(plan)
    if not plan.training.quantized_base:
        return spec.architecture_params * d
    bits, group = plan.mlx_bits, plan.mlx_group_size

    def linear(lin: Linear) -> int:
        one = quantized_bytes(lin.out_features, lin.in_features, bits, group, d)
        return lin.count * (one + lin.bias * lin.out_features * d)

    layer = sum(linear(lin) for lin in spec.linears()) + spec.layer_norm_params() * d
    embed = quantized_bytes(spec.vocab, spec.hidden, bits, group, d)
    head = 0 if spec.tied_embeddings else embed
    return spec.layers * layer + embed + head + spec.hidden * d


def _adapted(plan: Plan, spec: ModelSpec) -> tuple[Linear, ...]:
    """The linears mlx-lm adapts in each trained layer (its ``keys``: every Linear by
    default, tuner/utils.py get_keys_for_lora)."""
    targets = set(plan.target_modules)
    return tuple(lin for lin in spec.linears() if set(lin.parts) & targets)


def trainable_matrices(plan: Plan, spec: ModelSpec) -> list[tuple[int, int, int]]:
    """(rows, cols, count) of every trainable array (cols 1: a vector), over trained layers."""
    n = trained_layers(plan, spec)
    if plan.training.trains_base:  # unfreeze() of whole layers: linears, biases and norms
        out = [(lin.out_features, lin.in_features, n * lin.count) for lin in spec.linears()]
        out += [(lin.out_features, 1, n * lin.count) for lin in spec.linears() if lin.bias]
        return [*out, (spec.layer_norm_params(), 1, n)]
    r = plan.lora_rank
    out = []
    for lin in _adapted(plan, spec):
        out += [(lin.in_features, r, n * lin.count), (r, lin.out_features, n * lin.count)]
        if plan.dora:
            out.append((lin.out_features, 1, n * lin.count))
    return out


def _state_elements(rows: int, cols: int, optimizer: str) -> int:
    """Optimizer state elements of one array (mlx/optimizers/optimizers.py init_single)."""
    if optimizer == "adafactor":
        return rows + cols if cols > 1 else rows
    return (2 if optimizer == "adamw" else 1) * rows * cols


def _per_token_saves(plan: Plan, spec: ModelSpec, d: int) -> int:
    """Bytes one trained layer keeps per token for backward (mlx_lm/models/llama.py and
    qwen2.py TransformerBlock; the vjp of each op, mlx/primitives.cpp):
    the layer input and the residual after attention (RMSNorm's vjp reads its input), the
    queries and keys after RoPE and the values (attention's matmuls; off the GPU
    mx.fast.scaled_dot_product_attention falls back to ops, queries pre-scaled), gate and up
    and silu's sigmoid and product (swiglu = silu(gate) * up), and each trained linear's input
    (for its weight's or lora_a's gradient; fp32 copies for LoRA on a 16-bit model), plus
    ``x @ lora_a`` (r values) per adapted linear and, for DoRA, each adapted output."""
    h, i = spec.hidden, spec.intermediate
    attention = spec.q_dim + 2 * spec.kv_dim
    mlp = 4 * i
    saved = (2 * h + attention + mlp) * d
    trained = spec.linears() if plan.training.trains_base else _adapted(plan, spec)
    # the distinct inputs: the attention norm's output (q, k, v), the attention output (o),
    # the MLP norm's output (gate, up), swiglu's output (down)
    widths = {lin.name: lin.in_features for lin in trained}
    distinct = {
        "attn_in": h if {"q", "k", "v", "qkv"} & set(widths) else 0,
        "o": spec.q_dim if "o" in widths else 0,
        "mlp_in": h if {"gate", "up", "gate_up"} & set(widths) else 0,
        "down": i if "down" in widths else 0,
    }
    copy = d if plan.training.trains_base else LORA_BYTES
    saved += sum(distinct.values()) * copy
    if plan.trains_adapter:
        adapted = _adapted(plan, spec)
        saved += sum(lin.count for lin in adapted) * plan.lora_rank * LORA_BYTES
        if plan.dora:
            saved += sum(lin.count * lin.out_features for lin in adapted) * d
    return saved


def mlx_step(plan: Plan, spec: ModelSpec, gpu_loss: bool) -> MlxStep:
    """The step's moments for ``plan`` on ``spec``; ``gpu_loss``: the Metal fused
    cross-entropy (a Mac's GPU) rather than the CPU's ops."""
    if plan.optimizer not in OPTIMIZERS:
        raise PlanError(
            "optimizer",
            f"mlx-lm has no {plan.optimizer}: use adamw (Adam / AdamW), sgd or adafactor",
        )
    d = dtype_bytes(plan)
    n = trained_layers(plan, spec)
    tokens = plan.seq_len * plan.batch
    weights = weight_bytes(plan, spec)
    matrices = trainable_matrices(plan, spec)
    param_bytes = d if plan.training.trains_base else LORA_BYTES
    trainable_params = sum(r * c * k for r, c, k in matrices)
    trainable = trainable_params * param_bytes
    states = sum(_state_elements(r, c, plan.optimizer) * k for r, c, k in matrices) * param_bytes
    grads = trainable
    scores = plan.batch * spec.heads * plan.seq_len**2 * d  # the attention probabilities
    layer = tokens * _per_token_saves(plan, spec, d) + scores
    if plan.dora and plan.training.quantized_base:  # the dequantized weights, per layer
        layer += (
            sum(lin.count * lin.in_features * lin.out_features for lin in _adapted(plan, spec)) * d
        )
    if plan.grad_ckpt:  # mx.checkpoint keeps the layer's input; one layer recomputes
        kept, recompute = tokens * spec.hidden * d, layer
        if plan.dora and d < LORA_BYTES:
            # DoRA's ``w + (scale * lora_b.T) @ lora_a.T`` (tuner/dora.py) upcasts the frozen
            # 16-bit weight to fp32. That upcast reads only the weight mx.checkpoint captures,
            # none of its inputs, so it is kept, not recomputed: an fp32 copy of every adapted
            # weight per trained layer, from the forward to that layer's backward. Measured
            # (bf16, 2, 4 and 6 trained layers: about 2.9 MB more per layer of llama-tiny, its
            # adapted weights' fp32 bytes); the mechanism is read from the source, not traced.
            kept += (
                sum(lin.count * lin.in_features * lin.out_features for lin in _adapted(plan, spec))
                * LORA_BYTES
            )
    else:
        kept, recompute = layer, 0
    # the last layer's backward working set, alive with the loss's buffers (measured); on a
    # 16-bit model LoRA's branch is fp32 (tuner/lora.py: ``y + (scale * z).astype(x.dtype)``),
    # so astype's vjp hands each adapted output's gradient to ``z @ lora_b`` in fp32
    last_backward = tokens * _per_token_saves(replace(plan, dora=False), spec, d) + scores
    if plan.trains_adapter and d < LORA_BYTES:
        outputs = sum(lin.count * lin.out_features for lin in _adapted(plan, spec))
        last_backward += tokens * outputs * LORA_BYTES
    if plan.dora and plan.grad_ckpt:
        # Measured, not read: DoRA under checkpointing peaks at the saves, the recomputed
        # layer and the loss's buffers, with no backward working set on top (three steps,
        # two architectures, 128-512 tokens: what is left beyond the saves and the loss is
        # one layer's recomputation within 1 MB, bench/results/measure-cpu-mlx.json); MLX's
        # evaluation order there is not traced to its source.
        last_backward = 0
    final_norm = tokens * spec.hidden * d
    logits = tokens * spec.vocab * d
    loss = logits * (METAL_LOSS_BUFFERS if gpu_loss else CPU_LOSS_BUFFERS)
    saved = n * kept + final_norm

    adapter = 0 if plan.training.trains_base else trainable  # a full fine-tune's are weights

    def alive(activations: int, loss_part: int, grad: int) -> dict[str, int]:
        return {
            "weights": weights,
            "master copy": 0,
            "adapter": adapter,
            "gradients": grad,
            "optimizer state": states,
            "activations": activations,
            "logits": loss_part,
            "temporaries": 0,
        }

    phases = {
        "forward": alive(saved + recompute, logits, 0),
        "loss backward": alive(saved + recompute + last_backward, loss, 0),
        "backward (first layer)": alive(kept + recompute, 0, grads),
        "optimizer step": alive(0, 0, grads),
    }
    notes = [
        f"mlx: {n} of {spec.layers} layers trained (--num-layers {plan.mlx_num_layers}); "
        "the frozen layers below keep no activations",
        "loss: mlx-lm's default_loss, cross-entropy on the full logits "
        + ("(Metal's fused kernel: derived, not measured)" if gpu_loss else "(CPU ops)"),
    ]
    if spec.is_moe:
        notes.append(
            "MoE on the mlx stack: every expert's weights stored, activations counted as "
            "one dense MLP per token; not measured"
        )
    if plan.training.quantized_base:
        notes.append(
            f"MLX affine quantization: {plan.mlx_bits}-bit, groups of {plan.mlx_group_size} "
            "(a scale and a bias per group), embedding and lm_head included"
        )
    return MlxStep(phases, trainable_params, n, n * kept + final_norm, tuple(notes))


def mlx_runtime_note(runtime: str) -> str:
    """What the device peak of an MLX run holds beyond the allocated peak, by device."""
    if runtime == "unified":
        return (
            "MLX on Metal: the peak is mx.get_peak_memory(); Metal rounds buffers over 16 KiB "
            "to whole pages, and MLX's buffer cache keeps freed buffers on top of it, trimmed "
            "once active + cache pass 0.95 x the GPU's recommended working set (Metal's "
            "recommendedMaxWorkingSetSize, macOS's figure); its memory and cache limits are "
            "min(1.5 x that, 0.95 x RAM) (mlx/backend/metal/allocator.cpp:61-65, MLX 0.32). mlx-lm "
            "wires the recommended working set (mlx_lm/utils.py "
            "maybe_set_recommended_wired_limit); sudo sysctl iogpu.wired_limit_mb=N raises "
            "macOS's limit; cap the cache with mx.set_cache_limit or mlx_lm.lora "
            "--clear-cache-threshold; not measured on a Mac"
        )
    return (
        "MLX off a Mac's GPU: the peak is mx.get_peak_memory() (its CPU allocator counts "
        "exact bytes and caches at most 32 MB of freed buffers, mlx/backend/no_gpu/"
        "allocator.cpp); the Python process and libraries come on top"
    )
