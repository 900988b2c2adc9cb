"""Per-rank memory of FSDP training steps, measured on a CPU (issue 10).

    .measure-venv/bin/python bench/measure/sharded.py --validate        # fake PG vs real gloo
    .measure-venv/bin/python bench/measure/sharded.py --out bench/results/measure-cpu-sharded.json
    .measure-venv/bin/python bench/measure/sharded.py --mp --validate \
        --out bench/results/measure-cpu-sharded-mp.json                 # mixed precision (issue 18)
    .measure-venv/bin/python bench/measure/sharded.py --fsdp1-mp --validate \
        --out bench/results/measure-cpu-sharded-fsdp1-mp.json           # FSDP1 MixedPrecision

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


def wrap(model: torch.nn.Module, plan: Plan, mesh: Any) -> torch.nn.Module:
    """FSDP per decoder layer, then the root, as accelerate's fsdp2_prepare_model does."""
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
    )


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
) -> Plan:
    base = harness.measured_plan(method, precision, "adamw", seq_len, 1, gc_on)
    return dataclasses.replace(
        base,
        model=model,
        strategy="fsdp",
        gpus=world,
        fsdp=fsdp,
        fsdp_version=version,
        reduce_dtype=reduce,
    )


def measure(entry: dict[str, Any], plan: Plan, fake: bool, rank: int = 0) -> dict[str, Any]:
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
        model = wrap(model, plan, mesh)
        opt = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad], lr=1e-5, fused=True
        )
        ids = torch.randint(0, int(entry["vocab_size"]), (plan.batch, plan.seq_len))
        run = step_plan(plan)
        harness.train_step(model, opt, ids, run, "cpu")
        gc.collect()
        tr = ResizeAwareTracker()
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


def _fake_run(entry: dict[str, Any], plan: Plan, gloo_clone: bool = False) -> dict[str, Any]:
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=plan.world)
    try:
        with _gloo_input_clone() if gloo_clone else contextlib.nullcontext():
            return measure(entry, plan, fake=True)
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
    rank: int, world: int, entry: dict[str, Any], plan_d: dict[str, Any], path: str
) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{path}.store", rank=rank, world_size=world)
    try:
        result = measure(entry, Plan(**plan_d), fake=False, rank=rank)
    except Exception as e:  # recorded, not hidden
        result = {"error": f"{type(e).__name__}: {e}", "tb": traceback.format_exc()[-1500:]}
    Path(f"{path}.{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def real_run(entry: dict[str, Any], plan: Plan) -> list[dict[str, Any]]:
    """``plan.world`` gloo processes on this CPU, each tracking its own peak."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/run"
        mp.spawn(
            _real_rank,
            args=(plan.world, entry, plan.to_dict(), path),
            nprocs=plan.world,
            join=True,
        )
        return [json.loads(Path(f"{path}.{r}.json").read_text()) for r in range(plan.world)]


def record(
    entry: dict[str, Any], plan: Plan, measured: dict[str, Any], seconds: float
) -> dict[str, Any]:
    mixed = f"/{plan.precision}-reduce-{plan.reduce_dtype}" if mixed_full(plan) else ""
    key = (
        f"{plan.method}{mixed}/fsdp{plan.fsdp_version}-{plan.fsdp}/w{plan.world}/"
        f"s{plan.seq_len}/b{plan.batch}/{'gc' if plan.grad_ckpt else 'nogc'}"
    )
    return {
        "id": f"{entry['name']}/{key}/{measured.get('execution', '')}",
        "model": harness.model_record(entry),
        "plan": plan.to_dict(),
        "measured": measured,
        "seconds": round(seconds, 3),
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


def write(path: Path | None, records: list[dict[str, Any]]) -> None:
    """The whole file, rewritten after each record (a long run keeps what it measured)."""
    if path is None:
        return
    data = {
        "machine": {**harness.machine("cpu"), "torch_threads": 1},
        "versions": harness.versions(),
        "command": f"{os.path.relpath(sys.executable)} bench/measure/sharded.py "
        + " ".join(sys.argv[1:]),
        "notes": "FSDP per rank on a CPU: fake process group + FakeTensorMode, one process "
        "standing for any rank; validated against real gloo runs (records with real_ranks)",
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
    args = ap.parse_args()
    torch.set_num_threads(1)
    models = harness.load_models()
    records = validate(models, args.mp, args.fsdp1_mp) if args.validate else []
    cases = fsdp1_mp_grid if args.fsdp1_mp else mp_grid if args.mp else grid
    write(args.out, records)
    if not args.validate or args.out:
        for entry, plan in cases(models, args.quick):
            if args.only and args.only not in record(entry, plan, {}, 0)["id"]:
                continue
            t0 = time.perf_counter()
            try:
                measured = _fake_run(entry, plan)
            except Exception as e:
                measured = {"error": f"{type(e).__name__}: {e}"[:1500], "execution": "fake"}
            rec = record(entry, plan, measured, time.perf_counter() - t0)
            records.append(rec)
            write(args.out, records)
            print(
                rec["id"], measured.get("peak_allocated_bytes", measured.get("error")), flush=True
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
