"""Per-rank memory of FSDP training steps, measured on a CPU (issue 10).

    .measure-venv/bin/python bench/measure/sharded.py --validate        # fake PG vs real gloo
    .measure-venv/bin/python bench/measure/sharded.py --out bench/results/measure-cpu-sharded.json
    .measure-venv/bin/python bench/measure/sharded.py --mp --validate \
        --out bench/results/measure-cpu-sharded-mp.json                 # mixed precision (issue 18)
    .measure-venv/bin/python bench/measure/sharded.py --fsdp1-mp --validate \
        --out bench/results/measure-cpu-sharded-fsdp1-mp.json           # FSDP1 MixedPrecision
    OUT=bench/results/measure-cpu-sharded-accelerate.json               # untied models, both
    .venv/bin/python bench/measure/sharded.py --untied --accelerate-layout --out $OUT
    .venv/bin/python bench/measure/sharded.py --untied --append --out $OUT   # layouts

Every rank of a data-parallel run does the same work on its own micro-batch, so one process
can stand for any rank: PyTorch's fake process group (torch.testing._internal.distributed.
fake_pg, as torchtitan's memory estimation used it) answers every collective at once, and
FakeTensorMode gives shapes without compute. ``--validate`` first runs the same small model
for real with 2 (and 4) gloo processes and compares each rank's peak with the fake run's.

Peaks come from the harness's StorageTracker (unique live storages, the quantity
``torch.cuda.max_memory_allocated`` reports), extended here for storages FSDP frees and
re-allocates with ``UntypedStorage.resize_`` (FSDP2 free_storage / alloc_storage,
_fsdp_param.py:1066-1074; FSDP1 _free_storage, torch/distributed/utils.py:184-206), which no
aten op shows. torch's FSDPMemTracker (torch/distributed/_tools/fsdp2_mem_tracker.py) patches
the same method; its peak is recorded beside ours in the validation runs as a second opinion.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from tracker import StorageTracker

from trainmem.core.plan import Plan

WORLDS = (1, 2, 4, 8, 16, 32, 64)
MODELS = ("SmolLM2-135M", "Qwen2.5-0.5B")  # llama and qwen2 (q/k/v biases), both tied
MOMENTS = False  # --untied: every record keeps its per-moment peaks (MomentTracker)


class ResizeAwareTracker(StorageTracker):
    """StorageTracker that also sees ``UntypedStorage.resize_`` (FSDP frees gathered
    parameters by resizing their storage to 0 and re-allocates them the same way)."""

    def _add(self, t: torch.Tensor, category: str, op: str) -> Any:
        # A DTensor's own storage has its global size; what this rank holds is the local
        # shard's (the optimizer's ops return DTensors).
        return super()._add(_local(t), category, op)

    def __enter__(self) -> ResizeAwareTracker:
        orig = torch.UntypedStorage.resize_
        tracker = self

        def resize_(st: torch.UntypedStorage, size: int) -> Any:
            out = orig(st, size)
            e = tracker._live.get(id(st))
            if e is not None:
                delta = int(size) - e.nbytes
                e.nbytes = int(size)
                tracker.live_bytes += delta
                tracker.by_category[e.category] += delta
                tracker._check_peak("UntypedStorage.resize_")
            return out

        self._orig_resize = orig
        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign,assignment]
        super().__enter__()
        return self

    def __exit__(self, *args: Any) -> None:
        super().__exit__(*args)
        torch.UntypedStorage.resize_ = self._orig_resize  # type: ignore[method-assign]


class MomentTracker(ResizeAwareTracker):
    """ResizeAwareTracker that also keeps the peak (and its categories) between FSDP2's own
    events: each FSDPParamGroup pre_forward / post_forward / pre_backward / post_backward /
    finalize_backward starts a new moment named "<phase>|<event> <unit>", where the unit is
    the param group's module (the tail group: its first module). In order of first
    occurrence, so ``moments`` reads as a timeline of the step."""

    EVENTS = ("pre_forward", "post_forward", "pre_backward", "post_backward", "finalize_backward")

    def __init__(self) -> None:
        super().__init__()
        self.event = "start"
        self.moments: dict[str, dict[str, Any]] = {}

    def _check_peak(self, op: str) -> None:
        super()._check_peak(op)
        key = f"{self.current_phase}|{self.event}"
        m = self.moments.get(key)
        if m is None or self.live_bytes > m["bytes"]:
            self.moments[key] = {
                "bytes": self.live_bytes,
                "op": op,
                "by_category": {k: v for k, v in self.by_category.items() if v},
            }

    def __enter__(self) -> MomentTracker:
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

        tracker = self
        self._orig_events = {e: getattr(FSDPParamGroup, e) for e in self.EVENTS}

        def patched(event: str, orig: Any) -> Any:
            def fn(group: Any, *args: Any, **kwargs: Any) -> Any:
                fqn = group._module_fqn or "<root>"
                tracker.event = f"{event} {fqn}"
                tracker._check_peak(event)
                return orig(group, *args, **kwargs)

            return fn

        for e, orig in self._orig_events.items():
            setattr(FSDPParamGroup, e, patched(e, orig))
        super().__enter__()
        return self

    def __exit__(self, *args: Any) -> None:
        from torch.distributed.fsdp._fully_shard._fsdp_param_group import FSDPParamGroup

        super().__exit__(*args)
        for e, orig in self._orig_events.items():
            setattr(FSDPParamGroup, e, orig)


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _register(tr: StorageTracker, model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    """What exists before the step, as local shards (a DTensor's own storage is empty)."""
    params = list(model.parameters())
    tr.register([_local(p) for p in params] + list(model.buffers()), "parameters")
    states = [
        _local(v) for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)
    ]
    tr.register(states, "optimizer")
    for p in params:
        if p.requires_grad:
            tr._hooks.append(p.register_post_accumulate_grad_hook(tr._grad_hook))


