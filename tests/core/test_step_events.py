"""The step as an allocation sequence (core/step_events.py) and the simulated device peak
(core/device_peak.py): the sequence holds exactly the estimator's bytes at each moment, and
the simulation keeps the allocator's invariants."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from trainmem.core.alloc_conf import K_LARGE_BUFFER, parse_alloc_conf
from trainmem.core.allocator import Alloc, Free, simulate
from trainmem.core.device_peak import (
    CUBLAS_WORKSPACE,
    CUBLAS_WORKSPACE_32MB,
    CUBLASLT_WORKSPACE,
    device_peak,
    workspace_bytes,
)
from trainmem.core.errors import PlanError
from trainmem.core.estimator import estimate, step_sizes
from trainmem.core.plan import Plan
from trainmem.core.step_events import REDUCE_STREAM, UNSHARD_STREAM, split, step_events
from trainmem.sources import catalog

QWEN = "Qwen/Qwen2.5-0.5B"
LLAMA = "meta-llama/Llama-3.1-8B"  # untied embeddings
BASE = Plan(model=QWEN, method="lora", seq_len=1024, batch=2)
CASES = {
    "lora": BASE,
    "lora, no checkpointing": replace(BASE, grad_ckpt=False),
    "full": replace(BASE, method="full"),
    "full bf16-mixed": replace(BASE, method="full", precision="bf16-mixed"),
    "qlora": replace(BASE, method="qlora"),
    "eager": replace(BASE, attn="eager", grad_ckpt=False),
    "fsdp": replace(BASE, method="full", gpus=4, strategy="fsdp"),
    # untied: accelerate's carved units (trainmem.core.sharding.accelerate_carves)
    "fsdp untied": replace(BASE, model=LLAMA, method="full", gpus=4, strategy="fsdp"),
    "fsdp untied shard-grad-op": replace(
        BASE, model=LLAMA, method="full", gpus=4, strategy="fsdp", fsdp="shard-grad-op"
    ),
    "fsdp untied lora": replace(BASE, model=LLAMA, gpus=4, strategy="fsdp"),
    "fsdp untied loop": replace(
        BASE, model=LLAMA, method="full", gpus=4, strategy="fsdp", stack="loop"
    ),
    "zero-3": replace(BASE, method="full", gpus=4, strategy="zero", zero=3),
    "ddp": replace(BASE, method="full", gpus=2),
    "loop": replace(BASE, stack="loop", grad_ckpt=False),
    "unsloth": replace(BASE, method="qlora", stack="unsloth", ckpt_offload=True),
    "fused loss": replace(BASE, loss="fused"),
}


def _spec(plan: Plan):
    entry = catalog.find(plan.model)
    assert entry is not None
    return entry.spec()


def _live(events, upto: int) -> int:
    live: dict[object, int] = {}
    for event in events[: upto + 1]:
        if isinstance(event, Alloc):
            live[event.id] = event.size
        elif isinstance(event, Free):
            del live[event.id]
    return sum(live.values())


@pytest.mark.parametrize("name", CASES)
def test_the_sequence_holds_the_estimators_bytes_at_every_moment(name: str):
    plan = CASES[name].validated()
    spec = _spec(plan)
    est = estimate(plan, spec)
    built = step_events(plan, spec, step_sizes(plan, spec))
    warm = built.moments[1]  # step 2: optimizer state exists, as the estimator assumes
    assert set(warm) == set(est.phases)
    assert {m: _live(built.events, i) for m, i in warm.items()} == est.phases
    # every allocation is freed at most once, and nothing is freed before it exists
    seen: set[object] = set()
    for event in built.events:
        if isinstance(event, Alloc):
            assert event.id not in seen and event.size > 0
            seen.add(event.id)
        elif isinstance(event, Free):
            assert event.id in seen
            seen.discard(event.id)


def test_step_one_has_no_optimizer_state_until_its_optimizer_step():
    plan = BASE.validated()
    spec = _spec(plan)
    est = estimate(plan, spec)
    built = step_events(plan, spec, step_sizes(plan, spec))
    optimizer = est.breakdown["forward"]["optimizer state"]
    assert optimizer > 0
    first = built.moments[0]
    assert _live(built.events, first["forward"]) == est.phases["forward"] - optimizer
    assert _live(built.events, first["optimizer step"]) == est.phases["optimizer step"]


def _streams_of(plan: Plan) -> dict[str, set[int]]:
    """The streams each kind of tensor of ``plan``'s sequence is allocated on."""
    plan = plan.validated()
    spec = _spec(plan)
    out: dict[str, set[int]] = {}
    for event in step_events(plan, spec, step_sizes(plan, spec)).events:
        if isinstance(event, Alloc):
            name = event.id[0] if isinstance(event.id, tuple) else event.id
            name = name[0] if isinstance(name, tuple) else name
            out.setdefault(str(name), set()).add(event.stream)
    return out


