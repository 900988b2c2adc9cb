"""The allocation sequence of real training steps, against the synthetic one the estimator builds.

    python bench/measure/trace_events.py --out bench/results/trace-cpu.json [--only SUBSTRING]
    python bench/measure/trace_events.py --subset moe     # -> bench/results/trace-cpu-moe.json
    python bench/measure/trace_events.py --subset sweep   # -> bench/results/trace-cpu-sweep.json
    python bench/measure/trace_events.py --subset qlora   # -> bench/results/trace-cpu-qlora.json

For each case the harness (harness.py) builds the model and runs two training steps exactly as
it measures one (step 1 without optimizer state, then step 2), under a tracker that records every
tensor storage's allocation (``untyped_storage().nbytes()``) and its free (the weakref the
storage tracker already keeps, tracker.py) in order, as trainmem.core.allocator ``Alloc`` /
``Free`` events, starting from the loaded model (its parameters and buffers, then the input).
That traced sequence and the synthetic one (trainmem.core.step_events on the same plan and
ModelSpec, as bench/accuracy/compare.py builds them) run through the same ``simulate()``.

What the trace cannot show on a CPU: allocations made and freed inside one kernel (cuBLAS /
cuDNN workspaces, flash and memory-efficient SDPA's scratch), the CUDA-only paths (flash SDPA
saves its log-sum-exp instead of the math path's attention weights; fused AdamW is one kernel;
eager softmax on fp16 upcasts to fp32 on CUDA), and the CUDA context. Neither sequence holds
the context or cuBLAS's workspaces: the comparison is of the tensors' sequences only.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import json
import statistics
import sys
import time
import traceback
from collections.abc import Hashable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness
from sequence import pack
from tracker import StorageTracker, _storage

from trainmem.core.allocator import Alloc, Event, Free, Simulation, simulate
from trainmem.core.architecture import spec_from_config
from trainmem.core.estimator import estimate, step_sizes
from trainmem.core.plan import Plan
from trainmem.core.step_events import step_events


class EventTracker(StorageTracker):
    """The storage tracker, also writing each storage's allocation and free in order."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[Event] = []
        self.where: list[str] = []  # per event: "step N phase"
        self.step = 0
        self.recording = True
        self._ids: dict[int, int] = {}  # live storage key -> its event id
        self._next = 0

    def _emit(self, event: Event) -> None:
        self.events.append(event)
        self.where.append(f"step {self.step} {self.current_phase}")

    def _add(self, t: torch.Tensor, category: str, op: str) -> Any:
        st = _storage(t)
        key = id(st) if st is not None else None
        before = self._live.get(key) if key is not None else None
        old = before.nbytes if before is not None else 0
        entry = super()._add(t, category, op)
        if entry is None or not self.recording or key is None:
            return entry
        if before is None:  # a new storage
            self._alloc(key, entry.nbytes)
        elif entry.nbytes != old:  # resized in place: the allocator frees and allocates
            self._emit(Free(self._ids.pop(key)))
            self._alloc(key, entry.nbytes)
        return entry

    def _alloc(self, key: int, nbytes: int) -> None:
        self._ids[key] = self._next
        self._emit(Alloc(self._next, nbytes))
        self._next += 1

    def _free(self, key: int, _ref: Any = None) -> None:
        if self.recording and key in self._ids:
            self._emit(Free(self._ids.pop(key)))
        super()._free(key, _ref)

    def __exit__(self, *exc: Any) -> Any:
        self.recording = False  # the model's teardown is no part of the steps
        return super().__exit__(*exc)


def trace(
    entry: dict[str, Any], plan: Plan, execution: str = "real", steps: int = 2
) -> tuple[EventTracker, dict[str, Any]]:
    """Build ``entry``'s model for ``plan`` (harness.build, real or FakeTensor) and run
    ``steps`` training steps under an EventTracker; returns it and the model's facts."""
    torch.manual_seed(0)
    fake_ctx: Any = contextlib.nullcontext()
    fake = execution == "fake"
    if fake:
        fake_ctx = harness.fake_mode(plan)
    with fake_ctx:
        with harness._fake_safe_module_apply() if fake else contextlib.nullcontext():
            model, info = harness.build(entry, plan, "cpu", fake=fake)
        opt = harness.make_optimizer(model, plan)
        gc.collect()
        tr = EventTracker()
        ids = torch.randint(0, int(entry["vocab_size"]), (plan.batch, plan.seq_len))
        tr.register_model_and_optimizer(model, opt, extra=[ids])  # the loaded model: its allocs
        with tr:
            for number in range(1, steps + 1):
                tr.step = number
                harness.train_step(model, opt, ids, plan, "cpu", tr)
                gc.collect()
        pbytes, trainable, total = harness.count_params(model)
        facts = {"params_bytes": pbytes, "trainable_params": trainable, "total_params": total}
        facts.update({k: v for k, v in info.items() if k == "adapter_dtype"})
        del model, opt, ids
    gc.collect()
    return tr, facts


