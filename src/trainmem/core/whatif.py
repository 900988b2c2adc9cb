"""What-if answers: the longest sequence and largest batch that fit, the largest catalogue model
per method, and ranked advice when a plan does not fit.

Every answer re-estimates a changed plan on one ``Budget`` (the device's usable bytes, its kind
and its runtime figures, calibrated or built-in), so it agrees with the report's verdict;
nothing is a fixed percentage. The searches are bounded by sense: a sequence by the model's
context (``max_position_embeddings``), a micro-batch by ``BATCH_LIMIT``. A plan judged on the
guide's rule of thumb must fit on both figures (the rule ignores the sequence, the batch and
sharding, so alone it would let any of them grow without end): its need is the larger one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import NamedTuple

from trainmem.core.architecture import ModelSpec
from trainmem.core.estimator import (
    Estimate,
    device_peak_on,
    estimate,
    fits_within,
    within_correction,
)
from trainmem.core.fit import TIGHT_FRACTION, Budget
from trainmem.core.methods import METHODS
from trainmem.core.plan import Plan
from trainmem.core.precision import kbit_upcast
from trainmem.core.sharding import layout

SEARCH_LIMIT = 1 << 20  # tokens, for a model whose context is not known
BATCH_LIMIT = 4096  # examples per micro-batch: past any LLM fine-tune's
# Advice must save at least this share of the need: a change that saves less is no remedy.
MIN_SAVING_SHARE = 0.01


def _largest(fits: Callable[[int], bool], low: int, high: int) -> int | None:
    """Largest n in [low, high] with fits(n), assuming fits is monotone (true then false)."""
    if not fits(low):
        return None
    while low < high:
        mid = (low + high + 1) // 2
        if fits(mid):
            low = mid
        else:
            high = mid - 1
    return low


class Need(NamedTuple):
    bytes: int
    retried: bool  # the step runs within the GPU only by the allocator's cache retry


def need_on(plan: Plan, spec: ModelSpec, budget: Budget, exact: bool = True) -> Need:
    """What ``plan`` needs of ``budget``'s device: its device peak there, or for a plan judged
    on the rule of thumb the larger of the rule and the peak (both verdicts must pass). On a
    GPU the peak is the step as run within its memory (device_peak_on): over the GPU with
    memory to spare, it may still run by the allocator's cache retry, as the report's verdict
    counts it. ``exact=False``: the quick figure without the allocator's simulation, which
    searches use to find where to look before they settle the answer exactly."""
    if exact and budget.kind == "gpu" and not plan.rule_of_thumb:
        # within the GPU first: one simulation where the step runs there (by the cache retry
        # or without), the peak with memory to spare only where it fails
        quick = estimate(plan, spec, runtime="gpu", figures=budget.figures, simulate=False)
        within = fits_within(quick, budget.usable_bytes, budget.figures)
        if within is not None:
            return Need(within.bytes, within.retried)
    est = estimate(plan, spec, runtime=budget.kind, figures=budget.figures, simulate=exact)
    on = device_peak_on(est, budget.usable_bytes, budget.kind, budget.figures)
    if plan.rule_of_thumb:
        return Need(max(on.bytes, est.rule_of_thumb_bytes), on.retried)
    return Need(on.bytes, on.retried)


def need(plan: Plan, spec: ModelSpec, budget: Budget, exact: bool = True) -> int:
    """need_on's bytes."""
    return need_on(plan, spec, budget, exact).bytes


def _fits(plan: Plan, spec: ModelSpec, budget: Budget, exact: bool = True) -> bool:
    return _measure(plan, spec, budget, exact) <= budget.usable_bytes


def _measure(plan: Plan, spec: ModelSpec, budget: Budget, exact: bool = True) -> int:
    """``need``, but a plan too big before the allocator adds anything is not simulated:
    its lower bound, already over the budget, stands in."""
    if exact:
        low = _lower_bound(plan, spec, budget)
        if low > budget.usable_bytes:
            return low
    return need(plan, spec, budget, exact)