def test_fsdp_collectives_allocate_on_their_own_streams():
    """FSDP1 gathers on its unshard stream and reduce-scatters into sharded gradients on its
    post-backward stream; FSDP2 only the latter (its unsharded parameters are the default
    stream's); ZeRO-3 gathers on its allgather stream; everything else, and every other
    layout, on the default stream."""
    fsdp1 = _streams_of(replace(CASES["fsdp"], fsdp_version=1))
    assert fsdp1["gathered"] == {UNSHARD_STREAM} and fsdp1["grad"] == {REDUCE_STREAM}
    assert REDUCE_STREAM in fsdp1["grad root"]  # the root's reduced shard
    assert fsdp1["kept"] == fsdp1["inflight"] == fsdp1["optimizer"] == {0}
    fsdp2 = _streams_of(CASES["fsdp"])
    assert fsdp2["gathered"] == {0} and fsdp2["grad"] == {REDUCE_STREAM}
    zero3 = _streams_of(CASES["zero-3"])  # DeepSpeed's allgather stream
    assert zero3["gathered"] == {UNSHARD_STREAM}
    assert set().union(*(v for k, v in zero3.items() if k != "gathered")) == {0}
    for name in ("ddp", "lora"):
        assert set().union(*_streams_of(CASES[name]).values()) == {0}, name
    zero2 = _streams_of(replace(CASES["zero-3"], zero=2))
    assert set().union(*zero2.values()) == {0}
    no_shard = _streams_of(replace(CASES["fsdp"], fsdp="no-shard", fsdp_version=1))
    assert set().union(*no_shard.values()) == {0}


def test_per_stream_pools_reserve_more_than_one_shared_pool():
    """The same sequence on one stream lets activations reuse the gradients' and gathered
    weights' cached blocks, which PyTorch's per-stream pools do not."""
    plan = replace(CASES["fsdp"], fsdp_version=1).validated()
    spec = _spec(plan)
    events = step_events(plan, spec, step_sizes(plan, spec)).events
    one_stream = [Alloc(e.id, e.size) if isinstance(e, Alloc) else e for e in events]
    assert simulate(events).peak_reserved > simulate(one_stream).peak_reserved


def test_split_is_exact_and_proportional():
    assert split(10, [1, 1]) == [5, 5]
    assert split(10, [1, 2, 2]) == [2, 4, 4]
    assert sum(split(1001, [3, 7, 11])) == 1001
    assert split(0, [1, 2]) == [] and split(7, []) == [7]


def test_workspaces_follow_torch_defaults_by_family():
    # CublasHandlePool.cpp: ":4096:2:16:8" (8 MiB + 128 KiB), ":4096:8" on sm 9-12; Lt 1 MiB
    assert CUBLAS_WORKSPACE == 8 * 2**20 + 128 * 2**10
    assert workspace_bytes("ampere") == CUBLAS_WORKSPACE + CUBLASLT_WORKSPACE
    assert workspace_bytes("hopper") == CUBLAS_WORKSPACE_32MB + CUBLASLT_WORKSPACE == 33 * 2**20


@pytest.mark.parametrize("name", ["lora", "full", "eager", "zero-3"])
def test_the_simulated_peak_keeps_the_allocators_invariants(name: str):
    plan = CASES[name].validated()
    spec = _spec(plan)
    est = estimate(plan, spec)
    peak = est.device_peak
    assert peak is not None
    assert peak.reserved >= peak.allocated >= est.allocated_bytes
    assert peak.overhead == peak.reserved - est.allocated_bytes
    assert est.component("allocator reserve") == peak.overhead
    outside = est.component("CUDA context") + est.component("NCCL buffers")
    assert est.device_bytes == peak.reserved + outside
    assert (est.component("NCCL buffers") > 0) == (plan.world > 1)
    # expandable segments map pages on demand: never more reserved than fixed segments
    step = step_sizes(plan, spec)
    expandable = device_peak(
        plan, spec, step, est.allocated_bytes, config=parse_alloc_conf("expandable_segments:True")
    )
    assert expandable.reserved <= peak.reserved