def _sim(events: list[Event] | tuple[Event, ...]) -> tuple[Simulation, dict[str, int]]:
    sim = simulate(events)
    live = peak = 0
    sizes: dict[Hashable, int] = {}
    for event in events:  # the tensors' own peak (unrounded)
        if isinstance(event, Alloc):
            sizes[event.id] = event.size
            live += event.size
            peak = max(peak, live)
        elif isinstance(event, Free):
            live -= sizes.pop(event.id)
    return sim, {
        "events": len(events),
        "tensors_peak": peak,
        "peak_reserved": sim.peak_reserved,
        "peak_allocated": sim.peak_allocated,
        "allocated_at_peak_reserved": sim.allocated_at_peak,
        "fragmentation_at_peak": sim.fragmentation_at_peak,
        "segments_at_peak": len(sim.segments_at_peak),
        "peak_event": sim.peak_event,
    }


def synthetic(entry: dict[str, Any], plan: Plan) -> tuple[list[Event], dict[str, Any]]:
    """The estimator's sequence and figures for the same plan and config (CPU kernels, as
    compare.py compares CPU measurements)."""
    cfg = harness.config_dict(entry)
    spec = spec_from_config(cfg, entry["name"])
    validated = dataclasses.replace(plan, model=entry["name"]).validated()
    est = estimate(validated, spec, "cpu")
    built = step_events(validated, spec, step_sizes(validated, spec, "cpu"))
    dp = est.device_peak
    figures = {
        "allocated_peak": est.allocated_bytes,
        "peak_phase": est.peak_phase,
        "device_peak_reserved": dp.reserved if dp else None,  # with cuBLAS's workspaces
        "device_peak_moment": dp.moment if dp else None,
    }
    return list(built.events), figures


def run(entry: dict[str, Any], plan: Plan, execution: str) -> dict[str, Any]:
    rec: dict[str, Any] = {
        "id": f"{entry['name']}/{harness.case_key(plan)}/{execution}",
        "model": {"name": entry["name"], "config": harness.config_dict(entry)},
        "plan": dataclasses.replace(plan, model=entry["name"]).to_dict(),
    }
    t0 = time.perf_counter()
    try:
        tr, facts = trace(entry, plan, execution)
        traced_sim, traced = _sim(tr.events)
        traced["peak_where"] = tr.where[traced_sim.peak_event] if traced_sim.peak_event >= 0 else ""
        traced["tracker_peak"] = tr.peak.bytes  # the storage tracker's own running peak
        traced["tracker_peak_phase"] = tr.peak.phase
        events, est = synthetic(entry, plan)
        _, synth = _sim(events)
        rec.update(execution=execution, facts=facts, traced=traced, synthetic=synth, estimate=est)
        rec["sequence"] = pack(tr.events)  # bench/accuracy/compare.py simulates it again
        rec["error_reserved_pct"] = (
            100.0 * (synth["peak_reserved"] - traced["peak_reserved"]) / traced["peak_reserved"]
        )
    except Exception as e:  # record honestly and move on
        rec["error"] = f"{type(e).__name__}: {e}"[:2000]
        rec["traceback_tail"] = traceback.format_exc()[-1500:]
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    return rec


# --------------------------------------------------------------------------- cases
def _tiny(name: str, arch: str, tied: bool, **sizes: int) -> dict[str, Any]:
    """A small random model of a real architecture: big enough that its tensors reach the
    large pool (over 1 MiB), small enough to run for real on a CPU in seconds."""
    return {
        "name": name,
        "hf_id": None,
        "architecture": arch,
        "tie_word_embeddings": tied,
        "max_position_embeddings": 4096,
        "config_extra": {},
        **sizes,
    }