def _verdict(plan: Plan, spec: ModelSpec, budget: Budget) -> bool:
    """``_fits`` in one simulation where it makes two: a GPU step that fails within the GPU
    does not fit, whatever it needs with memory to spare (need_on's second simulation, which
    only a search's guess reads). A failing probe of a search cost 55 ms more for a 70B plan."""
    if budget.kind != "gpu" or plan.rule_of_thumb or within_correction(budget.figures) is None:
        return _fits(plan, spec, budget)
    quick = estimate(plan, spec, runtime="gpu", figures=budget.figures, simulate=False)
    if _lower_bound(plan, spec, budget, quick) > budget.usable_bytes:
        return False
    return fits_within(quick, budget.usable_bytes, budget.figures) is not None


Measure = Callable[[int, bool], int]
Verdict = Callable[[int], bool]


def _probes(plan: Plan, spec: ModelSpec, budget: Budget, field: str) -> tuple[Measure, Verdict]:
    """What a search over ``field`` reads of ``plan`` with ``field`` set to n: its need
    (``_measure``) and whether it fits (``_verdict``)."""

    def at(n: int) -> Plan:
        return replace(plan, **{field: n})  # type: ignore[arg-type]

    return (
        lambda n, exact: _measure(at(n), spec, budget, exact),
        lambda n: _verdict(at(n), spec, budget),
    )


def _lower_bound(plan: Plan, spec: ModelSpec, budget: Budget, quick: Estimate | None = None) -> int:
    """The need whatever the allocator reserves, without simulating it: the tensors' peak
    and the context (the reserve is never negative). ``quick``: the plan's quick estimate on
    ``budget``, where the caller has it already."""
    est = quick
    if est is None:
        est = estimate(plan, spec, runtime=budget.kind, figures=budget.figures, simulate=False)
    low = est.allocated_bytes + est.component("CUDA context") + est.component("NCCL buffers")
    return max(low, est.rule_of_thumb_bytes) if plan.rule_of_thumb else low


def _surely_too_big(plan: Plan, spec: ModelSpec, budget: Budget) -> bool:
    return _lower_bound(plan, spec, budget) > budget.usable_bytes