def _decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The units accelerate's TRANSFORMER_BASED_WRAP makes (_no_split_modules)."""
    return [m for m in model.modules() if type(m).__name__.endswith("DecoderLayer")]


def wrap(model: torch.nn.Module, plan: Plan, mesh: Any, layout: str = "manual") -> torch.nn.Module:
    """FSDP per decoder layer, then the root, as accelerate's fsdp2_prepare_model did up to
    1.13 (``layout="manual"``); ``layout="accelerate"``: accelerate's own
    fsdp2_prepare_model (accelerate_wrap)."""
    if layout == "accelerate":
        return accelerate_wrap(model, plan, mesh)
    if plan.fsdp_version == 2:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

        reshard = plan.fsdp == "full-shard"
        dtypes = {p.dtype for p in model.parameters()}
        # a LoRA unit mixes the 16-bit base with fp32 adapters: FSDP2 all-gathers one dtype,
        # so the adapters are gathered in bf16 and reduced in fp32 (accelerate sets this
        # policy from mixed_precision)
        mp = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if len(dtypes) > 1
            else MixedPrecisionPolicy()
        )
        if mixed_full(plan):
            mp = mixed_policy(plan)
        for layer in _decoder_layers(model):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        fully_shard(model, mesh=mesh, reshard_after_forward=reshard, mp_policy=mp)
        return model
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    kinds = {type(m) for m in _decoder_layers(model)}
    strategy = {
        "full-shard": ShardingStrategy.FULL_SHARD,
        "shard-grad-op": ShardingStrategy.SHARD_GRAD_OP,
    }[plan.fsdp]
    from torch.distributed.fsdp import BackwardPrefetch

    # the plan's BackwardPrefetch (Plan.prefetches_backward: auto is the stack's)
    prefetch = BackwardPrefetch.BACKWARD_PRE if plan.prefetches_backward else None
    # device_id=cpu: without it torch 2.13 refuses a CPU-only process
    # (_init_utils.py _init_device_handle); given, the flat parameters, their shards and the
    # collectives' buffers are what they are on a GPU (the CPU's device handle runs the
    # same code, its streams being no-ops).
    return FullyShardedDataParallel(
        model,
        auto_wrap_policy=ModuleWrapPolicy(kinds),
        sharding_strategy=strategy,
        mixed_precision=fsdp1_mixed(plan) if mixed_full(plan) else None,
        use_orig_params=True,
        device_mesh=mesh,
        device_id=torch.device("cpu"),
        backward_prefetch=prefetch,
    )