TINY = {
    "tiny-llama": _tiny(
        "tiny-llama",
        "llama",
        False,
        hidden_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        intermediate_size=1536,
        vocab_size=8192,
    ),
    "tiny-qwen2": _tiny(
        "tiny-qwen2",
        "qwen2",
        True,
        hidden_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=2,
        intermediate_size=2048,
        vocab_size=10000,
    ),
}


def moe_cases() -> list[tuple[str, Plan, str]]:
    """Mixture-of-experts models at real sizes, shapes only (the harness's moe subset's
    models; transformers 5 runs their experts through grouped_mm). gpt-oss: eager attention
    (it declares no SDPA support)."""
    mp, lora = harness.measured_plan, harness.lora
    out: list[tuple[str, Plan, str]] = []
    for name in harness.MOE:
        attn = "eager" if name.startswith("gpt-oss") else "sdpa"
        for plan in (
            mp("full", "bf16", "adamw", 512, 2, grad_ckpt=True, attn=attn),
            lora("bf16", 16, "all-linear", seq_len=1024, batch=1, attn=attn),
            lora("bf16", 16, "all-linear", seq_len=1024, batch=1, grad_ckpt=True, attn=attn),
            lora("bf16", 16, "attention", seq_len=2048, batch=1, attn=attn),
        ):
            out.append((name, plan, "fake"))
    return out


def qlora_cases() -> list[tuple[str, Plan, str]]:
    """QLoRA at real sizes, shapes only: bitsandbytes' 4-bit load on fake tensors
    (trainmem.probe.fake4bit, checked against a real load in tests/measure/test_fake_qlora.py),
    with and without PEFT's k-bit preparation; and the one-GPU QLoRA runs of
    bench/accuracy/published_cuda.py (Mistral-7B, nf4, double quantization, r 16 on q/k/v/o,
    4,096 tokens, batch 4, checkpointing, foreach AdamW; sdpa for flash-attention 2) with
    today's versions."""
    import published_versions  # the runs' set-up, written once there

    qlora = harness.qlora
    out: list[tuple[str, Plan, str]] = []
    for name in ("SmolLM2-135M", "Qwen2.5-0.5B", "Llama-3.2-1B"):
        for plan in (
            qlora(True, seq_len=2048, batch=1, grad_ckpt=True),
            qlora(False, seq_len=2048, batch=1),
        ):
            out.append((name, plan, "fake"))
    for _method, batch in published_versions.TODAY_ONLY.values():
        fields = {**published_versions.QLORA, "batch": batch}
        plan = dataclasses.replace(published_versions.BASE, **fields).validated()
        out.append(("Mistral-7B-v0.1", plan, "fake"))
    return out


def sweep_cases() -> list[tuple[str, Plan, str]]:
    """One plan over batches 1-10, where the synthetic sequence's reserve swings (batch 3
    fragments more than 4): does the real step's sequence swing the same way?"""
    plans = [harness.measured_plan("full", "bf16", "adamw", 2048, b) for b in range(1, 11)]
    return [("Llama-3.2-1B", plan, "fake") for plan in plans]