def _search(
    measure: Measure,
    usable: int,
    low: int,
    high: int,
    largest: bool,
    first: int | None = None,
    verdict: Verdict | None = None,
) -> int | None:
    """The largest (or smallest) n in [low, high] whose exact need, ``measure(n, True)``,
    fits ``usable``: an n that fits beside one that does not. Guessed on the quick figure,
    ``measure(n, False)``, plus the difference of the exact need from it (the allocator's
    few percent, smooth in n: a secant through the last two n simulated), so the guesses
    close in on the answer in a few simulations; where two guesses fail to halve the
    bracket, one bisection step.

    The need grows with n (shrinks, for a smallest) but for the allocator's packing, which
    is not monotone (tests/core/test_step_events.py): a few sizes can fit beyond one that
    does not. ``first``, the plan's own n, is tried first, so the answer always agrees with
    the plan's verdict (its simulation is the report's, already made). ``verdict(n)``, where
    given, is ``measure(n, True) <= usable`` by fewer simulations: the exact need is then
    measured only where a guess reads it."""
    if not largest:  # the smallest n is the largest -n
        found = _search(
            lambda n, exact: measure(-n, exact),
            usable,
            -high,
            -low,
            True,
            None if first is None else -first,
            None if verdict is None else lambda n: verdict(-n),
        )
        return None if found is None else -found
    exact: dict[int, int] = {}
    off: dict[int, int] = {}  # exact less quick need, where simulated
    probed: list[int] = []  # the n simulated, in order
    yes: int | None = None  # the largest n known to fit
    no: int | None = None  # the smallest n known not to

    def need(n: int) -> int:
        if n not in exact:
            exact[n] = measure(n, True)
        return exact[n]

    def offset(n: int) -> int:
        if n not in off:
            off[n] = need(n) - measure(n, False)
        return off[n]

    def fits(n: int) -> bool:
        nonlocal yes, no
        if need(n) <= usable if verdict is None or n in exact else verdict(n):
            yes = n if yes is None else max(yes, n)
            return True
        no = n if no is None else min(no, n)
        return False

    def settled() -> bool:
        return yes == high or no == low or (yes is not None and no == yes + 1)

    def guessed(m: int) -> float:
        """The quick need at m plus the allocator's share, on the line through the last two
        n simulated (a secant: the share changes slowly with n, so near the answer that
        line is close; constant after one)."""
        *_, a, b = [probed[0], *probed]
        share = offset(b) if a == b else offset(b) + (offset(b) - offset(a)) * (m - b) / (b - a)
        return measure(m, False) + share

    # None on the quick figure: most likely none fits, which one simulation at low settles.
    quick = _largest(lambda m: measure(m, False) <= usable, low, high)
    n = low if quick is None else quick
    if first is not None and low <= first <= high:
        n = first
    run, last = 0, None  # how many probes in a row fell on the same side
    flat, leap = False, 1  # a flat need met: leap up from the largest fit, then bisect
    fitting: set[int] = set()  # the needs of the n that fit
    widths: list[int] = []  # the bracket's width after each probe, once both sides are known
    while True:
        side = fits(n)
        probed.append(n)
        if settled():
            return yes
        run, last = (run + 1 if side == last else 1), side
        above = low if yes is None else yes + 1
        below = high if no is None else no - 1
        if yes is not None and no is not None:
            widths.append(no - yes)
        # Once two fits need the same bytes the need is flat there (the allocator's cache
        # retry runs such steps right at the GPU's limit; the same segments serve a few more
        # tokens), and secants from a flat need creep up one n at a time: leap up from the
        # largest fit, twice as far each time, until one fails, then bisect to the end.
        if side:
            flat = flat or need(n) in fitting
            fitting.add(need(n))
        if flat:
            leap = leap * 2 if side and leap else 0
            n = min(above - 1 + leap, below) if leap else (above + below) // 2
            continue
        if len(widths) >= 3 and 2 * widths[-1] > widths[-3]:
            n = (above + below) // 2  # two guesses did not halve the bracket: bisect once
            widths.clear()
            continue
        guess = _largest(lambda m: guessed(m) <= usable, above, below)
        # guesses that keep falling on one side of the answer are pushed across it, twice as
        # far each time: a gallop where one side is not known yet, and the cure for regula
        # falsi's one-sided convergence where it is
        push = 0 if run < 2 else 2 ** (run - 2)
        n = above if guess is None else guess + (push if side else -push)
        n = max(above, min(below, n))


def seq_len_limit(spec: ModelSpec) -> int:
    """The longest sequence worth searching: the model's context when known."""
    return spec.context or SEARCH_LIMIT


def max_seq_len(plan: Plan, spec: ModelSpec, budget: Budget) -> int | None:
    """The longest sequence (up to the model's context) that fits."""
    measure, verdict = _probes(plan, spec, budget, "seq_len")
    return _search(
        measure,
        budget.usable_bytes,
        1,
        seq_len_limit(spec),
        largest=True,
        first=plan.seq_len,
        verdict=verdict,
    )


def max_batch(plan: Plan, spec: ModelSpec, budget: Budget) -> int | None:
    """The largest micro-batch (up to ``BATCH_LIMIT``) that fits."""
    measure, verdict = _probes(plan, spec, budget, "batch")
    return _search(
        measure,
        budget.usable_bytes,
        1,
        BATCH_LIMIT,
        largest=True,
        first=plan.batch,
        verdict=verdict,
    )


def _model_id(spec: ModelSpec) -> str:
    return spec.hf_id or spec.name


