"""Per-rank memory of DeepSpeed ZeRO training steps, measured on a CPU (issue 18).

    .venv/bin/python bench/measure/deepspeed_zero.py --out bench/results/measure-cpu-deepspeed.json

DeepSpeed 0.19.8 runs on its CPU accelerator (``DS_ACCELERATOR=cpu``,
deepspeed/accelerator/cpu_accelerator.py: communication backend ``ccl`` only when
oneccl_bindings_for_pytorch imports, ``gloo`` otherwise), so these are real 2- and 4-process
gloo runs of ZeRO 1, 2 and 3 in bf16, with and without optimizer offload (stages 1-3) and
parameter offload (stage 3). The optimizer is torch's fused AdamW (``zero_allow_untested_
optimizer``, ``zero_force_ds_cpu_optimizer: false``): DeepSpeedCPUAdam and the other compiled
ops are not used. DeepSpeed JIT-builds its shm_comm op at init (deepspeed/comm/torch.py
build_shm_op); only ``inference_all_reduce`` calls it, training reduces through gloo.

Each rank tracks its own step with the FSDP measurements' tracker (sharded.ResizeAwareTracker:
unique live storages, plus ``UntypedStorage.resize_``). Everything alive before the step is
registered from the garbage collector's view (ZeRO keeps flat buffers and partitions no
module attribute shows). On a CPU the "device" and the offload target are the same memory, so
the host side is told apart by where DeepSpeed keeps it: the fp32 master partitions, their
gradients, the optimizer's states and ZeRO-3's offloaded parameter partitions (registered as
``host`` before the step), and whatever the wrapped optimizer allocates while it steps (it
runs on the host under offload). The per-GPU figure is the peak of everything else.

Each record also carries DeepSpeed's own model-state estimates
(stage_1_and_2.py estimate_zero2_model_states_mem_needs, stage3.py
estimate_zero3_model_states_mem_needs) for the same model and world.
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

os.environ.setdefault("DS_ACCELERATOR", "cpu")

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from sharded import ResizeAwareTracker, small

from trainmem.core.plan import AUTO, Plan

MODELS = (("SmolLM2-135M", 4), ("Qwen2.5-0.5B", 2))  # llama and qwen2 (q/k/v biases), layers
WORLDS = (2, 4)


class HostAwareTracker(ResizeAwareTracker):
    """ResizeAwareTracker whose peak leaves out storages in the ``host`` category (offloaded
    states) and records their own peak beside it."""

    def __init__(self, detail: bool = False) -> None:
        super().__init__(detail=detail)
        self.host_scope = False
        self.host_peak = 0
        self._start_host = 0
        self.by_category["host"] = 0
        self.peak.by_category["host"] = 0

    def _add(self, t: torch.Tensor, category: str, op: str) -> Any:
        if self.host_scope and category == "other":
            category = "host"
        return super()._add(t, category, op)

    def _check_peak(self, op: str) -> None:
        host = self.by_category.get("host", 0)
        self.host_peak = max(self.host_peak, host)
        self.live_bytes -= host
        try:
            super()._check_peak(op)
        finally:
            self.live_bytes += host

    def summary(self) -> dict[str, Any]:
        s = super().summary()
        s["start_bytes"] = self.start_bytes - self._start_host
        return s

    def register(self, tensors: Any, category: str) -> None:
        super().register(tensors, category)
        self._start_host = self.by_category.get("host", 0)


def ds_config(plan: Plan, hidden: int) -> dict[str, Any]:
    """The DeepSpeed config the plan's fields name (the plan's defaults are DeepSpeed's);
    "auto" (AUTO) is what transformers 5.24 integrations/deepspeed.py
    HfTrainerDeepSpeedConfig.trainer_config_finalize fills in from hidden_size."""

    def size(value: int, auto: int) -> int:
        return auto if value == AUTO else value

    zero: dict[str, Any] = {
        "stage": plan.zero,
        "reduce_bucket_size": size(plan.reduce_bucket, hidden * hidden),
        "overlap_comm": plan.overlap_comm,
        "contiguous_gradients": True,
    }
    if plan.zero == 3:
        zero.update(
            stage3_prefetch_bucket_size=size(plan.prefetch_bucket, int(0.9 * hidden * hidden)),
            stage3_max_live_parameters=plan.max_live_params,
            stage3_param_persistence_threshold=size(plan.persistence_threshold, 10 * hidden),
        )
    if plan.offload in ("optimizer", "params"):
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if plan.offload == "params":
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": plan.batch,
        "gradient_accumulation_steps": 1,
        "bf16": {"enabled": True},
        "zero_optimization": zero,
        "zero_allow_untested_optimizer": True,
        "zero_force_ds_cpu_optimizer": False,
        "steps_per_print": 10**9,
    }


def zero_plan(
    model: str, stage: int, offload: str, gc_on: bool, auto: bool = True, overlap: bool = False
) -> Plan:
    """A ZeRO plan; ``auto``: the Trainer's bucket sizes, DeepSpeed's defaults otherwise."""
    base = harness.measured_plan("full", "bf16", "adamw", 256, 1, gc_on)
    buckets = (
        {"reduce_bucket": AUTO, "prefetch_bucket": AUTO, "persistence_threshold": AUTO}
        if auto
        else {}
    )
    return dataclasses.replace(
        base,
        model=model,
        strategy="zero",
        zero=stage,
        offload=offload,
        overlap_comm=overlap,
        **buckets,
    ).validated()


def grid(quick: bool) -> list[tuple[str, int, Plan]]:
    """Under the Trainer's "auto" buckets: every stage with and without optimizer offload,
    stage 3 with parameter offload, all with checkpointing; the three stages without
    checkpointing; stage 2 with overlap_comm. DeepSpeed's own default buckets (a 5e8-element
    reduce bucket) at each stage."""
    cases = []
    models = MODELS[:1] if quick else MODELS
    for name, layers in models:  # the most used configurations first
        for stage in (1, 2, 3):
            offloads = ("none", "optimizer") + (("params",) if stage == 3 else ())
            for offload in offloads:
                cases.append((name, layers, zero_plan(name, stage, offload, True)))
    for name, layers in models:
        for stage in (1, 2, 3):
            cases.append((name, layers, zero_plan(name, stage, "none", False)))
            cases.append((name, layers, zero_plan(name, stage, "none", True, auto=False)))
        cases.append((name, layers, zero_plan(name, 2, "none", True, overlap=True)))
    return cases


def _live_tensors() -> list[torch.Tensor]:
    """Every tensor the garbage collector sees, less meta tensors (ZeRO 1-2 keep one per
    parameter for its shape, stage_1_and_2.py round_robin_bit16_meta: no memory)."""
    return [o for o in gc.get_objects() if isinstance(o, torch.Tensor) and not o.is_meta]


PINNED: list[torch.Tensor] = []  # what DeepSpeed pinned in this process


def _record_pins() -> None:
    """DeepSpeed pins exactly its host-side buffers (with ``pin_memory: true``, as the
    offload configs set it): the fp32 master and gradient partitions, the 16-bit staging
    buffers, ZeRO-3's offloaded parameter partitions (stage_1_and_2.py:565-572, 657, 940;
    stage3.py:795, 906, 1340; partition_parameters.py:1843). The CPU accelerator's
    pin_memory returns the tensor unpinned (cpu_accelerator.py:283); record what passes."""
    from deepspeed.accelerator import get_accelerator

    acc = get_accelerator()
    orig = acc.pin_memory

    def pin_memory(tensor: torch.Tensor, *a: Any, **kw: Any) -> torch.Tensor:
        out = orig(tensor, *a, **kw)
        PINNED.append(out)
        return out

    acc.pin_memory = pin_memory


def _host_tensors(opt: Any) -> list[torch.Tensor]:
    """What ZeRO-Offload keeps in host RAM: the buffers it pinned, its fp32 partitions and
    their gradients (stage_1_and_2.py single_partition_of_fp32_groups, stage3.py
    fp32_partitioned_groups_flat) and the wrapped optimizer's states, which it steps there."""
    out = [t for t in PINNED if not t.is_meta]
    for name in ("single_partition_of_fp32_groups", "fp32_partitioned_groups_flat"):
        for t in getattr(opt, name, []) or []:
            out.append(t)
            if t.grad is not None:
                out.append(t.grad)
    for s in opt.optimizer.state.values():
        out.extend(v for v in s.values() if isinstance(v, torch.Tensor))
    return out


