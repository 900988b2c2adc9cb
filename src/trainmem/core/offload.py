"""Checkpoint offload: what stays on the GPU and what waits in host RAM, per stack
(``Stack.ckpt_offload_kind``). Sizes are bytes for the whole micro-batch.

- ``torch``: torch.autograd.graph.save_on_cpu keeps every checkpointed layer input in host RAM
  and brings one back for its layer's recompute in backward.
- ``unsloth``: use_gradient_checkpointing="unsloth" (unsloth_zoo ce232d6,
  unsloth_zoo/gradient_checkpointing.py UnslothCheckpointFunction.forward / backward and
  initialize_unsloth_gradient_checkpointing). Each layer's input is copied, on a side stream,
  into a pinned host buffer (CPU_BUFFERS: 200 of 128Ki elements made at start, each grown to
  the input's size, one more per layer past 200, none ever freed). The input of the last layer
  is not offloaded after the first step (LAST_GC_INDEX, after torchtune#1443): it stays on the
  GPU until its backward. Backward copies each input back into one persistent GPU buffer
  (GPU_BUFFERS, grown to the largest input in forward and kept). An input of at most
  MINIMUM_SIZE elements (2 MiB) is not offloaded at all, and below 512 tokens Unsloth does not
  patch checkpointing (unsloth 015bdef, unsloth/models/_utils.py
  apply_unsloth_gradient_checkpointing; ``max_seq_length`` there, the plan's length here).
  A second GPU buffer (double buffering) is made only when more than 512 MiB is free after the
  first step (DOUBLE_BUFFER_HEADROOM), and freed when it would not fit: never counted.
Either way the first layer's input stays on the GPU when the embedding is frozen (LoRA,
QLoRA): its output is made to require grad (``enable_input_require_grads()``: PEFT's, and
unsloth_zoo ce232d6 training_utils.py prepare_model_for_training's), which makes it a leaf, and
the first op on it holds a leaf through its AccumulateGrad edge until the loss is freed
(torch/csrc/autograd/functions/accumulate_grad.h keeps ``Variable variable``), so offloading
it frees nothing; at the embedding's backward its ``.grad`` joins it. tests/measure/
test_offload_leaf.py shows it on torch, and with transformers 5.24 + PEFT 0.21 under
save_on_cpu, reentrant checkpointing or not.
Unsloth's offload is derived from source, not measured: Unsloth needs a GPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.core.architecture import ModelSpec
from trainmem.core.plan import Plan

UNSLOTH_CPU_BUFFERS = 200  # INITIAL_CPU_BUFFER_COUNT
UNSLOTH_CPU_BUFFER_ELEMENTS = 128 * 1024  # INITIAL_CPU_BUFFER_SIZE
UNSLOTH_MIN_OFFLOAD_BYTES = 2 * 1024 * 1024  # MINIMUM_SIZE = 2 MiB // element size
UNSLOTH_MIN_SEQ = 512  # apply_unsloth_gradient_checkpointing: "unsloth" only from 512 tokens


@dataclass(frozen=True)
class Offload:
    """Checkpoint offload of one plan: ``active`` when inputs really leave the GPU."""

    active: bool
    gpu_buffer: int = 0  # a persistent GPU buffer the inputs come back into
    last_input: int = 0  # the last layer's input, kept on the GPU until its backward
    first_input: int = 0  # the embedding's output, a leaf alive until the loss is freed
    host: int = 0  # host RAM the offloaded inputs take


def checkpoint_offload(plan: Plan, spec: ModelSpec, element_bytes: int) -> Offload:
    """What checkpoint offload keeps where, for layer inputs of ``element_bytes`` each."""
    if not (plan.grad_ckpt and plan.ckpt_offload):
        return Offload(False)
    elements = plan.batch * plan.seq_len * spec.hidden
    one = elements * element_bytes
    frozen_embedding = not plan.training.trains_base and "embed_tokens" not in plan.saved_modules
    first = one if frozen_embedding else 0  # the embedding's output: a leaf kept on the GPU
    if plan.tooling.ckpt_offload_kind != "unsloth":
        return Offload(True, first_input=first, host=spec.layers * one)
    if plan.seq_len < UNSLOTH_MIN_SEQ or one <= UNSLOTH_MIN_OFFLOAD_BYTES:
        return Offload(False)
    per_buffer = max(elements, UNSLOTH_CPU_BUFFER_ELEMENTS) * element_bytes
    spare = max(0, UNSLOTH_CPU_BUFFERS - spec.layers) * UNSLOTH_CPU_BUFFER_ELEMENTS
    # the first step offloads every layer, so every layer has its pinned buffer from then on
    host = spec.layers * per_buffer + spare * element_bytes
    return Offload(True, gpu_buffer=one, last_input=one, first_input=first, host=host)
