"""The loss head: the final norm, the lm_head projection and the cross-entropy, one function
per loss kind (``plan.loss_kind``). Sizes are bytes for the whole micro-batch.

- ``standard``: transformers' ForCausalLMLoss on the full logits (trainmem.core.activations
  head_activations, per token).
- ``chunked``: TRL 1.16's chunked head (trl/kernels/chunked_logprob.py
  ChunkedLogProbFunction, called from trl/trainer/utils.py _fused_forward): the logits exist
  one [4096 tokens x 32768 vocab] tile at a time and are recomputed in backward.
- ``fused``: Liger-Kernel 0.8.2's fused linear cross-entropy
  (src/liger_kernel/ops/fused_linear_cross_entropy.py): the gradient is computed chunk by
  chunk in the forward and kept for backward. Cut Cross-Entropy keeps less (no logits at
  all); Liger's figure is the one used, so the estimate does not undercount it. On the unsloth
  stack ``fused`` is Unsloth's own (``unsloth_fused_head``).
Derived from the sources above (docs/research/training-stacks.md sections 1b and 7); the
chunked head's torch path is measured on CPU, the Triton and Liger kernels need a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.core.activations import Kernels, final_norm_saves, head_activations
from trainmem.core.architecture import ModelSpec
from trainmem.core.plan import Plan
from trainmem.core.precision import Dtypes

# trl/kernels/chunked_logprob.py TOKEN_CHUNK_SIZE and trl/trainer/utils.py
# _CHUNKED_LOGPROB_CHUNK_SIZE (trl 1.16.0): the tile is [4096 tokens, 32768 vocabulary].
TRL_TOKEN_TILE = 4096
TRL_VOCAB_TILE = 32768
# Fp32 tensors of one tile alive at once in the torch fold of a tile (devices without Triton,
# chunked_logprob.py _forward_tile / _backward_tile), bytes per tile element: forward z,
# the top-1 mask, z - max and its exp; backward y, z, log_p, p, grad, the target mask,
# (is_target - p) and its product with the incoming gradient.
TRL_TORCH_FORWARD = 4 + 1 + 4 + 4
TRL_TORCH_BACKWARD = 5 * 4 + 1 + 4 + 4


@dataclass(frozen=True)
class Head:
    saved: int  # held for backward from the loss's forward until the loss backward
    forward: int  # alive only while the loss runs in forward
    backward: int  # alive while the loss runs backward
    output: int = 0  # the logits the model returns (``out.logits``), if it returns them
    # A gradient of a trainable lm_head computed in forward (Liger) and held until backward.
    early_head_grad: int = 0


def lm_head_bytes(plan: Plan, dt: Dtypes) -> int:
    """Bytes per element of the lm_head weight the loss multiplies by."""
    return dt.resid if plan.training.quantized_base else dt.weight


def loss_head(spec: ModelSpec, plan: Plan, dt: Dtypes, kernels: Kernels = "cuda") -> Head:
    kind = plan.loss_kind
    if kind == "chunked":
        return trl_chunked_head(spec, plan, dt, kernels)
    if kind == "fused":
        if plan.tooling.fused_loss == "unsloth":
            return unsloth_fused_head(spec, plan, dt)
        return liger_fused_head(spec, plan, dt)
    tokens = plan.batch * plan.seq_len
    head = head_activations(spec, plan, dt)
    return Head(
        saved=tokens * head.saved,
        forward=tokens * head.logits_forward,
        backward=tokens * head.loss_backward,
        output=tokens * head.output,
    )


def trl_chunked_head(spec: ModelSpec, plan: Plan, dt: Dtypes, kernels: Kernels) -> Head:
    """TRL's chunked head. It scores the B x (S - 1) shifted positions (every label is
    counted; completion-only loss scores fewer on GPUs) and saves its input, a copy of the
    final hidden states (the [:, :-1] slice is not contiguous: ``hidden_states[mask]`` on
    Triton devices, ``reshape`` elsewhere, both copies), plus fp32 log-z and entropy."""
    h, v = spec.hidden, spec.vocab
    n = plan.batch * max(1, plan.seq_len - 1)
    e_h = dt.resid  # the final norm's output dtype
    e_c = 2 if dt.autocast else dt.act  # autocast dtype, else the hidden states' dtype
    e_w = lm_head_bytes(plan, dt)
    tile = min(n, TRL_TOKEN_TILE) * min(v, TRL_VOCAB_TILE)
    hidden_cast = min(n, TRL_TOKEN_TILE) * h * e_c if e_h != e_c else 0
    weight_cast = min(v, TRL_VOCAB_TILE) * h * e_c if e_w != e_c else 0
    fold_f, fold_b = (0, 0) if kernels == "cuda" else (TRL_TORCH_FORWARD, TRL_TORCH_BACKWARD)
    saved = plan.batch * plan.seq_len * final_norm_saves(spec, plan, dt) + n * (e_h * h + 8 + 8)
    stats = 7 * 4 * n + 9 * n  # running fp32 statistics, then log-probs, entropy, top-1
    forward = tile * (e_c + fold_f) + hidden_cast + weight_cast + stats
    # Backward: the recomputed tile, an fp32 grad_hidden (cast back to the hidden dtype at
    # the end) and, when lm_head trains, an fp32 grad_weight and its cast to the weight dtype.
    grad_hidden = 4 * n * h + (n * h * e_h if e_h != 4 else 0)
    grad_weight = 4 * v * h + (v * h * e_w if e_w != 4 else 0) if plan.trains_lm_head else 0
    backward = tile * (e_c + fold_b) + hidden_cast + weight_cast + grad_hidden + grad_weight
    return Head(saved=saved, forward=forward, backward=backward)


def _next_pow2(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def liger_fused_head(spec: ModelSpec, plan: Plan, dt: Dtypes) -> Head:
    """Liger's fused linear cross-entropy (fused_linear_cross_entropy.py
    fused_linear_cross_entropy_forward): chunks of next_pow2(T / ceil(V / H)) tokens, so a
    chunk's logits are about T x H elements; grad_input (T x H) and, when lm_head trains,
    grad_weight (V x H) are allocated in forward and saved for backward, which only scales
    them."""
    h, v = spec.hidden, spec.vocab
    tokens = plan.batch * plan.seq_len
    e_h = dt.resid
    e_c = 2 if dt.autocast else dt.act
    e_w = lm_head_bytes(plan, dt)
    chunk = min(tokens, _next_pow2(-(-tokens // max(1, -(-v // h)))))
    saved = tokens * (final_norm_saves(spec, plan, dt) + e_h * h + 4)  # + grad_input, loss_1d
    trains = plan.trains_lm_head
    grad_weight = v * h * e_w if trains else 0
    # Per chunk: its logits (then their gradient, in place) and grad_logits @ weight; the
    # weight gradient accumulates through an mm and its fp32 copy for a 16-bit weight.
    accumulate = v * h * (e_w + 4) if trains and e_w != 4 else 0
    forward = chunk * v * e_c + chunk * h * e_h + accumulate
    return Head(
        saved=saved, forward=forward, backward=tokens * h * e_h, early_head_grad=grad_weight
    )


# unsloth_zoo ce232d6, unsloth_zoo/fused_losses/cross_entropy_loss.py _get_chunk_multiplier:
# each chunk's fp32 logits are kept under min(half the free memory, 4 GiB).
UNSLOTH_CE_TARGET_BYTES = 4 * 2**30


def unsloth_ce_chunks(tokens: int, vocab: int) -> int:
    """Chunks Unsloth's fused loss splits the tokens into (get_chunk_size): one if the fp32
    logits fit the target, else that ratio rounded up to a multiple of 4. The target is
    taken at its 4 GiB cap, what a GPU with 8 GiB or more free at the first loss gets."""
    fp32 = tokens * vocab * 4
    if fp32 <= UNSLOTH_CE_TARGET_BYTES:
        return 1
    return -(-fp32 // (4 * UNSLOTH_CE_TARGET_BYTES)) * 4


def unsloth_fused_head(spec: ModelSpec, plan: Plan, dt: Dtypes) -> Head:
    """Unsloth's fused cross-entropy (unsloth_zoo fused_losses/cross_entropy_loss.py
    UnslothFusedLoss, called by unsloth/models/llama.py CausalLM_fast_forward; the logits
    returned are EMPTY_LOGITS). Forward makes grad_inputs (like the hidden states) and, when
    lm_head trains, a zeroed grad_lm_head, runs torch.func.grad_and_value over each chunk of
    tokens (torch.compile'd: the chunk's logits in lm_head's dtype and their gradient in the
    same dtype; the eager fallback also upcasts them to fp32) and saves only those gradients.
    Backward scales them out of place. No full logits ever exist."""
    h, v = spec.hidden, spec.vocab
    tokens = plan.batch * plan.seq_len
    e_h = dt.resid
    e_w = lm_head_bytes(plan, dt)  # the hidden states are cast to lm_head's dtype
    chunk = -(-tokens // unsloth_ce_chunks(tokens, v))
    trains = plan.trains_lm_head
    saved = tokens * (final_norm_saves(spec, plan, dt) + e_h * h)  # + grad_inputs
    labels = 8 * tokens  # the shifted int64 labels
    forward = chunk * v * 2 * e_w + chunk * h * e_h + labels + (v * h * e_w if trains else 0)
    backward = tokens * h * e_h + (v * h * e_w if trains else 0)
    return Head(
        saved=saved,
        forward=forward,
        backward=backward,
        early_head_grad=v * h * e_w if trains else 0,
    )