def largest_model(
    plan: Plan, budget: Budget, candidates: Sequence[ModelSpec]
) -> dict[str, str | None]:
    """For each method, the candidate (e.g. the catalogue) with the most parameters that fits."""
    best: dict[str, str | None] = {}
    for method in METHODS:
        # the largest first, passing over those too big without simulating them
        ranked = sorted(candidates, key=lambda c: (-c.params, _model_id(c)))
        best[method] = next(
            (
                _model_id(c)
                for c in ranked
                if _fits(replace(plan, method=method, model=_model_id(c)), c, budget)
            ),
            None,
        )
    return best


# Each strategy and stage the fewest-GPUs answer covers, as plan changes.
SHARDINGS: dict[str, dict[str, object]] = {
    "ddp": {"strategy": "ddp", "zero": 0, "offload": "none"},
    "fsdp full-shard": {"strategy": "fsdp", "fsdp": "full-shard", "zero": 0, "offload": "none"},
    "fsdp shard-grad-op": {
        "strategy": "fsdp",
        "fsdp": "shard-grad-op",
        "zero": 0,
        "offload": "none",
    },
    "zero-1": {"strategy": "zero", "zero": 1, "offload": "none"},
    "zero-2": {"strategy": "zero", "zero": 2, "offload": "none"},
    "zero-3": {"strategy": "zero", "zero": 3, "offload": "none"},
    "zero-3 + optimizer offload": {"strategy": "zero", "zero": 3, "offload": "optimizer"},
    "zero-3 + params offload": {"strategy": "zero", "zero": 3, "offload": "params"},
}


def fewest_gpus(
    plan: Plan, spec: ModelSpec, budget: Budget, limit: int = 1024
) -> dict[str, int | None]:
    """For each strategy and stage, the fewest GPUs per node (on the plan's nodes) whose
    per-GPU peak fits the budget; None when even ``limit`` do not. Per-GPU memory never grows
    with more GPUs (tests/core/test_sharding.py), so a bisection finds it."""
    return _fewest(plan, spec, budget, "gpus", limit)


def fewest_nodes(
    plan: Plan, spec: ModelSpec, budget: Budget, limit: int = 256
) -> dict[str, int | None]:
    """For each strategy and stage, the fewest nodes of the plan's GPUs per node that fit:
    the answer in the units a cluster is booked in (nine GPUs of an 8-GPU node are two)."""
    return _fewest(plan, spec, budget, "nodes", limit)


def _fewest(
    plan: Plan, spec: ModelSpec, budget: Budget, field: str, limit: int
) -> dict[str, int | None]:
    out: dict[str, int | None] = {}
    for name, changes in SHARDINGS.items():
        sharded = replace(plan, **changes)  # type: ignore[arg-type]
        measure, verdict = _probes(sharded, spec, budget, field)
        # the plan's own strategy probes its own count: the answer agrees with its verdict
        first = getattr(plan, field) if sharded == plan else None
        out[name] = _smallest_count(measure, budget.usable_bytes, limit, first, verdict)
    return out