def cases() -> list[tuple[str, Plan, str]]:
    mp, lora = harness.measured_plan, harness.lora
    out: list[tuple[str, Plan, str]] = []
    for name in TINY:  # real execution, a few seconds each
        for plan in (
            mp("full", "bf16", "adamw", 256, 2),
            mp("full", "bf16", "adamw", 256, 2, grad_ckpt=True),
            mp("full", "fp32", "adamw", 256, 1),
            mp("full", "bf16-mixed", "adamw", 256, 1, grad_ckpt=True),
            lora("bf16", 16, "all-linear", seq_len=512, batch=1),
            lora("bf16", 16, "all-linear", seq_len=512, batch=1, grad_ckpt=True),
            lora("bf16", 16, "all-linear", seq_len=256, batch=2, attn="eager"),
        ):
            out.append((name, plan, "real"))
    for name in ("SmolLM2-135M", "Qwen2.5-0.5B", "Llama-3.2-1B"):  # real sizes, shapes only
        for plan in (
            mp("full", "bf16", "adamw", 2048, 1),
            mp("full", "bf16-mixed", "adamw", 1024, 2, grad_ckpt=True),
            lora("bf16", 16, "all-linear", seq_len=2048, batch=1),
            lora("bf16", 16, "all-linear", seq_len=4096, batch=1, grad_ckpt=True),
            lora("bf16", 16, "all-linear", seq_len=2048, batch=2, grad_ckpt=True),
            lora("bf16", 16, "all-linear", seq_len=2048, batch=1, attn="eager"),
        ):
            out.append((name, plan, "fake"))
    return out


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    errs = [abs(r["error_reserved_pct"]) for r in records if "error_reserved_pct" in r]
    return {
        "n": len(errs),
        "median_abs_error_reserved_pct": statistics.median(errs) if errs else None,
        "worst_abs_error_reserved_pct": max(errs) if errs else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--out", type=Path, default=None, help="default: bench/results/trace-cpu[-moe|-sweep].json"
    )
    ap.add_argument("--subset", choices=["dense", "moe", "sweep", "qlora"], default="dense")
    ap.add_argument("--only", default=None, help="run only cases whose id contains this substring")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = ap.parse_args(argv)
    suffix = "" if args.subset == "dense" else f"-{args.subset}"
    args.out = args.out or harness.REPO / f"bench/results/trace-cpu{suffix}.json"
    if args.threads:
        torch.set_num_threads(args.threads)
    import published_versions

    # with the published runs' Mistral-7B-v0.1 (qlora_cases)
    models = {**harness.load_models(), **TINY, "Mistral-7B-v0.1": published_versions.mistral_v01()}
    cmd = "python bench/measure/trace_events.py " + " ".join(
        argv if argv is not None else sys.argv[1:]
    )
    records: list[dict[str, Any]] = []
    t_all = time.perf_counter()

    def write(complete: bool) -> dict[str, Any]:
        doc = {
            "kind": "sweep" if args.subset == "sweep" else "trace",  # compare.py's tables
            "machine": harness.machine("cpu"),
            "versions": harness.versions(),
            "command": cmd,
            "complete": complete,  # false while running: rewritten after each case
            "models_json": str(harness.MODELS_JSON),
            "tiny_models": TINY,
            "notes": NOTES,
            "total_seconds": round(time.perf_counter() - t_all, 1),
            "summary": summary(records),
            "records": records,
        }
        tmp = args.out.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(doc, indent=1) + "\n")
        tmp.replace(args.out)
        return doc

    subsets = {"dense": cases, "moe": moe_cases, "sweep": sweep_cases, "qlora": qlora_cases}
    for name, plan, execution in subsets[args.subset]():
        rid = f"{name}/{harness.case_key(plan)}/{execution}"
        if args.only and args.only not in rid:
            continue
        rec = run(models[name], plan, execution)
        records.append(rec)
        if "traced" in rec:
            traced, synth = rec["traced"]["peak_reserved"], rec["synthetic"]["peak_reserved"]
            msg = f"reserved: traced {traced / 2**20:9.1f} MiB, synthetic {synth / 2**20:9.1f} MiB"
            msg += f" ({rec['error_reserved_pct']:+.1f}%)"
        else:
            msg = f"ERROR {rec['error'][:100]}"
        print(
            f"[{time.perf_counter() - t_all:6.1f}s] {rec['seconds']:6.1f}s {msg}  {rid}", flush=True
        )
        write(False)
    doc = write(args.only is None)
    print(f"wrote {args.out}: {len(records)} records, {doc['summary']}")
    return 0


NOTES = {
    "traced": (
        "every tensor storage allocated and freed over two training steps (step 1 without "
        "optimizer state) from the loaded model on, in order, run through "
        "trainmem.core.allocator.simulate (default PYTORCH_CUDA_ALLOC_CONF); tensors_peak is "
        "the unrounded live-bytes peak of the sequence"
    ),
    "synthetic": (
        "trainmem.core.step_events.step_events on the same plan and ModelSpec (CPU kernels), "
        "through the same simulate(); neither sequence holds cuBLAS workspaces or the context"
    ),
    "estimate": (
        "trainmem.core.estimator.estimate(plan, spec, 'cpu'): allocated_peak; "
        "device_peak_reserved is the simulated reserve the estimator reports (with workspaces)"
    ),
    "sequence": "the traced events, packed by bench/measure/sequence.py (pack / unpack)",
    "error_reserved_pct": "(synthetic peak_reserved - traced peak_reserved) / traced, percent",
    "not traced on a CPU": (
        "kernel-internal scratch (cuBLAS/cuDNN workspaces, flash / memory-efficient SDPA "
        "scratch), CUDA-only paths (flash SDPA's saved log-sum-exp, fused AdamW's CUDA kernel, "
        "eager softmax's fp16-to-fp32 upcast), the CUDA context"
    ),
}


if __name__ == "__main__":
    raise SystemExit(main())