def accelerate_wrap(model: torch.nn.Module, plan: Plan, mesh: Any) -> torch.nn.Module:
    """The installed accelerate's own ``fsdp2_prepare_model`` (accelerate/utils/fsdp_utils.py;
    1.16.0: one unit per decoder layer, then for UNTIED embeddings the input embedding as its
    own unit with the plugin's reshard_after_forward, then a "tail" unit [final norm, lm_head]
    (tied: [norm, embed_tokens, lm_head]) with reshard_after_forward=False, then the root with
    torch's default (None: not resharded), which then holds no parameters).

    It is called with a stand-in for the Accelerator carrying exactly what it reads: a real
    FullyShardedDataParallelPlugin(fsdp_version=2, TRANSFORMER_BASED_WRAP,
    reshard_after_forward = full-shard), given set_mixed_precision("bf16") under bf16-mixed as
    AcceleratorState does (state.py: param and reduce dtype bf16; 1.16 sets no output_dtype),
    or a user-set MixedPrecisionPolicy with an fp32 reduce (plan reduce_dtype fp32);
    mixed_precision "no" for a plan in pure bf16 (the model is then wrapped in its own dtype,
    MixedPrecisionPolicy()). The process group is the caller's (fake or gloo) 1-D mesh.
    _prepare_fsdp2 (accelerator.py) adds no autocast around the forward (step_plan)."""
    from types import SimpleNamespace

    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if plan.fsdp_version != 2:
        raise ValueError("the accelerate layout is FSDP2's (fsdp2_prepare_model)")
    plugin = FullyShardedDataParallelPlugin(
        fsdp_version=2,
        reshard_after_forward=plan.fsdp == "full-shard",
        auto_wrap_policy="transformer_based_wrap",
    )
    mixed = "bf16" if mixed_full(plan) else "no"
    if mixed != "no":
        plugin.set_mixed_precision(mixed)  # what AcceleratorState.__init__ calls
        if plan.reduce_dtype == "fp32":
            plugin.mixed_precision_policy = MixedPrecisionPolicy(
                param_dtype=torch.bfloat16, reduce_dtype=torch.float32
            )
    dims = ("dp_shard",)
    acc = SimpleNamespace(
        state=SimpleNamespace(fsdp_plugin=plugin),
        torch_device_mesh={dims: mesh},
        parallelism_config=SimpleNamespace(fsdp_dim_names=dims),
        mixed_precision=mixed,
        is_main_process=True,
        device=torch.device("cpu"),
    )
    plugin.set_auto_wrap_policy(model)  # _prepare_fsdp2 does this first
    return fsdp2_prepare_model(acc, model)


def fsdp2_units(model: torch.nn.Module) -> list[dict[str, Any]]:
    """The FSDP2 units made: modules, parameters (elements, unsharded), and
    reshard_after_forward (None: a unit with no parameters)."""
    from torch.distributed.fsdp import FSDPModule

    names = {m: n or "<root>" for n, m in model.named_modules()}
    groups: dict[int, dict[str, Any]] = {}
    for m in model.modules():
        if not isinstance(m, FSDPModule):
            continue
        group = m._get_fsdp_state()._fsdp_param_group
        key = id(group) if group is not None else id(m)
        u = groups.setdefault(key, {"modules": [], "params": 0, "reshard_after_forward": None})
        u["modules"].append(names[m])
        if group is not None and not u["params"]:
            u["params"] = sum(fp.sharded_param.numel() for fp in group.fsdp_params)
            u["reshard_after_forward"] = group.post_forward_mesh_info is not None
    units = list(groups.values())
    layers = [u for u in units if len(u["modules"]) == 1 and "layers." in u["modules"][0]]
    rest = [u for u in units if u not in layers]
    if layers:  # the decoder layers as one line
        rest.append({**layers[0], "modules": [f"{len(layers)} decoder layers, each"]})
    return rest


