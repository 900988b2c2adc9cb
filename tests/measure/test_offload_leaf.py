"""Why Unsloth's checkpoint offload keeps the first layer's input on the GPU
(trainmem.core.offload): a frozen embedding's output made to require grad is a leaf, and an
autograd node taking it as input (Unsloth's checkpoint function, which offloads the tensor
and saves only the host copy) keeps it alive through its AccumulateGrad edge until the loss
is freed. Shown here on torch itself, with the same shape of code."""

from __future__ import annotations

import gc
import weakref

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


class _Offloaded(torch.autograd.Function):
    """A checkpoint that keeps only a host copy of its input, as UnslothCheckpointFunction."""

    @staticmethod
    def forward(ctx, x):  # type: ignore[no-untyped-def]
        ctx.host = x.to("cpu", copy=True)
        return x * 2

    @staticmethod
    def backward(ctx, grad):  # type: ignore[no-untyped-def]
        return grad * 2


def test_an_offloaded_leaf_lives_until_the_loss_is_freed() -> None:
    embedding = torch.nn.Embedding(16, 8).requires_grad_(False)
    hidden = embedding(torch.arange(4))
    hidden.requires_grad_(True)  # enable_input_require_grads' forward hook
    assert hidden.is_leaf
    alive = weakref.ref(hidden.untyped_storage())
    out = _Offloaded.apply(hidden)
    grad_of_leaf = weakref.ref(hidden)
    del hidden
    gc.collect()
    assert alive() is not None  # offloaded, yet held by the graph
    loss = out.square().sum()
    del out
    loss.backward()
    gc.collect()
    leaf = grad_of_leaf()
    assert alive() is not None and leaf is not None and leaf.grad is not None  # and its grad
    del leaf, loss
    gc.collect()
    assert alive() is None  # gone with the graph


def test_a_trained_embeddings_output_is_freed_once_offloaded() -> None:
    embedding = torch.nn.Embedding(16, 8)  # trained: its output has a grad_fn, not a leaf
    hidden = embedding(torch.arange(4))
    alive = weakref.ref(hidden.untyped_storage())
    out = _Offloaded.apply(hidden)
    del hidden
    gc.collect()
    assert alive() is None
    out.sum().backward()


@pytest.mark.parametrize("reentrant", [False, True])
def test_peft_makes_the_embeddings_output_a_leaf_kept_under_save_on_cpu(reentrant: bool) -> None:
    """The real stack: a PEFT LoRA model checkpointed as the Trainer does, its step under
    torch.autograd.graph.save_on_cpu (the torch offload kind): the embedding's output is a
    leaf that requires grad and lives until the loss is freed."""
    transformers = pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    config = transformers.LlamaConfig(
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=256,
    )
    base = transformers.AutoModelForCausalLM.from_config(config)
    lora = peft.LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM")
    model = peft.get_peft_model(base, lora)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    model.train()
    seen = []
    model.get_input_embeddings().register_forward_hook(
        lambda _m, _i, out: seen.append((weakref.ref(out.untyped_storage()), out.is_leaf))
    )
    ids = torch.randint(0, 256, (1, 16))
    with torch.autograd.graph.save_on_cpu():
        out = model(input_ids=ids, labels=ids)
    loss = out.loss
    del out
    gc.collect()
    alive, leaf = seen[-1]
    assert leaf and alive() is not None
    loss.backward()
    gc.collect()
    assert alive() is not None
    del loss
    gc.collect()
    assert alive() is None