def _step(engine: Any, ids: torch.Tensor, tr: HostAwareTracker | None = None) -> None:
    """The Trainer's step under DeepSpeed: loss = model(**inputs).loss (the output dies),
    accelerator.backward -> engine.backward, engine.step()."""
    ph = tr.phase if tr is not None else (lambda _n: contextlib.nullcontext())
    with ph("forward"):
        loss = engine(input_ids=ids, labels=ids)["loss"]
    with ph("backward"):
        engine.backward(loss)
    with ph("optimizer"):
        engine.step()


def measure(entry: dict[str, Any], plan: Plan, rank: int) -> dict[str, Any]:
    import deepspeed

    torch.manual_seed(rank)
    _record_pins()
    model, _ = harness.build(entry, plan, "cpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.0, fused=True)
    engine, zopt, _, _ = deepspeed.initialize(
        model=model, optimizer=opt, config=ds_config(plan, int(entry["hidden_size"]))
    )
    ids = torch.randint(0, int(entry["vocab_size"]), (plan.batch, plan.seq_len))
    _step(engine, ids)  # warm-up: optimizer states and lazily made buffers exist after it
    gc.collect()
    tr = HostAwareTracker(detail=bool(os.environ.get("DS_MEASURE_DETAIL")))
    host = _host_tensors(zopt) if plan.offload != "none" else []
    host_ids = {id(t.untyped_storage()) for t in host}
    params = [p for p in engine.module.parameters()]
    params += [p.ds_tensor for p in params if getattr(p, "ds_tensor", None) is not None]
    state = [v for s in zopt.optimizer.state.values() for v in s.values()]
    tr.register(host, "host")
    tr.register([p for p in params if id(p.untyped_storage()) not in host_ids], "parameters")
    tr.register(
        [
            t
            for t in state
            if isinstance(t, torch.Tensor) and id(t.untyped_storage()) not in host_ids
        ],
        "optimizer",
    )
    seen = host_ids | set(tr._live)
    tr.register([t for t in _live_tensors() if id(t.untyped_storage()) not in seen], "other")
    inner = zopt.optimizer
    orig_step = inner.step

    def host_step(*a: Any, **kw: Any) -> Any:
        tr.host_scope = plan.offload != "none"  # the wrapped optimizer runs on the host
        try:
            return orig_step(*a, **kw)
        finally:
            tr.host_scope = False

    inner.step = host_step
    with tr:
        _step(engine, ids, tr)
    inner.step = orig_step
    s = tr.summary()
    out = {
        "peak_allocated_bytes": s["peak_bytes"],
        "peak_phase": s["peak_phase"],
        "peak_op": s["peak_op"],
        "by_category_at_peak": s["by_category_at_peak"],
        "start_bytes": s["start_bytes"],
        "phase_peaks": s["phase_peaks"],
        "host_peak_bytes": tr.host_peak,
        "optimizer_class": type(zopt).__name__,
        "execution": "real",
        "tracker": "StorageTracker + UntypedStorage.resize_, host category left out",
    }
    if tr.detail:  # what was alive at the peak (for analysis, not for the records)
        out["top_at_peak"] = tr.top_at_peak(25)
    engine.destroy()
    del engine, zopt, model, opt
    gc.collect()
    return out


def deepspeed_estimates(model: torch.nn.Module, plan: Plan) -> dict[str, int]:
    """DeepSpeed's own model-state estimates (bytes per GPU and per node's CPU) for this
    model: stage_1_and_2.py estimate_zero2_model_states_mem_needs (no stage-1 function; it
    is the stage-2 formula), stage3.py estimate_zero3_model_states_mem_needs with
    zero_init=False (the model is built, then partitioned by deepspeed.initialize)."""
    from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
    from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs

    total = sum({p.data_ptr(): p.numel() for p in model.parameters()}.values())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model.modules())
    if plan.zero == 3:
        cpu, gpu, _ = estimate_zero3_model_states_mem_needs(
            total,
            largest,
            plan.gpus,
            1,
            cpu_offload=plan.offload != "none",
            cpu_offload_params=plan.offload == "params",
            zero_init=False,
            additional_buffer_factor=1.0,
        )
    else:
        cpu, gpu = estimate_zero2_model_states_mem_needs(
            total, plan.gpus, 1, plan.offload != "none", additional_buffer_factor=1.0
        )
    return {"gpu_bytes": int(gpu), "cpu_bytes": int(cpu), "total_params": total}


