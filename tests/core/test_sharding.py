"""Sharded plans (issue 10): hand-computed per stage, strategy and offload; DeepSpeed's own
model-state estimates reproduced from its source; properties; bad combinations."""

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmem.core.architecture import spec_from_config
from trainmem.core.errors import PlanError
from trainmem.core.estimator import MOMENTS, estimate
from trainmem.core.plan import Plan
from trainmem.core.precision import dtypes
from trainmem.core.sharding import (
    layout,
    units,
    zero2_gradient_partition,
    zero3_reused_layers,
    zero_buckets,
    zero_grad_norm,
)
from trainmem.core.states import model_states
from trainmem.sources import catalog

H, LAYERS, HEADS, KV, HD, FF, V = 256, 4, 4, 2, 64, 512, 1024
SPEC = spec_from_config(
    {
        "model_type": "llama",
        "hidden_size": H,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV,
        "head_dim": HD,
        "intermediate_size": FF,
        "vocab_size": V,
        "tie_word_embeddings": False,
    },
    "tiny",
)
P = SPEC.params
ROOT = 2 * V * H + H  # embeddings, lm_head, final norm
LAYER = (P - ROOT) // LAYERS
FAST = settings(max_examples=40, deadline=None, derandomize=True)


def plan(**kw):
    base = dict(model="tiny", seq_len=8, batch=1, grad_ckpt=True, device="80GB")
    return Plan(**{**base, **kw}).validated()


def states(**kw):
    p = plan(**kw)
    return model_states(SPEC, p, dtypes(p))


# --- what each stage and strategy shards -----------------------------------------------