def test_a_capacity_below_the_peak_names_the_failing_allocation():
    plan = CASES["eager"].validated()
    spec = _spec(plan)
    est = estimate(plan, spec)
    step = step_sizes(plan, spec)
    short = device_peak(plan, spec, step, est.allocated_bytes, capacity=est.allocated_bytes // 2)
    assert short.oom is not None
    assert "Tried to allocate" in short.oom.message()
    roomy = device_peak(plan, spec, step, est.allocated_bytes, capacity=2 * est.device_bytes)
    assert roomy.oom is None and roomy.reserved == est.device_peak.reserved  # type: ignore[union-attr]


def test_the_plans_alloc_conf_changes_the_simulation():
    plan = replace(CASES["eager"], alloc_conf="expandable_segments:True").validated()
    spec = _spec(plan)
    plain = estimate(CASES["eager"].validated(), spec)
    expandable = estimate(plan, spec)
    assert expandable.allocated_bytes == plain.allocated_bytes
    assert expandable.device_bytes <= plain.device_bytes
    with pytest.raises(PlanError, match="alloc_conf"):
        replace(BASE, alloc_conf="expandable_segments:maybe").validated()


def test_simulate_false_is_the_quick_figure():
    plan = BASE.validated()
    spec = _spec(plan)
    quick = estimate(plan, spec, simulate=False)
    assert quick.device_peak is None
    assert quick.component("allocator reserve") == round(quick.allocated_bytes * 0.08)


@settings(max_examples=15, deadline=None)
@example(seq=64, more=1).via("6 MiB less")
@example(seq=3735, more=17).via("1.35% less")
@given(seq=st.integers(min_value=64, max_value=4096), more=st.integers(min_value=1, max_value=2048))
def test_more_tokens_never_reserve_much_less(seq: int, more: int):
    """Up to one large-pool segment (20 MiB) or 2% of the reserve: the caching allocator
    itself is not monotone (a few bytes more move a request across a cached block's size, and
    best fit then packs segments otherwise: 64 -> 65 tokens reserve 6 MiB less, 3,735 -> 3,752
    reserve 247 MB, 1.35%, less), so the property the issue asks for holds only up to that."""
    spec = _spec(BASE)
    short = estimate(replace(BASE, seq_len=seq), spec).device_peak
    long = estimate(replace(BASE, seq_len=seq + more), spec).device_peak
    assert short is not None and long is not None
    assert long.reserved >= short.reserved - max(K_LARGE_BUFFER, short.reserved // 50)


def _logit_pattern(plan: Plan) -> list[str]:
    """Step 2's events on logits-sized tensors (multiples of tokens x vocab bytes), as
    "A2" (a 16-bit one allocated), "F4" (an fp32 one freed), ..."""
    spec = _spec(plan)
    built = step_events(plan, spec, step_sizes(plan, spec))
    unit = plan.batch * plan.seq_len * spec.vocab
    sizes: dict[object, int] = {}
    pattern = []
    for index, event in enumerate(built.events):
        if isinstance(event, Alloc):
            sizes[event.id] = event.size
        size = sizes[event.id]
        if index > built.moments[0]["optimizer step"] and size % unit == 0:
            pattern.append(("A" if isinstance(event, Alloc) else "F") + str(size // unit))
    return pattern


def test_the_loss_runs_in_the_order_a_traced_step_runs_it():
    # bench/results/trace-cpu.json, Llama-3.2-1B full bf16 (transformers 5's ForCausalLMLoss):
    # logits, their fp32 upcast, log_softmax's output; the upcast freed before the logits;
    # nll_loss's and log_softmax's gradients; then the gradient cast back to 16 bits, alive
    # while the head's backward reads it
    bf16 = replace(BASE, method="full", precision="bf16").validated()
    assert _logit_pattern(bf16) == [
        *("A2", "A4", "A4", "F4", "F2"),  # forward
        *("A4", "A4", "F4", "F4"),  # loss backward (the peak moment), then two go
        *("A2", "F4", "F2"),  # the 16-bit gradient
    ]
    fp32 = replace(bf16, precision="fp32").validated()  # no cast: no 16-bit tensor
    assert "A2" not in _logit_pattern(fp32)


def test_a_step_with_a_tensor_pytorch_refuses_says_so_in_the_plans_words():
    # PyTorch refuses any single allocation of 1 EiB or more; a plan whose step holds one
    # is told by its tokens and batch, on the field to change, never by an event number
    huge = Plan(model="Qwen/Qwen2.5-0.5B", method="full", seq_len=10_000_000, batch=65536)
    huge = replace(huge, attn="eager", grad_ckpt=False).validated()
    with pytest.raises(PlanError) as err:
        estimate(huge, _spec(huge), runtime="gpu")
    assert err.value.field == "seq_len" and "event" not in str(err.value)
    assert "10,000,000 tokens x batch 65,536" in str(err.value)