def _rank_main(rank: int, world: int, case: Any, models: dict[str, Any], tmp: str) -> None:
    """One case on one rank. Each case gets fresh processes: DeepSpeed keeps module-level
    state (ZeRO-3's parameter registry, the comm backend) that would carry one case's
    tensors into the next one's figures."""
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world))
    os.environ.update(LOCAL_SIZE=str(world), MASTER_ADDR="127.0.0.1")
    import deepspeed

    deepspeed.init_distributed(
        "gloo",
        auto_mpi_discovery=False,
        init_method=f"file://{tmp}/store",
        rank=rank,
        world_size=world,
    )
    name, layers, plan_d = case
    try:
        entry = small(models[name], layers) if layers else models[name]  # 0: as given
        result = measure(entry, Plan(**plan_d), rank)
    except Exception as e:  # recorded, not hidden
        result = {"error": f"{type(e).__name__}: {e}"[:1500], "tb": traceback.format_exc()[-1500:]}
    Path(f"{tmp}/{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def run_case(name: str, layers: int, plan: Plan, models: dict[str, Any]) -> list[dict[str, Any]]:
    """One case on ``plan.world`` gloo processes of this CPU."""
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory() as tmp:
        case = (name, layers, plan.to_dict())
        mp.spawn(_rank_main, args=(plan.world, case, models, tmp), nprocs=plan.world, join=True)
        return [json.loads(Path(f"{tmp}/{r}.json").read_text()) for r in range(plan.world)]


def record(entry: dict[str, Any], plan: Plan, ranks: list[dict[str, Any]]) -> dict[str, Any]:
    """The worst rank is the record's figure (the one that runs out first); all are kept."""
    ok = [r for r in ranks if "peak_allocated_bytes" in r]
    worst = (
        max(ok, key=lambda r: r["peak_allocated_bytes"]) if ok and len(ok) == len(ranks) else None
    )
    errors = [r for r in ranks if "error" in r]
    measured = dict(worst) if worst else dict(errors[0]) if errors else {}
    measured["ranks"] = [r.get("peak_allocated_bytes") for r in ranks]
    measured["host_ranks"] = [r.get("host_peak_bytes") for r in ranks]
    buckets = "auto" if plan.reduce_bucket == AUTO else "ds-default"
    key = (
        f"full/bf16/zero{plan.zero}-offload-{plan.offload}/buckets-{buckets}"
        f"{'-overlap' if plan.overlap_comm else ''}/w{plan.world}/s{plan.seq_len}/"
        f"b{plan.batch}/{'gc' if plan.grad_ckpt else 'nogc'}"
    )
    return {
        "id": f"{entry['name']}/{key}/real",
        "model": harness.model_record(entry),
        "plan": plan.to_dict(),
        "measured": measured,
    }


def write(path: Path | None, records: list[dict[str, Any]]) -> None:
    if path is None:
        return
    import deepspeed

    data = {
        "machine": {**harness.machine("cpu"), "torch_threads": 1},
        "versions": {**harness.versions(), "deepspeed": deepspeed.__version__},
        "command": f"{os.path.relpath(sys.executable)} bench/measure/deepspeed_zero.py "
        + " ".join(sys.argv[1:]),
        "notes": "DeepSpeed ZeRO per rank on a CPU: real gloo processes on DeepSpeed's CPU "
        "accelerator; measured.ranks holds every rank's peak, the record's is the worst; "
        "offloaded states (host category) are left out of the per-GPU peak",
        "records": records,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="run cases whose id contains this")
    ap.add_argument("--worlds", default=",".join(map(str, WORLDS)))
    args = ap.parse_args()
    torch.set_num_threads(1)
    models = harness.load_models()
    records: list[dict[str, Any]] = []
    worlds = [int(w) for w in args.worlds.split(",")]
    for name, layers, case in grid(args.quick):
        for world in worlds:
            plan = dataclasses.replace(case, gpus=world).validated()
            entry = small(models[name], layers)
            rec = record(entry, plan, [])
            if args.only not in rec["id"]:
                continue
            t0 = time.perf_counter()
            rec = record(entry, plan, run_case(name, layers, plan, models))
            rec["seconds"] = round(time.perf_counter() - t0, 1)
            model, _ = harness.build(entry, plan, "cpu")
            rec["deepspeed_estimate"] = deepspeed_estimates(model, plan)
            del model
            records.append(rec)
            write(args.out, records)
            m = rec["measured"]
            print(rec["id"], m.get("ranks"), m.get("error", ""), m.get("tb", ""), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
