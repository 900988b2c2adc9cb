"""One training step's memory, component by component, and its two peaks.

The step is modelled as a timeline (after a warm-up step, so optimizer state exists):
forward and loss, loss backward, backward through the layers (last to first), optimizer step.
``allocated`` is the largest sum of live tensors over those moments, as
``torch.cuda.max_memory_allocated`` would report it; ``device`` adds what the runtime holds.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmem.core.activations import (
    Kernels,
    autocast_copy_bytes,
    head_activations,
    layer_activations,
)
from trainmem.core.architecture import ModelSpec
from trainmem.core.plan import Plan
from trainmem.core.precision import dtypes
from trainmem.core.rule_of_thumb import rule_of_thumb_bytes
from trainmem.core.runtime import ALLOCATOR_RESERVE_FRACTION, CALIBRATED, CUDA_CONTEXT_BYTES
from trainmem.core.states import model_states

COMPONENTS = (
    "weights",
    "master copy",
    "adapter",
    "gradients",
    "optimizer state",
    "activations",
    "logits",
    "temporaries",
    "CUDA context",
    "allocator reserve",
)
RUNTIME = {"CUDA context", "allocator reserve"}


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
    device_bytes: int
    peak_phase: str
    phases: dict[str, int]  # allocated total at each moment of the step
    breakdown: dict[str, dict[str, int]]  # tensor components at each moment
    rule_of_thumb_bytes: int
    trainable_params: int
    saved_activation_bytes: int  # what autograd holds once forward ends
    notes: tuple[str, ...] = field(default=())

    def component(self, name: str) -> int:
        return next((c.bytes for c in self.components if c.name == name), 0)

    @property
    def judged_bytes(self) -> int:
        """The figure the fit is judged on: the device peak, or the guide's rule."""
        return self.rule_of_thumb_bytes if self.plan.rule_of_thumb else self.device_bytes


def estimate(plan: Plan, spec: ModelSpec, kernels: Kernels = "cuda") -> Estimate:
    """Estimate one training step. ``kernels="cpu"`` models CPU kernels where they keep
    different tensors (dropout), for comparison with measurements taken on a CPU."""
    if kernels not in ("cuda", "cpu"):
        raise ValueError(f"kernels must be 'cuda' or 'cpu', not {kernels!r}")
    plan = plan.validated()
    dt = dtypes(plan)
    st = model_states(spec, plan, dt)
    la = layer_activations(spec, plan, dt, kernels)
    ha = head_activations(spec, plan, dt)
    tokens = plan.batch * plan.seq_len
    layers = spec.layers
    full = plan.method == "full"

    layer_saved = tokens * la.saved + tokens * plan.seq_len * la.attention_scores + la.saved_fixed
    # autocast copies fp32 weights only; a 16-bit base is used as it is
    fp32_autocast = dt.autocast and dt.weight == 4
    copy_layer, copy_head = autocast_copy_bytes(spec) if fp32_autocast else (0, 0)
    if plan.method == "qlora":
        copy_layer = copy_head = 0  # 4-bit weights are dequantized per op, not cached
    head_saved = tokens * ha.saved
    transient = tokens * la.backward_transient + la.transient_fixed

    # Gradients arrive in backward order: lm_head (or the tied embedding), layers, embedding.
    tb = dt.trainable
    grad_head = spec.vocab * spec.hidden * tb if full else 0
    grad_embed = grad_head if full and not spec.tied_embeddings else 0
    if plan.zero >= 2:
        grad_head, grad_embed = grad_head // plan.gpus, grad_embed // plan.gpus
    grad_layer = max(0, st.gradients - grad_head - grad_embed) // layers
    # Dequantized 16-bit weight of the largest linear, alive while a 4-bit layer computes.
    dequant = (
        2 * max(lin.in_features * lin.out_features for lin in spec.linears())
        if plan.method == "qlora"
        else 0
    )

    static = {
        "weights": st.weights,
        "master copy": st.master,
        "adapter": st.adapter,
        "optimizer state": st.optimizer,
    }
    if plan.grad_ckpt:
        kept_per_layer = tokens * la.checkpoint
        recompute = layer_saved + copy_layer
        forward_copies = layers * copy_layer + copy_head  # cached until autocast exits
        saved_after_forward = layers * kept_per_layer + head_saved
    else:
        kept_per_layer = layer_saved + copy_layer
        recompute = 0
        forward_copies = 0
        saved_after_forward = layers * kept_per_layer + head_saved + copy_head

    def moment(activations: int, logits: int, grads: int, temps: int) -> dict[str, int]:
        return {
            **static,
            "gradients": grads,
            "activations": activations,
            "logits": logits,
            "temporaries": temps,
        }

    phases = {
        "forward": moment(
            saved_after_forward, tokens * ha.logits_forward, 0, forward_copies + dequant
        ),
        "loss backward": moment(saved_after_forward, tokens * ha.loss_backward, 0, 0),
        # Backward through the last layer: its saved tensors (recomputed under checkpointing)
        # and those of every layer below are alive; the head's gradients exist.
        "backward (last layer)": moment(
            layers * kept_per_layer + recompute,
            0,
            grad_head + grad_layer,
            transient + dequant,
        ),
        # Backward through the first layer: all layer gradients exist, one layer's activations.
        "backward (first layer)": moment(
            kept_per_layer + recompute,
            0,
            grad_head + layers * grad_layer,
            transient + dequant,
        ),
        # Embedding backward. A tied weight's two gradients (lm_head's, held in autograd's
        # input buffer since the start of backward, and the embedding's) are summed out of
        # place before AccumulateGrad: old, new and sum are alive together.
        "backward (embedding)": moment(
            0, 0, st.gradients, 2 * grad_head if full and spec.tied_embeddings else 0
        ),
        "optimizer step": moment(0, 0, st.gradients, st.optimizer_temp),
    }
    totals = {name: sum(parts.values()) for name, parts in phases.items()}
    peak_phase = max(totals, key=lambda name: totals[name])
    allocated = totals[peak_phase]
    runtime = {
        "CUDA context": CUDA_CONTEXT_BYTES,
        "allocator reserve": round(allocated * ALLOCATOR_RESERVE_FRACTION),
    }
    parts = {**phases[peak_phase], **runtime}
    components = tuple(
        Component(name, int(parts.get(name, 0)), "runtime" if name in RUNTIME else "tensor")
        for name in COMPONENTS
    )
    return Estimate(
        plan=plan,
        model=spec,
        components=components,
        allocated_bytes=allocated,
        device_bytes=allocated + sum(runtime.values()),
        peak_phase=peak_phase,
        phases=totals,
        breakdown=phases,
        rule_of_thumb_bytes=rule_of_thumb_bytes(spec.params, plan),
        trainable_params=st.trainable_params,
        saved_activation_bytes=saved_after_forward,
        notes=_notes(spec, plan),
    )


def _notes(spec: ModelSpec, plan: Plan) -> tuple[str, ...]:
    notes = list(spec.notes)
    if plan.attn == "eager":
        notes.append("eager attention keeps batch x heads x seq^2 scores per layer; sdpa does not")
    if spec.final_logit_softcap and plan.attn == "sdpa":
        notes.append("Gemma 2 soft-caps attention logits, which only eager attention applies")
    if spec.is_moe and plan.method == "qlora":
        notes.append(
            "QLoRA on fused MoE experts is not measured yet: experts are assumed to be "
            "quantized to NF4 like linear layers"
        )
    if not CALIBRATED:
        notes.append(
            "runtime overhead (CUDA context, allocator reserve) uses typical figures, "
            "not yet calibrated on a GPU"
        )
    return tuple(notes)