def _smallest_count(
    measure: Callable[[int, bool], int],
    usable: int,
    limit: int,
    first: int | None = None,
    verdict: Callable[[int], bool] | None = None,
) -> int | None:
    """The fewest GPUs (or nodes) in [1, limit] that fit. The per-GPU need falls with the
    count where sharding divides it but rises with NCCL's buffers (more peers), and never
    falls for DDP, so over the whole range it is not monotone and a bisection from the far
    end would call a plan that fits on 8 GPUs unfit because 1,024 do not. So it gallops up
    (1, 2, 4, ... and ``first``) on the quick figure to the first count that seems to fit,
    simulates from there up to the first that does (stopping where more would not need
    less), and searches below that one, where sharding's fall is what moves the need.
    ``verdict``: as _search's."""
    seen: dict[tuple[int, bool], int] = {}
    verdicts: dict[int, bool] = {}

    def cached(n: int, exact: bool) -> int:
        if (n, exact) not in seen:
            seen[n, exact] = measure(n, exact)
        return seen[n, exact]

    def fits(n: int) -> bool:
        if verdict is None or (n, True) in seen:
            return cached(n, True) <= usable
        if n not in verdicts:
            verdicts[n] = verdict(n)
        return verdicts[n]

    doubling = {min(1 << k, limit) for k in range(limit.bit_length() + 1)}
    probes = sorted(doubling | ({first} if first is not None and 1 <= first <= limit else set()))
    quick = [n for n in probes if cached(n, False) <= usable]
    # none seems to fit: the count that needs least is the one chance, settled by simulating
    start = probes.index(quick[0] if quick else min(probes, key=lambda n: cached(n, False)))
    # the plan's own count, when it fits (its simulation is the report's), bounds the answer
    known = first if first is not None and fits(first) else None
    for at, top in enumerate(probes[start:], start):
        if fits(top):
            break
        following = probes[at + 1] if at + 1 < len(probes) else None
        if following is None or (
            cached(following, False) >= cached(top, False) and (known is None or top > known)
        ):
            return None  # more would not need less (DDP, or NCCL outgrowing the sharding)
    own = first if first is not None and first <= top else None
    return _search(cached, usable, 1, top, largest=False, first=own, verdict=fits)


def _sharding_options(
    plan: Plan, spec: ModelSpec, budget: Budget
) -> list[tuple[str, dict[str, object], str | None]]:
    """The multi-GPU remedies: a higher stage, offload, more GPUs."""
    options: list[tuple[str, dict[str, object], str | None]] = []
    host = "needs host RAM for the offloaded states: see the node's RAM fit"
    lay = layout(plan)
    if lay.strategy in ("single", "ddp"):
        options.append(("shard with FSDP (full-shard)", {"strategy": "fsdp"}, None))
    if lay.strategy == "zero" and not lay.weights:
        up = plan.zero + 1
        options.append((f"raise the ZeRO stage to {up}", {"zero": up}, None))
    full_shard = lay.weights and lay.reshard_after_forward and lay.shard == lay.world
    if lay.strategy == "fsdp" and not full_shard:  # shard-grad-op, no-shard, hybrid-shard
        options.append(("use FSDP full-shard", {"fsdp": "full-shard", "fsdp_version": 2}, None))
    if lay.strategy == "zero" and lay.optimizer and plan.offload == "none":
        options.append(("offload the optimizer to host RAM", {"offload": "optimizer"}, host))
    if plan.offload != "params" and (
        lay.strategy == "fsdp" or (lay.strategy == "zero" and lay.weights)
    ):
        options.append(("offload parameters to host RAM", {"offload": "params"}, host))
    if lay.strategy in ("fsdp", "zero"):
        measure, verdict = _probes(plan, spec, budget, "gpus")
        more = _smallest_count(measure, budget.usable_bytes, 1024, verdict=verdict)
        if more is not None and more > plan.gpus:
            options.append((f"use {more} GPUs per node", {"gpus": more}, None))
    return options


@dataclass(frozen=True)
class Advice:
    action: str
    saves_bytes: int
    fits_after: bool
    warning: str | None = None
    changes: tuple[tuple[str, object], ...] = ()  # plan fields to apply it


