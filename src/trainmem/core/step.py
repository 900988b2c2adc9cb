"""The sizes one training step is built from (trainmem.core.estimator.step_sizes), in bytes:
what the estimator's moments sum and the allocation sequence (trainmem.core.step_events)
orders."""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.core.sharding import NONE as NO_GATHER
from trainmem.core.sharding import Gathered
from trainmem.core.states import States


@dataclass(frozen=True)
class Step:
    """The sizes every moment of the step is built from, in bytes."""

    states: States
    layers: int
    kept_per_layer: int  # what each layer holds for backward once forward is past it
    recompute: int  # one layer's saves rebuilt in backward under checkpointing (else 0)
    saved_after_forward: int  # everything autograd holds when forward ends
    forward_copies: int  # autocast's 16-bit weight copies cached through forward
    logits_forward: int  # logits and the loss's upcast while the loss runs
    loss_backward: int  # log_softmax backward's three fp32 tensors
    layer_transient: int  # gradients in flight while one layer runs backward
    dequant: int  # QLoRA: the dequantized weight of the largest linear
    grad_head: int  # lm_head's (or the tied embedding's) gradient
    grad_embed: int  # the untied embedding's gradient
    grad_layer: int  # one decoder layer's gradients
    tied_sum: int  # tied embedding: its two gradients summed out of place
    # A hand-written loop (stack "loop") keeps ``out`` alive through backward and the step:
    kept_output: int = 0  # out.logits
    cache: int = 0  # out.past_key_values: the KV cache built when checkpointing is off
    cache_is_saved: bool = True  # the cache tensors are the k/v attention saves (sdpa, MHA)
    early_head_grad: int = 0  # a fused loss's lm_head gradient, held from forward on
    # Sharded runs (trainmem.core.sharding); all 0 on one GPU:
    gathered: Gathered = NO_GATHER  # weights all-gathered beyond the shard, per moment
    buckets: int = 0  # ZeRO-3 / DDP gradient buckets, alive from the first backward on
    # ZeRO 1-2's reduce buckets: made by the first gradient's hook, dropped as backward ends
    backward_buckets: int = 0
    grad_inflight: int = -1  # one layer's unsharded gradient in backward (-1: grad_layer)
    embedding_grads: int = -1  # gradients alive at the embedding's backward (-1: all)
    # at the embedding's backward: FSDP's root reduce-scatter input (in the reduce dtype);
    # ZeRO 1-2 offload's clone of the largest gradient and its fp64 norm (sharding.py)
    root_reduce: int = 0
    # accelerate's carved FSDP2 units (trainmem.core.sharding.accelerate_carves): lm_head's
    # reduce-scatter input, held through the last layer's backward; the embedding's new
    # gradient shard, made once the embedding unit is resharded (its gathered weights gone)
    tail_reduce: int = 0
    root_shard: int = 0
    carved: bool = False
    # Checkpoint offload (trainmem.core.offload): Unsloth's GPU reload buffer, alive at every
    # moment, and its last layer's input, kept until that layer's backward; under any offload
    # a frozen embedding's output, kept until the loss is freed (its gradient beside it at the
    # embedding).
    ckpt_buffer: int = 0
    ckpt_last: int = 0
    ckpt_first: int = 0  # the embedding's output: a leaf the autograd graph holds

    def alive(
        self, activations: int, logits: int, grads: int, temps: int, gathered: int = 0
    ) -> dict[str, int]:
        s = self.states
        return {
            "weights": s.weights + gathered,
            "master copy": s.master,
            "adapter": s.adapter,
            "optimizer state": s.optimizer,
            "gradients": grads,
            "activations": activations + self.ckpt_buffer,
            "logits": logits,
            "temporaries": temps,
        }