def mixed_full(plan: Plan) -> bool:
    """A full fine-tune under FSDP mixed precision (fp32 master, 16-bit compute)."""
    return plan.method == "full" and plan.precision == "bf16-mixed"


def mixed_policy(plan: Plan) -> Any:
    """FSDP2's MixedPrecisionPolicy as the frameworks build it (torch 2.13
    _fully_shard/_fsdp_api.py): reduce in fp32 as PyTorch's FSDP2 recipe and torchtitan do,
    or what accelerate 1.15 builds from mixed_precision="bf16"
    (accelerate/utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision:
    param, reduce and output dtype all bf16)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy

    bf16 = torch.bfloat16
    if plan.reduce_dtype == "fp32":
        return MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=torch.float32)
    return MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=bf16, output_dtype=bf16)


def fsdp1_mixed(plan: Plan) -> Any:
    """FSDP1's MixedPrecision as accelerate 1.15 builds it from mixed_precision="bf16"
    (utils/dataclasses.py FullyShardedDataParallelPlugin.set_mixed_precision: param, reduce
    and buffer dtype bf16), or with an fp32 reduce (torch 2.13 fsdp/api.py MixedPrecision)."""
    from torch.distributed.fsdp import MixedPrecision

    bf16 = torch.bfloat16
    reduce = torch.float32 if plan.reduce_dtype == "fp32" else bf16
    return MixedPrecision(param_dtype=bf16, reduce_dtype=reduce, buffer_dtype=bf16)


def step_plan(plan: Plan) -> Plan:
    """The plan train_step runs. Under FSDP2 mixed precision the policy casts (bf16 units,
    bf16 activations) and nothing autocasts: accelerate 1.15's _prepare_fsdp2
    (accelerator.py) never calls prepare_model, which is where the forward gets wrapped in
    autocast and convert_outputs_to_fp32. The model itself is built in fp32 (harness.build
    under bf16-mixed), as fsdp2_prepare_model upcasts trainable parameters to fp32."""
    fsdp2_mixed = mixed_full(plan) and plan.fsdp_version == 2
    return dataclasses.replace(plan, precision="fp32") if fsdp2_mixed else plan


def sharded_plan(
    model: str,
    method: str,
    world: int,
    fsdp: str,
    version: int,
    gc_on: bool,
    precision: str = "bf16",
    reduce: str = "auto",
    seq_len: int = 256,
    batch: int = 1,
) -> Plan:
    base = harness.measured_plan(method, precision, "adamw", seq_len, batch, gc_on)
    return dataclasses.replace(
        base,
        model=model,
        strategy="fsdp",
        gpus=world,
        fsdp=fsdp,
        fsdp_version=version,
        reduce_dtype=reduce,
    )


def measure(
    entry: dict[str, Any], plan: Plan, fake: bool, rank: int = 0, layout: str = "manual"
) -> dict[str, Any]:
    """One warm-up step, then one tracked step, on this process's rank."""
    from torch.distributed.device_mesh import init_device_mesh

    torch.manual_seed(rank)
    mesh = init_device_mesh("cpu", (plan.world,))  # outside FakeTensorMode (it reads ranks)
    ctx: Any = contextlib.nullcontext()
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode

        ctx = FakeTensorMode()
    with ctx:
        with harness._fake_safe_module_apply() if fake else contextlib.nullcontext():
            model, _ = harness.build(entry, plan, "cpu")
        model = wrap(model, plan, mesh, layout)
        units = fsdp2_units(model) if plan.fsdp_version == 2 else None
        opt = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=1e-5, fused=True
        )
        ids = torch.randint(0, int(entry["vocab_size"]), (plan.batch, plan.seq_len))
        run = step_plan(plan)
        harness.train_step(model, opt, ids, run, "cpu")
        gc.collect()
        tr = MomentTracker() if layout != "manual" or MOMENTS else ResizeAwareTracker()
        _register(tr, model, opt)
        tr.register([ids], "other")
        with tr:
            harness.train_step(model, opt, ids, run, "cpu", tr)
        s = tr.summary()
        out = {
            "peak_allocated_bytes": s["peak_bytes"],
            "peak_phase": s["peak_phase"],
            "by_category_at_peak": s["by_category_at_peak"],
            "start_bytes": s["start_bytes"],
            "phase_peaks": s["phase_peaks"],
            "execution": "fake" if fake else "real",
            "tracker": "StorageTracker + UntypedStorage.resize_",
        }
        if layout != "manual" or MOMENTS:
            out["layout"] = layout
            out["fsdp_units"] = units
        if isinstance(tr, MomentTracker):
            out["phase_end_bytes"] = s.get("phase_end_bytes")
            out["peak_op"] = s.get("peak_op")
            out["moments"] = tr.moments
        if plan.fsdp_version == 2 and os.environ.get("SHARDED_FSDP_MEM_TRACKER"):
            from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker

            fmt = FSDPMemTracker(model, opt)
            fmt.track_inputs((ids,))
            with fmt:
                harness.train_step(model, opt, ids, run, "cpu")
            peak = fmt.get_tracker_snapshot("peak")
            out["fsdp_mem_tracker_peak_bytes"] = max(v["Total"] for v in peak.values())
        del model, opt, ids, tr
    return out