def advice(
    plan: Plan,
    spec: ModelSpec,
    budget: Budget,
    candidates: Sequence[ModelSpec] = (),
) -> list[Advice]:
    """The guide's remedies, in its order, each re-estimated; empty when the plan fits with
    room to spare. ``candidates`` are the models a smaller one may be picked from (the
    catalogue). Only changes that lower the need by ``MIN_SAVING_SHARE`` or more are given."""
    plan = plan.validated()
    usable = budget.usable_bytes
    now = need(plan, spec, budget)
    if now <= usable * (1 - TIGHT_FRACTION):
        return []
    options: list[tuple[str, dict[str, object], str | None]] = []
    seq = max_seq_len(plan, spec, budget)
    if plan.seq_len > 1:
        target = seq if seq and seq < plan.seq_len else plan.seq_len // 2
        options.append(
            (
                f"reduce the maximum length to {target:,} tokens",
                {"seq_len": target},
                "check that typical examples still fit: below their length the model "
                "never sees the end of the answers it should learn",
            )
        )
    if plan.batch > 1:
        batch = max_batch(plan, spec, budget) or 1
        batch = min(batch, plan.batch - 1) if batch < plan.batch else plan.batch // 2
        options.append(
            (
                f"reduce the batch to {batch} (raise gradient accumulation to keep the "
                "effective batch)",
                {"batch": batch},
                None,
            )
        )
    if plan.tooling.engine == "mlx":  # mlx-lm's own remedies, none of the torch stacks'
        options += _mlx_options(plan, spec)
        return _re_estimated(plan, spec, budget, candidates, now, options)
    if not plan.training.quantized_base:
        options.append(("switch to QLoRA (4-bit base)", {"method": "qlora"}, None))
    if not plan.grad_ckpt:
        options.append(
            ("enable gradient checkpointing (~20-30% slower)", {"grad_ckpt": True}, None)
        )
    if plan.training.trains_base:
        options.append(("train a LoRA adapter instead of every weight", {"method": "lora"}, None))
    if plan.optimizer in ("adamw", "adamw-foreach") and plan.training.trains_base:
        options.append(("use 8-bit AdamW (bitsandbytes)", {"optimizer": "adamw-8bit"}, None))
    # Beyond the guide: what the training stack itself can change, at no cost in quality.
    # Whether the fp32 base is the stack's default or was read from a config (TRL's own
    # default comes back from --from as base_dtype fp32), loading it in 16 bits is the fix;
    # under plain fp32 training there is no 16-bit compute to load it for.
    if plan.fp32_base and plan.precision.endswith("-mixed"):
        options.append(
            (
                "load the frozen base in bf16 (TRL: model_init_kwargs dtype=bfloat16)",
                {"base_dtype": "16-bit"},
                None,
            )
        )
    # PEFT's k-bit preparation keeps every unquantized weight in fp32 (peft 0.22.0
    # utils/other.py:233-238): on a MoE model transformers 5 leaves the fused experts
    # unquantized, so it doubles most of the model. Where the script calls it, it can go.
    if kbit_upcast(plan) and plan.tooling.kbit_prep_in_script:
        options.append(
            (
                "skip prepare_model_for_kbit_training (call model.gradient_checkpointing_enable() "
                "and model.enable_input_require_grads() instead)",
                {"kbit_prep": False},
                "norms, embeddings and unquantized layers then stay in 16-bit, as TRL and "
                "Unsloth leave them",
            )
        )
    if plan.loss_kind == "standard" and plan.precision != "fp32":
        options.append(
            (
                "use a fused cross-entropy (Liger: use_liger_kernel; axolotl's Liger or Cut "
                "Cross-Entropy plugin)",
                {"loss": "fused"},
                None,
            )
        )
    # Unsloth (trainmem.core.stacks UNSLOTH): its checkpoint offload on its own stack, and for
    # a LoRA / QLoRA run on another single-GPU stack the whole of it (fused LoRA and loss).
    if plan.tooling.ckpt_offload_kind == "unsloth" and plan.grad_ckpt and not plan.ckpt_offload:
        options.append(
            (
                'use Unsloth\'s offloaded checkpointing (use_gradient_checkpointing="unsloth")',
                {"ckpt_offload": True},
                "needs pinned host RAM for every layer's input: see the node's RAM fit",
            )
        )
    elif plan.trains_adapter and plan.stack != "unsloth" and plan.world == 1:
        options.append(
            (
                'train with Unsloth (FastLanguageModel, use_gradient_checkpointing="unsloth")',
                {"stack": "unsloth", "grad_ckpt": True, "ckpt_offload": True, "loss": "auto"},
                "derived from Unsloth's source, not measured; its offload needs pinned host RAM",
            )
        )
    # The caching allocator's option (trainmem.core.device_peak): segments that grow in place
    # instead of new ones beside cached blocks no later request can reuse.
    if budget.kind == "gpu" and not plan.allocator.expandable_segments:
        conf = ",".join(x for x in (plan.alloc_conf.strip(), "expandable_segments:True") if x)
        options.append(
            (
                f"set PYTORCH_CUDA_ALLOC_CONF={conf} (fewer bytes reserved but unused)",
                {"alloc_conf": conf},
                None,
            )
        )
    if plan.world > 1 or layout(plan).strategy != "single":
        options += _sharding_options(plan, spec, budget)
    return _re_estimated(plan, spec, budget, candidates, now, options)