def test_zero_stages_hand_computed():
    # DeepSpeed mixed precision on 4 GPUs: 16-bit weights and gradients, fp32 master + moments
    s1 = states(method="full", zero=1, gpus=4)
    assert (s1.weights, s1.gradients, s1.master, s1.optimizer) == (2 * P, 2 * P, P, 2 * P)
    s2 = states(method="full", zero=2, gpus=4)
    # the worst rank's gradient buffer: its quarter and, whole, the gate/up/down linear
    # (FF x H) straddling its end (stage_1_and_2.py copy_grads_in_partition); the 1024 x 256
    # embedding is smaller than a quarter
    assert (s2.weights, s2.gradients) == (2 * P, 2 * (-(-P // 4) + FF * H))
    s3 = states(method="full", zero=3, gpus=2, nodes=2)  # 4 processes over 2 nodes
    assert (s3.weights, s3.gradients, s3.master, s3.optimizer) == (2 * P // 4, 2 * P // 4, P, 2 * P)
    # step(): an fp32 copy of this process's gradient partition (stage_1_and_2.py:2361)
    assert s3.optimizer_temp == 4 * P // 4


def test_zero_offload_moves_master_states_and_gradient_partition_to_host():
    opt = states(method="full", zero=2, gpus=4, offload="optimizer")
    assert (opt.weights, opt.gradients, opt.master, opt.optimizer) == (2 * P, 0, 0, 0)
    # fp32 master 4 + moments 8 + fp32 gradient 4 bytes per parameter, this process's
    # quarter, and DeepSpeed 0.19.8's 16-bit staging buffers (measured): the largest
    # parameter's gradient (the V x H embedding) and a quarter of the weights
    assert opt.offloaded == 16 * P // 4 + 2 * V * H + 2 * P // 4
    par = states(method="full", zero=3, gpus=4, offload="params")
    assert par.weights == 0
    assert par.offloaded == 16 * P // 4 + 2 * P // 4 + 2 * P // 4  # + 16-bit params and grads


def test_fsdp_shards_weights_gradients_and_states_over_every_gpu():
    s = states(method="full", strategy="fsdp", gpus=8)
    # tiny's dims are all multiples of 8: FSDP2's dim-0 padding adds nothing
    assert (s.weights, s.gradients, s.optimizer, s.master) == (
        2 * P // 8,
        2 * P // 8,
        4 * P // 8,
        0,
    )
    hybrid = states(method="full", strategy="fsdp", fsdp="hybrid-shard", gpus=8, nodes=4)
    assert hybrid.weights == 2 * P // 8  # sharded within a node only


def test_fsdp2_pads_dim0_per_parameter():
    # 3 GPUs: each matrix's rows are padded up to a multiple of 3
    s = states(method="full", strategy="fsdp", gpus=3, precision="fp32")
    assert s.weights > 4 * P // 3
    assert s.weights == 4 * sum(
        -(-r // 3) * c * n
        for r, c, n in [(V, H, 1), (V, H, 1)]
        + [(QD, H, LAYERS) for QD in [HEADS * HD]]
        + [(KV * HD, H, 2 * LAYERS), (H, HEADS * HD, LAYERS)]
        + [(FF, H, 2 * LAYERS), (H, FF, LAYERS), (2 * H, 1, LAYERS), (H, 1, 1)]
    )


def test_lora_base_has_nothing_but_weights_to_shard():
    lora = states(method="lora", zero=2, gpus=4)
    single = states(method="lora")
    assert lora.weights == single.weights  # stage 2 keeps the frozen base whole
    assert lora.gradients == -(-single.gradients // 4)
    sharded = states(method="lora", strategy="fsdp", gpus=4)
    assert sharded.weights == single.weights // 4  # the frozen base is sharded by FSDP


def test_ddp_keeps_everything_and_a_bucket_copy_of_the_gradients():
    one = estimate(plan(method="full"), SPEC)
    ddp = estimate(plan(method="full", gpus=8), SPEC)
    assert ddp.bucket_bytes == 2 * P  # gradient_as_bucket_view=False
    assert ddp.phases["optimizer step"] == one.phases["optimizer step"] + 2 * P


# --- the step's timeline ------------------------------------------------------------------


def test_fsdp_gathers_root_and_two_layer_units_in_backward():
    # axolotl's own FSDP2 preparation keeps the root whole (accelerate >= 1.14 carves it)
    p = plan(method="full", strategy="fsdp", gpus=4, stack="axolotl")
    est = estimate(p, SPEC)
    shard = model_states(SPEC, p, dtypes(p)).weights
    w = {m: parts["weights"] for m, parts in est.breakdown.items()}
    assert w["forward"] == shard + 2 * ROOT  # the root is not resharded after forward
    assert w["backward (last layer)"] == shard + 2 * ROOT + 2 * 2 * LAYER  # + prefetched unit
    assert w["backward (first layer)"] == shard + 2 * ROOT + 2 * LAYER
    assert w["optimizer step"] == shard
    no_reshard = estimate(replace(p, fsdp="shard-grad-op"), SPEC)
    assert no_reshard.breakdown["forward"]["weights"] == shard + 2 * ROOT + 2 * LAYERS * LAYER


def test_fsdp_unit_gradient_is_whole_until_reduce_scattered():
    p = plan(method="full", strategy="fsdp", gpus=4, stack="axolotl")
    est = estimate(p, SPEC)
    g = est.breakdown["backward (first layer)"]
    # (the final norm's few elements are counted with the layers here)
    layer = (P - 2 * V * H) // LAYERS
    sharded_layers = (LAYERS - 1) * ((2 * P // 4 - 2 * 2 * V * H // 4) // LAYERS)
    # lm_head's whole gradient + 3 layers' shards + layer 0's whole gradient
    assert g["gradients"] == 2 * V * H + sharded_layers + 2 * layer
    # the previous unit's reduce-scatter input is still held (foreach_reduce)
    assert g["temporaries"] >= 2 * LAYER


def test_zero_buckets_follow_deepspeed_defaults_and_auto():
    """(kept for the run, alive in backward only), in the 16-bit dtype."""
    two = plan(method="full", zero=2, gpus=4)
    assert zero_buckets(two, SPEC, 2) == (0, 2 * 500_000_000)  # one 5e8-element bucket
    assert zero_buckets(replace(two, overlap_comm=True), SPEC, 2) == (0, 4 * 500_000_000)
    assert zero_buckets(replace(two, reduce_bucket=-1), SPEC, 2) == (0, 2 * H * H)  # hidden²
    three = replace(two, zero=3, overlap_comm=True)
    assert zero_buckets(three, SPEC, 2) == (2 * 500_000_000, 0)  # stage 3: one flat bucket
    assert estimate(three, SPEC).bucket_bytes == 2 * 500_000_000


@pytest.mark.parametrize("stage", [1, 2])
def test_zero_1_2_buckets_live_from_the_first_gradient_to_the_end_of_backward(stage):
    """DeepSpeed 0.19.8 makes them in the first gradient hook (setup_buckets) and drops them
    in the backward epilogue (_release_ipg_buffers): the measured 2-process ZeRO-1 run with
    its 5e8 default was 3.7% over while they were counted at the step, and is exact now."""
    est = estimate(plan(method="full", gpus=4, zero=stage, reduce_bucket=1_000_000), SPEC)
    without = estimate(plan(method="full", gpus=4, zero=stage, reduce_bucket=1), SPEC)
    added = {m: est.breakdown[m]["gradients"] - without.breakdown[m]["gradients"] for m in MOMENTS}
    assert added == {
        "forward": 0,
        "loss backward": 0,
        "backward (last layer)": 2 * (1_000_000 - 1),
        "backward (first layer)": 2 * (1_000_000 - 1),
        "backward (embedding)": 2 * (1_000_000 - 1),
        "optimizer step": 0,
    }


def test_zero3_live_parameters_are_prefetch_bounded():
    small = plan(method="full", zero=3, gpus=4, reduce_bucket=-1, prefetch_bucket=1000)
    u = units(SPEC, small)
    est = estimate(small, SPEC)
    shard = model_states(SPEC, small, dtypes(small)).weights
    first = "backward (first layer)"  # the layers above are released by then
    live = est.breakdown[first]["weights"] - shard
    assert live == 2 * (u.largest_module + 1000 + u.persistent)
    capped = estimate(replace(small, max_live_params=10), SPEC)
    assert capped.breakdown[first]["weights"] - shard == 2 * (u.largest_module + 10 + u.persistent)
    # from forward to the last layer's backward, layers used again within
    # stage3_max_reuse_distance (1e9) stay gathered: every layer of this small model
    kept = u.largest_module + 1000 + u.persistent + LAYERS * u.layer
    assert est.breakdown["forward"]["weights"] - shard == 2 * min(P, kept)


def test_zero3_reuse_distance_keeps_the_last_layers_gathered():
    # hand-computed: a layer is kept when 2 x (layers above) x layer + 2 x lm_head < 1e9
    head = 128_256 * 4096  # Llama-3-8B-like lm_head: 525M, so 2 x head > 1e9
    spec8 = replace(SPEC, vocab=128_256, hidden=4096, layers=32)
    assert zero3_reused_layers(spec8, replace(units(SPEC, plan()), layer=218_112_000)) == 0
    spec_small_head = replace(SPEC, vocab=32_000, hidden=4096, layers=32)  # head 131M
    u = replace(units(SPEC, plan()), layer=202_383_360)  # a 7B layer
    # (1e9 - 2 x 131,072,000) // (2 x 202,383,360) + 1 = 1 + 1
    assert zero3_reused_layers(spec_small_head, u) == 2
    assert head > 0


def test_activations_and_logits_are_never_divided():
    one = estimate(plan(method="full", seq_len=64), SPEC)
    for kw in (dict(strategy="fsdp", gpus=8), dict(zero=3, gpus=8), dict(gpus=8)):
        many = estimate(plan(method="full", seq_len=64, **kw), SPEC)
        for moment in one.breakdown:
            for part in ("activations", "logits"):
                assert many.breakdown[moment][part] == one.breakdown[moment][part]


# --- host RAM per node ------------------------------------------------------------------


def test_host_ram_loading_per_process_or_once():
    per_process = estimate(plan(method="full", strategy="fsdp", gpus=8), SPEC)
    assert per_process.host_loading_bytes == 8 * 2 * P
    once = estimate(plan(method="full", strategy="fsdp", gpus=8, ram_efficient_loading=True), SPEC)
    assert once.host_loading_bytes == 2 * P
    off = estimate(plan(method="full", zero=2, gpus=8, offload="optimizer"), SPEC)
    assert off.host_offloaded_bytes == 8 * (16 * P // 8 + 2 * V * H + 2 * P // 8)
    assert off.host_bytes_per_node == max(off.host_offloaded_bytes, off.host_loading_bytes)


# --- DeepSpeed's own estimates, reproduced from its source --------------------------------


def deepspeed_zero2(total, gpus_per_node, nodes, cpu_offload):
    """deepspeed/runtime/zero/stage_1_and_2.py:3081-3098 (edaa722)."""
    total_gpus = nodes * gpus_per_node
    if cpu_offload:
        return 2 * total
    return 2 * total + int(18 * total / total_gpus)


def deepspeed_zero3(total, largest_layer, gpus_per_node, nodes, cpu_offload, cpu_offload_params):
    """deepspeed/runtime/zero/stage3.py:3744-3782 (edaa722), GPU part."""
    total_gpus = nodes * gpus_per_node
    largest_layer_memory = 4 * largest_layer
    if cpu_offload:
        if cpu_offload_params:
            return largest_layer_memory
        return largest_layer_memory + int(2 * total / total_gpus)
    return largest_layer_memory + int(18 * total / total_gpus)


@pytest.mark.parametrize("gpus,nodes", [(1, 1), (8, 1), (4, 2), (8, 8)])
def test_model_states_agree_with_deepspeed_zero2_estimate(gpus, nodes):
    for offload in ("none", "optimizer"):
        if gpus * nodes == 1 and offload == "none":
            continue
        s = states(method="full", zero=2, gpus=gpus, nodes=nodes, offload=offload)
        # 2 params16 + (2 grads16 + 4 grads32 + 4 params32 + 8 moments) / N; the fp32 gradient
        # is in our optimizer_temp (made in step()), which DeepSpeed 0.19.8 precedes with an
        # fp64 norm of the largest gradient slice (sharding.zero_grad_norm): the larger counts
        n = gpus * nodes
        fp32_grad = 4 * -(-P // n) if offload == "none" else 0
        p = plan(method="full", zero=2, gpus=gpus, nodes=nodes, offload=offload)
        norm = zero_grad_norm(p, SPEC, s.trainable_params) if offload == "none" else 0
        assert s.optimizer_temp == max(fp32_grad, norm)
        # DeepSpeed's 2/N of 16-bit gradients; the worst rank holds every parameter that
        # overlaps its partition whole (sharding.zero2_gradient_partition)
        grads = 2 * -(-P // n) if offload == "none" else 0
        if offload == "none":
            assert s.gradients == 2 * zero2_gradient_partition(p, SPEC, P) >= grads
        ours = s.weights + grads + s.master + s.optimizer + fp32_grad
        assert ours == pytest.approx(deepspeed_zero2(P, gpus, nodes, offload != "none"), abs=8)


@pytest.mark.parametrize("gpus,nodes", [(8, 1), (4, 2), (8, 8)])
def test_model_states_agree_with_deepspeed_zero3_estimate(gpus, nodes):
    p = plan(method="full", zero=3, gpus=gpus, nodes=nodes)
    largest = units(SPEC, p).largest_module
    n = gpus * nodes
    for offload in ("none", "optimizer", "params"):
        s = model_states(SPEC, replace(p, offload=offload), dtypes(p))
        ours = s.weights + s.gradients + s.master + s.optimizer + s.optimizer_temp
        # DeepSpeed's 4 x largest layer: the gathered module's 16-bit weight and gradient
        theirs = deepspeed_zero3(P, largest, gpus, nodes, offload != "none", offload == "params")
        # Its 18/N leaves out the 16-bit gradient partitions, which stage 3 allocates at init
        # (stage3.py:742 grad_partitions_flat_buffer); with offload they live on the host.
        left_out = 2 * P // n if offload == "none" else 0
        assert ours + 4 * largest - left_out == pytest.approx(theirs, abs=8), offload


# --- properties -------------------------------------------------------------------------

SPECS = [s for s in catalog.specs() if not s.is_moe][:12]
specs = st.sampled_from(SPECS)
configs = st.sampled_from(
    [
        dict(strategy="fsdp"),
        dict(strategy="fsdp", fsdp="shard-grad-op"),
        dict(zero=1),
        dict(zero=2),
        dict(zero=3),
        dict(zero=3, offload="optimizer"),
        dict(zero=3, offload="params"),
        dict(strategy="ddp"),
    ]
)


def _plan(spec, method, **kw):
    return Plan(model=spec.hf_id or spec.name, method=method, seq_len=512, device="80GB", **kw)


@FAST
@given(specs, configs, st.sampled_from(["full", "lora", "qlora"]), st.integers(2, 63))
def test_per_gpu_memory_never_grows_with_more_gpus(spec, cfg, method, gpus):
    base = estimate(_plan(spec, method, gpus=gpus, **cfg), spec)
    more = estimate(_plan(spec, method, gpus=gpus + 1, **cfg), spec)
    assert more.allocated_bytes <= base.allocated_bytes


def _model_states(e):
    return sum(e.component(n) for n in ("weights", "master copy", "adapter", "optimizer state"))


@FAST
@given(specs, st.sampled_from(["full", "lora"]), st.integers(2, 64))
def test_model_states_shrink_with_the_stage(spec, method, gpus):
    by_stage = []
    for zero in (0, 1, 2, 3):
        p = _plan(spec, method, strategy="zero", zero=zero, gpus=gpus).validated()
        s = model_states(spec, p, dtypes(p))
        by_stage.append(s.weights + s.master + s.adapter + s.gradients + s.optimizer)
    assert by_stage[3] <= by_stage[2] <= by_stage[1] <= by_stage[0]


@FAST
@given(specs, st.sampled_from(["full", "lora"]), st.integers(1, 16))
def test_host_ram_grows_with_offload(spec, method, gpus):
    host = [
        estimate(_plan(spec, method, zero=3, gpus=gpus, offload=o), spec).host_offloaded_bytes
        for o in ("none", "optimizer", "params")
    ]
    assert host[0] < host[1] < host[2]


# --- bad combinations -------------------------------------------------------------------


@pytest.mark.parametrize(
    "kw,field,words",
    [
        (dict(zero=2, offload="params"), "offload", "stage 3"),
        (dict(strategy="zero", offload="optimizer"), "offload", "stage 1, 2 or 3"),
        (dict(offload="optimizer"), "offload", "stage 1, 2 or 3"),
        (dict(strategy="fsdp", fsdp="hybrid-shard", gpus=8), "fsdp", "--nodes 2"),
        (dict(strategy="fsdp", offload="optimizer"), "offload", "use params"),
        (dict(strategy="fsdp", fsdp="no-shard"), "fsdp", "FSDP2 has no no-shard"),
        (dict(zero=2, gpus=2, reduce_bucket=0), "reduce_bucket", "at least 1"),
    ],
)
def test_meaningless_sharding_is_a_plan_error(kw, field, words):
    with pytest.raises(PlanError) as exc:
        plan(**kw)
    assert exc.value.field == field and words in str(exc.value)


def test_a_zero_reduce_bucket_outside_deepspeed_is_ignored():
    assert plan(strategy="fsdp", gpus=2, reduce_bucket=0).reduce_bucket == 0


def test_zero_on_one_gpu_and_fsdp_fields_under_zero_are_noted():
    one = estimate(plan(method="full", zero=2), SPEC)
    assert any("one GPU shards nothing" in n for n in one.notes)
    mixed = estimate(plan(method="full", zero=3, gpus=2, fsdp="shard-grad-op"), SPEC)
    assert any(n.startswith("fsdp") and "do not apply" in n for n in mixed.notes)


def test_old_plan_files_keep_their_meaning():
    old = Plan.from_dict({"model": "tiny", "gpus": 8, "zero": 2})
    assert (old.gpus, old.nodes, old.world, old.sharding) == (8, 1, 8, "zero")
    assert Plan(zero=3, gpus=4).validated() == Plan(zero=3, gpus=4)  # nothing rewritten
    assert layout(old).shard == 8


# --- what-if and the node's RAM ---------------------------------------------------------


def test_fewest_gpus_is_the_smallest_count_that_fits():
    from trainmem.core.fit import Budget
    from trainmem.core.whatif import SHARDINGS, fewest_gpus, need
    from trainmem.sources.resolve import resolve_model

    spec = resolve_model("Qwen/Qwen2.5-7B")
    p = Plan(model="Qwen/Qwen2.5-7B", method="full", device="40GB").validated()
    usable = 40 * 10**9
    budget = Budget(usable)
    answers = fewest_gpus(p, spec, budget)
    assert answers["ddp"] is None  # DDP replicates everything: more GPUs never help
    for name, n in answers.items():
        if n is None:
            continue
        sharded = replace(p, **SHARDINGS[name])
        assert need(replace(sharded, gpus=n), spec, budget) <= usable
        assert n == 1 or need(replace(sharded, gpus=n - 1), spec, budget) > usable
    assert answers["zero-3"] is not None and answers["fsdp full-shard"] is not None
    assert answers["zero-3 + params offload"] <= answers["zero-3"]


def test_the_fewest_count_is_found_where_more_gpus_need_more_again():
    from trainmem.core.whatif import _smallest_count

    # sharding divides the need, NCCL's buffers add to it per peer: it falls, then rises
    def u_shaped(n: int, exact: bool) -> int:
        return 1000 // n + 2 * n + (0 if exact else -1)

    fits = [n for n in range(1, 1025) if u_shaped(n, True) <= 120]
    assert fits and fits[-1] < 1024  # the far end does not fit
    assert _smallest_count(u_shaped, 120, 1024) == fits[0]
    assert _smallest_count(u_shaped, 120, 1024, first=fits[0] + 3) == fits[0]
    assert _smallest_count(u_shaped, 10, 1024) is None


def test_ddp_that_fits_on_its_node_is_not_called_unfit_for_want_of_gpus():
    from trainmem.core.fit import Budget
    from trainmem.core.runtime import built_in_figures
    from trainmem.core.whatif import fewest_gpus, need
    from trainmem.sources.resolve import resolve_model

    spec = resolve_model("Qwen/Qwen2.5-7B")
    p = Plan(model="Qwen/Qwen2.5-7B", method="full", strategy="ddp", gpus=8, device="H100-80GB")
    p = p.validated()
    budget = Budget(85 * 10**9, figures=built_in_figures("NVIDIA H100 80GB HBM3"))
    # the need of DDP never falls with more GPUs (NCCL's buffers grow): 1,024 do not fit
    assert need(p, spec, budget) <= budget.usable_bytes
    assert need(replace(p, gpus=1024), spec, budget) > budget.usable_bytes
    assert fewest_gpus(p, spec, budget)["ddp"] == 1


def test_a_search_the_quick_figure_finds_empty_is_settled_by_one_simulation():
    from trainmem.core.whatif import _search

    for largest in (True, False):
        simulated: list[int] = []

        def never(n: int, exact: bool, simulated: list[int] = simulated) -> int:
            if exact:
                simulated.append(n)
            return 2  # over a budget of 1, exactly and quickly

        assert _search(never, 1, 1, 1024, largest) is None
        assert simulated == [1 if largest else 1024]  # the end that fits best, by monotony

        def from_300(n: int, exact: bool, largest: bool = largest) -> int:  # quick: none
            return 0 if exact and (n <= 300 if largest else n >= 300) else 2

        assert _search(from_300, 1, 1, 1024, largest) == 300


@pytest.mark.parametrize(
    "exact",
    [
        lambda n: 1037 * n + 5_000_000,  # the allocator's share: a fixed part and per token
        lambda n: n * n // 50 + 1100 * n,  # eager attention's square term
        lambda n: 1000 * n + (n // 64) * 40_000,  # segments of whole 2 MiB steps
    ],
)
def test_a_search_settles_a_smooth_need_in_a_few_simulations(exact):
    """The guesses from the quick figure, corrected by the simulated need, land next to the
    answer: four simulations where bisecting the 131,072 tokens would take about ten."""
    from trainmem.core.whatif import _largest, _search

    usable = 60_000_000
    probes: list[int] = []

    def measure(n: int, simulated: bool) -> int:
        if not simulated:
            return 1000 * n  # the quick figure: the tensors alone
        probes.append(n)
        return int(exact(n))

    answer = _largest(lambda n: exact(n) <= usable, 1, 131_072)
    assert _search(measure, usable, 1, 131_072, True, first=2048) == answer
    print(len(set(probes)), probes)
    assert len(set(probes)) <= 8, probes


def test_a_search_agrees_with_the_plans_own_verdict_where_the_need_is_not_monotone():
    """The allocator's packing is not monotone: here 1-100 and 200-300 fit, 101-199 do not.
    The answer is always an n that fits beside one that does not, on the plan's side."""
    from trainmem.core.whatif import _search

    def fits(n: int) -> bool:
        return n <= 100 or 200 <= n <= 300

    def measure(n: int, exact: bool) -> int:
        return (0 if fits(n) else 2) if exact else n // 200  # quick: 1-399 fit

    for first in (10, 150, 250, 350):
        answer = _search(measure, 1, 1, 1000, True, first=first)
        assert answer is not None and fits(answer) and not fits(answer + 1)
        assert (answer >= first) == fits(first), (first, answer)


def test_a_plan_too_big_before_the_allocator_is_not_simulated(monkeypatch):
    from trainmem.core import device_peak, whatif
    from trainmem.core.fit import Budget
    from trainmem.sources.resolve import resolve_model

    spec = resolve_model("Qwen/Qwen2.5-7B")
    p = Plan(model="Qwen/Qwen2.5-7B", method="full", device="40GB").validated()
    runs = []
    real = device_peak.simulate

    def counted(*args, **kwargs):
        runs.append(kwargs.get("capacity"))
        return real(*args, **kwargs)

    monkeypatch.setattr(device_peak, "simulate", counted)
    device_peak.clear_cache()
    assert not whatif._fits(p, spec, Budget(40 * 10**9))
    assert runs == []  # weights, gradients and Adam alone exceed 40 GB
    assert whatif._fits(p, spec, Budget(400 * 10**9))
    assert len(runs) == 1  # one simulation, within the GPU, decides a plan that fits


def test_multi_gpu_advice_offers_stage_offload_and_more_gpus():
    from trainmem.core.fit import Budget
    from trainmem.core.whatif import advice, need
    from trainmem.sources.resolve import resolve_model

    spec = resolve_model("Qwen/Qwen2.5-7B")
    p = Plan(model="Qwen/Qwen2.5-7B", method="full", zero=1, gpus=2).validated()
    usable = 40 * 10**9
    budget = Budget(usable)
    actions = {a.action: a for a in advice(p, spec, budget)}
    assert "raise the ZeRO stage to 2" in actions
    assert "offload the optimizer to host RAM" in actions
    more = [a for a in actions.values() if a.action.startswith("use ") and "GPUs" in a.action]
    assert more and more[0].fits_after
    for a in actions.values():  # each answer re-estimated
        if a.action.startswith("pick a smaller model"):
            continue
        after = need(replace(p, **dict(a.changes)), spec, budget)
        assert a.fits_after == (after <= usable)


def test_report_judges_the_node_ram():
    from trainmem.core.target import DeviceTarget
    from trainmem.planner.report import build_report

    p = plan(method="full", zero=3, gpus=8, offload="params")
    gpu = [DeviceTarget.gpu("80GB", 80 * 10**9)]
    need = estimate(p, SPEC).host_bytes_per_node
    short = build_report(p, SPEC, gpu, solve=False, node_ram_bytes=need - 1)
    assert short.host_fit is not None and short.host_fit.verdict == "too big"
    assert not short.fits_everywhere and all(f.fits for f in short.fit)
    roomy = build_report(p, SPEC, gpu, solve=False, node_ram_bytes=10 * need)
    assert roomy.fits_everywhere and roomy.to_json()["host"]["bytes_per_node"] == need


def test_the_fewest_gpus_of_the_plans_own_strategy_agree_with_its_verdict():
    from trainmem.core.fit import Budget
    from trainmem.core.whatif import fewest_gpus, need
    from trainmem.sources.resolve import resolve_model

    spec = resolve_model("Qwen/Qwen2.5-7B")
    budget = Budget(40 * 10**9)
    for gpus in (3, 8):
        p = Plan(model="Qwen/Qwen2.5-7B", method="full", strategy="zero", zero=3, gpus=gpus)
        p = p.validated()
        fits = need(p, spec, budget) <= budget.usable_bytes
        answer = fewest_gpus(p, spec, budget)["zero-3"]
        assert answer is not None and (answer <= gpus) == fits, (gpus, answer, fits)


def test_fsdp2_frees_the_last_units_reduce_scatter_input_before_the_roots():
    """torch 2.13 _fsdp_param_group.py post_backward keeps one reduce-scatter input in flight
    (reduce_scatter_max_input_buffers = 1): layer 0's goes before the root's is made."""
    est = estimate(plan(method="full", strategy="fsdp", gpus=4), SPEC)
    # the root's input: lm_head's and the embedding's gradients, in the 16-bit reduce dtype;
    # layer 0's: its parameters (the final norm's few elements counted with the layers here)
    root, layer0 = 2 * 2 * V * H, 2 * ((P - 2 * V * H) // LAYERS)
    assert est.breakdown["backward (embedding)"]["temporaries"] == max(root, layer0)


def test_fsdp2_leaves_uint8_4bit_weights_whole_where_the_stack_keeps_bnbs_default():
    """accelerate 1.16 fsdp2_prepare_model keeps frozen Params4bit of a non-floating storage
    (bitsandbytes' uint8, the Trainer's and TRL's) out of fully_shard: whole on every GPU and
    never all-gathered; axolotl and LLaMA-Factory load them with a bf16 storage, which
    shards (and gathers a layer at a time)."""
    from trainmem.core.states import quantized_weight_bytes

    four_bit = quantized_weight_bytes(SPEC, plan(method="qlora"))
    held, gathered = {}, {}
    for stack in ("trainer", "llama-factory"):  # without the Trainer's fp32 k-bit preparation
        p = plan(method="qlora", strategy="fsdp", gpus=4, stack=stack, kbit_prep=False)
        held[stack] = model_states(SPEC, p, dtypes(p)).weights
        gathered[stack] = estimate(p, SPEC).breakdown["backward (first layer)"]["weights"]
        gathered[stack] -= held[stack]
    assert held["trainer"] - held["llama-factory"] == four_bit - four_bit // 4
    assert gathered["llama-factory"] - gathered["trainer"] == four_bit // LAYERS  # one layer's
    fsdp1 = plan(method="qlora", strategy="fsdp", gpus=4, fsdp_version=1, kbit_prep=False)
    assert model_states(SPEC, fsdp1, dtypes(fsdp1)).weights == held["llama-factory"]


def test_accelerate_carves_an_untied_models_root():
    """accelerate >= 1.14: an embedding unit (resharded after forward) and a [norm, lm_head]
    unit never resharded, whose all-gather output is held until the root's post-forward;
    lm_head's gradient reduce-scattered as soon as the tail's backward ends. Measured:
    bench/results/measure-cpu-sharded-accelerate.json."""
    p = plan(method="full", strategy="fsdp", gpus=4)  # the Trainer: accelerate's preparation
    est = estimate(p, SPEC)
    shard = model_states(SPEC, p, dtypes(p)).weights
    w = {m: parts["weights"] - shard for m, parts in est.breakdown.items()}
    embed, tail = 2 * V * H, 2 * (V * H + H)  # bf16: the embedding; lm_head and the norm
    assert (w["forward"], w["loss backward"]) == (2 * tail, tail)
    assert w["backward (last layer)"] == 2 * 2 * LAYER  # the tail resharded, one prefetched
    assert w["backward (first layer)"] == 2 * LAYER + embed  # layer 0 prefetches the embedding
    head_shard = 2 * V * H // 4
    g = est.breakdown["backward (first layer)"]["gradients"]
    layer = (P - 2 * V * H) // LAYERS
    sharded_layers = (LAYERS - 1) * ((2 * P // 4 - 2 * 2 * V * H // 4) // LAYERS)
    assert g == head_shard + sharded_layers + 2 * layer  # lm_head's: a shard already
    axolotl = estimate(replace(p, stack="axolotl"), SPEC)  # its own preparation: no carving
    assert axolotl.breakdown["forward"]["weights"] - shard == 2 * ROOT


def test_a_search_leaps_over_a_flat_need_at_the_limit():
    """Steps the allocator's cache retry runs within the GPU all need the GPU's bytes: no
    slope for a secant, which crept up a token or two a probe between failing guesses (the
    70B QLoRA plan of bench/allocator_bench.py on an H100: 30 simulations for its longest
    sequence). Shaped like that plan: 22 probes so, 16 leaping up from the flat fits and
    then bisecting."""
    from trainmem.core.whatif import _search

    usable = 85_519_761_408

    def exact(n: int) -> int:  # with memory to spare, else by the retry up to 3,812 tokens
        spare = 22_800_000 * n
        return usable - 7 if usable < spare and n <= 3_812 else spare

    def probes(search) -> list[int]:
        seen: list[int] = []

        def measure(n: int, simulated: bool) -> int:
            if not simulated:
                return 21_000_000 * n
            seen.append(n)
            return exact(n)

        assert search(measure, usable, 1, 131_072, True, first=4096) == 3_812
        return seen

    assert len(set(probes(_search))) <= 16