def _fake_run(
    entry: dict[str, Any], plan: Plan, gloo_clone: bool = False, layout: str = "manual"
) -> dict[str, Any]:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=plan.world)
    try:
        with _gloo_input_clone() if gloo_clone else contextlib.nullcontext():
            return measure(entry, plan, fake=True, layout=layout)
    finally:
        dist.destroy_process_group()


@contextlib.contextmanager
def _gloo_input_clone() -> Any:
    """What a real gloo run adds: ProcessGroupGloo::reduce_scatter_tensor_coalesced
    (torch/csrc/distributed/c10d/ProcessGroupGloo.cpp) all-reduces a clone of the whole
    reduce-scatter input (``inputTensors[i].clone()``), alive while the collective runs. NCCL
    reduce-scatters without it, so the records are the fake runs without this; the
    validation runs it to show the fake process group matches gloo otherwise."""
    orig = dist.reduce_scatter_single

    def clone_first(output: torch.Tensor, input: torch.Tensor, **kw: Any) -> Any:
        return orig(output=output, input=input.clone(), **kw)

    dist.reduce_scatter_single = clone_first  # type: ignore[assignment]
    try:
        yield
    finally:
        dist.reduce_scatter_single = orig


def _real_rank(
    rank: int,
    world: int,
    entry: dict[str, Any],
    plan_d: dict[str, Any],
    path: str,
    layout: str = "manual",
) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}.store", rank=rank, world_size=world)
    try:
        result = measure(entry, Plan(**plan_d), fake=False, rank=rank, layout=layout)
    except Exception as e:  # recorded, not hidden
        result = {"error": f"{type(e).__name__}: {e}", "tb": traceback.format_exc()[-1500:]}
    Path(f"{path}.{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def real_run(entry: dict[str, Any], plan: Plan, layout: str = "manual") -> list[dict[str, Any]]:
    """``plan.world`` gloo processes on this CPU, each tracking its own peak."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/run"
        mp.spawn(
            _real_rank,
            args=(plan.world, entry, plan.to_dict(), path, layout),
            nprocs=plan.world,
            join=True,
        )
        return [json.loads(Path(f"{path}.{r}.json").read_text()) for r in range(plan.world)]


def record(
    entry: dict[str, Any],
    plan: Plan,
    measured: dict[str, Any],
    seconds: float,
    layout: str = "manual",
) -> dict[str, Any]:
    mixed = f"/{plan.precision}-reduce-{plan.reduce_dtype}" if mixed_full(plan) else ""
    key = (
        f"{plan.method}{mixed}/fsdp{plan.fsdp_version}-{plan.fsdp}/w{plan.world}/"
        f"s{plan.seq_len}/b{plan.batch}/{'gc' if plan.grad_ckpt else 'nogc'}"
    )
    if layout == "accelerate":  # ids of the hand-made layout's records stay as they were
        key += "/accelerate-layout"
    return {
        "id": f"{entry['name']}/{key}/{measured.get('execution', '')}",
        "model": harness.model_record(entry),
        "plan": plan.to_dict(),
        "measured": measured,
        "seconds": round(seconds, 3),
        **({"layout": layout} if layout != "manual" else {}),
    }


def small(entry: dict[str, Any], layers: int) -> dict[str, Any]:
    """The same architecture with fewer layers (a real run must fit this CPU's time)."""
    return {**entry, "name": f"{entry['name']}-{layers}L", "num_hidden_layers": layers}


def validation_plans(name: str, mp: bool, fsdp1_mp: bool = False) -> list[Plan]:
    """The plans checked against real gloo processes first."""
    if fsdp1_mp:
        return [
            sharded_plan(name, "full", w, "full-shard", 1, True, "bf16-mixed", r)
            for w, r in ((2, "16-bit"), (2, "fp32"), (4, "16-bit"))
        ]
    if mp:
        return [
            sharded_plan(name, "full", w, "full-shard", 2, True, "bf16-mixed", r)
            for w, r in ((2, "fp32"), (2, "16-bit"), (4, "fp32"))
        ]
    return [
        sharded_plan(name, method, world, "full-shard", 2, True)
        for world, method in ((2, "full"), (2, "lora"), (4, "full"))
    ]


def validate(
    models: dict[str, dict[str, Any]], mp: bool = False, fsdp1_mp: bool = False
) -> list[dict[str, Any]]:
    os.environ["SHARDED_FSDP_MEM_TRACKER"] = "1"
    out = []
    entry = small(models["SmolLM2-135M"], 4)
    for plan in validation_plans(entry["name"], mp, fsdp1_mp):
        world, method = plan.world, plan.method
        t0 = time.perf_counter()
        ranks = real_run(entry, plan)
        fake = _fake_run(entry, plan)
        rec = record(entry, plan, fake, time.perf_counter() - t0)
        rec["measured"]["real_ranks"] = ranks
        if mp or fsdp1_mp:
            clone = _fake_run(entry, plan, gloo_clone=True)["peak_allocated_bytes"]
            rec["measured"]["fake_with_gloo_input_clone_bytes"] = clone
        out.append(rec)
        peaks = [r.get("peak_allocated_bytes") for r in ranks]
        print(
            world,
            method,
            "real per rank",
            peaks,
            "fake",
            fake["peak_allocated_bytes"],
            "FSDPMemTracker fake",
            fake.get("fsdp_mem_tracker_peak_bytes"),
            "fake + gloo's input clone",
            rec["measured"].get("fake_with_gloo_input_clone_bytes"),
            flush=True,
        )
    os.environ.pop("SHARDED_FSDP_MEM_TRACKER")  # the grid runs one tracker
    return out


def grid(models: dict[str, dict[str, Any]], quick: bool) -> list[tuple[dict[str, Any], Plan]]:
    """Every world size for full and LoRA with checkpointing and full shard; checkpointing
    off and no-reshard (reshard_after_forward=False) at 2, 8 and 64 ranks."""
    cases = []
    worlds = (1, 8, 64) if quick else WORLDS
    for name in MODELS:
        for world in worlds:
            for method in ("full", "lora"):
                variants = [("full-shard", True)]
                if world in (2, 8, 64):
                    variants += [("full-shard", False), ("shard-grad-op", True)]
                for fsdp, gc_on in variants:
                    cases.append((models[name], sharded_plan(name, method, world, fsdp, 2, gc_on)))
    for world in (2, 8):  # FSDP1 in the plan's precision
        plan = sharded_plan("SmolLM2-135M", "full", world, "full-shard", 1, True)
        cases.append((models["SmolLM2-135M"], plan))
    return cases


MP_WORLDS = (1, 2, 8, 64)


def mp_grid(models: dict[str, dict[str, Any]], quick: bool) -> list[tuple[dict[str, Any], Plan]]:
    """Full fine-tuning under FSDP2 mixed precision (fp32 master, bf16 units): reduce in fp32
    and in bf16, with and without checkpointing, both models; 4, 16 and 32 ranks too for
    fp32 reduce with checkpointing; 2048 tokens at 8 ranks, where activations set the peak
    (at 256 the lm_head's backward does, checkpointing or not). FSDP1's MixedPrecision is
    fsdp1_mp_grid's."""
    cases = []
    worlds = (1, 64) if quick else MP_WORLDS
    for name in MODELS:
        for world in worlds:
            for reduce in ("fp32", "16-bit"):
                for gc_on in (True, False):
                    plan = sharded_plan(
                        name, "full", world, "full-shard", 2, gc_on, "bf16-mixed", reduce
                    )
                    cases.append((models[name], plan))
        if not quick:
            for world in (4, 16, 32):
                plan = sharded_plan(
                    name, "full", world, "full-shard", 2, True, "bf16-mixed", "fp32"
                )
                cases.append((models[name], plan))
            for gc_on in (True, False):
                plan = sharded_plan(
                    name, "full", 8, "full-shard", 2, gc_on, "bf16-mixed", "fp32", 2048
                )
                cases.append((models[name], plan))
    return cases


FSDP1_MP_WORLDS = (1, 2, 4, 8, 16, 64)


def fsdp1_mp_grid(
    models: dict[str, dict[str, Any]], quick: bool
) -> list[tuple[dict[str, Any], Plan]]:
    """Full fine-tuning under FSDP1's MixedPrecision (bf16 units over fp32 flat parameters,
    the forward under autocast as accelerate's prepare_model wraps it): reduce in bf16
    (accelerate's) and fp32, with and without checkpointing, both models; 2048 tokens at 8
    ranks, where a layer's backward (and its gradient's reduce) sets the peak."""
    cases = []
    for name in MODELS:
        for world, seq in [(w, 256) for w in ((2,) if quick else FSDP1_MP_WORLDS)] + [(8, 2048)]:
            for reduce in ("16-bit", "fp32"):
                for gc_on in (True, False):
                    plan = sharded_plan(
                        name, "full", world, "full-shard", 1, gc_on, "bf16-mixed", reduce, seq
                    )
                    cases.append((models[name], plan))
    return cases


def untied(entry: dict[str, Any]) -> dict[str, Any]:
    """The same architecture with an lm_head of its own (tie_word_embeddings=False)."""
    return {**entry, "name": f"{entry['name']}-untied", "tie_word_embeddings": False}


UNTIED_WORLDS = (2, 4, 8)


def untied_grid(
    models: dict[str, dict[str, Any]], quick: bool
) -> list[tuple[dict[str, Any], Plan]]:
    """Untied embeddings, where accelerate >= 1.14's fsdp2_prepare_model makes the input
    embedding a unit of its own and [final norm, lm_head] a tail unit (--accelerate-layout):
    SmolLM2-135M with tie_word_embeddings=False, and Llama-3.1-8B cut to 4 layers (its real
    4096 x 128256 embedding and lm_head, untied). Full fine-tuning, FSDP2 full-shard and
    shard-grad-op, pure bf16 and bf16-mixed (fp32 master, bf16 units, reduce in bf16 as
    accelerate sets it), checkpointing on and off, 2, 4 and 8 ranks, 256 tokens x 2; one
    2048 x 2 case per model (8 ranks, full-shard, bf16-mixed, checkpointing); the whole
    Llama-3.1-8B at 8 ranks (256 and 2048 x 2); the two tied models as controls."""
    cases = []
    entries = [untied(models["SmolLM2-135M"]), small(models["Llama-3.1-8B"], 4)]
    worlds = (8,) if quick else UNTIED_WORLDS
    for entry in entries:
        for world in worlds:
            for fsdp in ("full-shard", "shard-grad-op"):
                for precision in ("bf16", "bf16-mixed"):
                    for gc_on in (True, False):
                        reduce = "16-bit" if precision == "bf16-mixed" else "auto"
                        plan = sharded_plan(
                            entry["name"],
                            "full",
                            world,
                            fsdp,
                            2,
                            gc_on,
                            precision,
                            reduce,
                            256,
                            2,
                        )
                        cases.append((entry, plan))
        plan = sharded_plan(
            entry["name"], "full", 8, "full-shard", 2, True, "bf16-mixed", "16-bit", 2048, 2
        )
        cases.append((entry, plan))
    # the whole Llama-3.1-8B (32 layers) at 8 ranks: the plan the layout change was noticed on
    for seq in (256, 2048):
        plan = sharded_plan(
            "Llama-3.1-8B", "full", 8, "full-shard", 2, True, "bf16-mixed", "16-bit", seq, 2
        )
        cases.append((models["Llama-3.1-8B"], plan))
    # tied controls (accelerate's tail is then [norm, embed_tokens, lm_head], not resharded)
    for name in MODELS:
        for fsdp in ("full-shard", "shard-grad-op"):
            plan = sharded_plan(name, "full", 8, fsdp, 2, True, "bf16-mixed", "16-bit", 256, 2)
            cases.append((models[name], plan))
    return cases


def write(path: Path | None, records: list[dict[str, Any]], earlier: str = "") -> None:
    """The whole file, rewritten after each record (a long run keeps what it measured).
    ``earlier``: the command(s) of the records kept by --append."""
    if path is None:
        return
    command = f"{os.path.relpath(sys.executable)} bench/measure/sharded.py " + " ".join(
        sys.argv[1:]
    )
    notes = (
        "FSDP per rank on a CPU: fake process group + FakeTensorMode, one process "
        "standing for any rank; validated against real gloo runs (records with real_ranks)"
    )
    if MOMENTS:
        notes += (
            "; untied embeddings: records with /accelerate-layout in their id are wrapped by "
            "the installed accelerate's fsdp2_prepare_model (embedding unit, [norm, lm_head] "
            "tail unit not resharded after forward, empty root), the others by layers + root "
            "as sharded.py always did; measured.moments = peak between FSDP2 events"
        )
    data = {
        "machine": {**harness.machine("cpu"), "torch_threads": 1},
        "versions": harness.versions(),
        "command": f"{earlier} && {command}" if earlier else command,
        "notes": notes,
        "records": records,
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--validate", action="store_true")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="")
    ap.add_argument("--mp", action="store_true", help="the mixed-precision grid (issue 18)")
    ap.add_argument("--fsdp1-mp", action="store_true", help="FSDP1 MixedPrecision (issue 18)")
    ap.add_argument(
        "--untied", action="store_true", help="untied-embedding models (accelerate's layout)"
    )
    ap.add_argument(
        "--accelerate-layout",
        action="store_true",
        help="wrap with the installed accelerate's fsdp2_prepare_model (>= 1.14: embedding "
        "and [norm, lm_head] units of their own when untied) instead of layers + root",
    )
    ap.add_argument("--append", action="store_true", help="keep the records already in --out")
    args = ap.parse_args()
    global MOMENTS
    MOMENTS = args.untied
    layout = "accelerate" if args.accelerate_layout else "manual"
    torch.set_num_threads(1)
    models = harness.load_models()
    records = validate(models, args.mp, args.fsdp1_mp) if args.validate else []
    earlier = ""
    if args.append and args.out and args.out.exists():
        kept = json.loads(args.out.read_text())
        records, earlier = kept["records"] + records, kept.get("command", "")
    cases = (
        untied_grid
        if args.untied
        else fsdp1_mp_grid
        if args.fsdp1_mp
        else mp_grid
        if args.mp
        else grid
    )
    write(args.out, records, earlier)
    if not args.validate or args.out:
        for entry, plan in cases(models, args.quick):
            if args.only and args.only not in record(entry, plan, {}, 0, layout)["id"]:
                continue
            t0 = time.perf_counter()
            try:
                measured = _fake_run(entry, plan, layout=layout)
            except Exception as e:
                measured = {"error": f"{type(e).__name__}: {e}"[:1500], "execution": "fake"}
            rec = record(entry, plan, measured, time.perf_counter() - t0, layout)
            records.append(rec)
            write(args.out, records, earlier)
            print(
                rec["id"], measured.get("peak_allocated_bytes", measured.get("error")), flush=True
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