def _mlx_options(plan: Plan, spec: ModelSpec) -> list[tuple[str, dict[str, object], str | None]]:
    """mlx_lm.lora's own switches (mlx_lm/lora.py CONFIG_DEFAULTS, mlx-lm 0.32.2): a model
    MLX quantized, --grad-checkpoint, LoRA instead of a full fine-tune, fewer trained layers."""
    options: list[tuple[str, dict[str, object], str | None]] = []
    if not plan.training.quantized_base:
        options.append(
            ("train on a 4-bit model MLX quantized (mlx_lm.convert -q)", {"method": "qlora"}, None)
        )
    if not plan.grad_ckpt:
        options.append(
            ("enable checkpointing (mlx_lm.lora --grad-checkpoint)", {"grad_ckpt": True}, None)
        )
    if plan.training.trains_base:
        options.append(("fine-tune with LoRA (--fine-tune-type lora)", {"method": "lora"}, None))
    trained = spec.layers if plan.mlx_num_layers <= 0 else min(plan.mlx_num_layers, spec.layers)
    if trained > 8:
        fewer = max(8, trained // 2)
        options.append(
            (
                f"train the last {fewer} layers only (--num-layers {fewer})",
                {"mlx_num_layers": fewer},
                "fewer layers adapted: less for the fine-tune to change",
            )
        )
    return options


def _re_estimated(
    plan: Plan,
    spec: ModelSpec,
    budget: Budget,
    candidates: Sequence[ModelSpec],
    now: int,
    options: list[tuple[str, dict[str, object], str | None]],
) -> list[Advice]:
    """Each option re-estimated, then a smaller model; those saving too little dropped."""
    usable = budget.usable_bytes
    result = []
    for action, changes, warning in options:
        after = need(replace(plan, **changes), spec, budget)  # type: ignore[arg-type]
        result.append(Advice(action, now - after, after <= usable, warning, tuple(changes.items())))
    smaller = _smaller_model(plan, spec, budget, candidates)
    if smaller is not None:
        entry, after = smaller
        result.append(
            Advice(
                f"pick a smaller model, e.g. {entry}", now - after, True, None, (("model", entry),)
            )
        )
    return [a for a in result if a.saves_bytes >= MIN_SAVING_SHARE * now]


def _smaller_model(
    plan: Plan, spec: ModelSpec, budget: Budget, candidates: Sequence[ModelSpec]
) -> tuple[str, int] | None:
    """The largest candidate with fewer parameters than ``spec`` that fits this plan
    unchanged otherwise."""
    # the largest first, passing over those too big without simulating them
    smaller = sorted(
        (c for c in candidates if c.params < spec.params),
        key=lambda c: (-c.params, _model_id(c)),
    )
    for c in smaller:
        changed = replace(plan, model=_model_id(c))
        if _surely_too_big(changed, c, budget):
            continue
        after = need(changed, c, budget)
        if after <= budget.usable_bytes:
            return _model_id(c), after
    return None
