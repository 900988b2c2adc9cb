"""Compare the estimator, the guide's rule of thumb and the public calculators with measured
training steps, and write docs/accuracy.md.

    python bench/accuracy/compare.py bench/results/measure-cpu.json [more.json ...] \
        [--out docs/accuracy.md]

Each measurement record holds the exact config and plan it ran; the estimate is made from the
same config and plan. Error = (predicted - measured) / measured, on the allocated peak (live
tensor bytes), which is what every measurement here records.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # `accuracy` package

from measure.sequence import unpack

from accuracy.bnb_load import bnb_load_section
from accuracy.peers import PEERS
from accuracy.published import unsloth_section
from accuracy.published_cuda import published_cuda_section
from trainmem.core.allocator import simulate
from trainmem.core.architecture import spec_from_config
from trainmem.core.estimator import estimate, step_sizes
from trainmem.core.fit import judge_fit
from trainmem.core.plan import STACKS, Plan
from trainmem.core.recipes import recipe
from trainmem.core.runtime import built_in_figures
from trainmem.core.step_events import step_events

PLAN_FIELDS = {f.name for f in fields(Plan)}


def hf_config(model: dict[str, Any]) -> dict[str, Any]:
    """The record's config as a config.json dict (the harness may store extra keys)."""
    cfg = dict(model["config"])
    cfg.setdefault("model_type", cfg.get("architecture", "llama"))
    return cfg


def to_plan(record: dict[str, Any]) -> Plan:
    values = {k: v for k, v in record["plan"].items() if k in PLAN_FIELDS and v is not None}
    return Plan(model=record["model"]["name"], **{k: v for k, v in values.items() if k != "model"})


def compare(
    record: dict[str, Any], kernels: str, machine: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """A record's row: the tools' predictions beside what was measured; for a CUDA run
    (``machine``: its file's, with the GPU's name and the CUDA context measured) also the
    device peak, simulated and measured."""
    measured = (record.get("measured") or {}).get("peak_allocated_bytes")
    if not measured:
        return None
    cfg = hf_config(record["model"])
    spec = spec_from_config(cfg, record["model"]["name"])
    plan = to_plan(record)
    if plan.lora_targets == "attention" and spec.fused:
        # The harness names q_proj/k_proj/v_proj/o_proj literally (bench/measure/harness.py
        # LORA_ATTENTION); on a fused-qkv model (Phi-3) PEFT then matches o_proj alone.
        plan = replace(plan, lora_targets="o")
    plan = plan.validated()
    est = estimate(plan, spec, kernels)
    arch = {**cfg, "total_params": spec.params, "trainable_params": est.trainable_params}
    peer_plan = {**record["plan"], "gpus": 1}
    row = {
        "id": record["id"],
        # accelerate >= 1.14's own FSDP2 units (sharded.py --accelerate-layout), which the
        # estimate does not model yet: an embedding unit and a [norm, lm_head] unit
        "model": record["model"]["name"]
        + (" (accelerate layout)" if record.get("layout") == "accelerate" else ""),
        "plan": plan,
        "execution": record["measured"].get("execution", ""),
        "measured": measured,
        "ours": est.allocated_bytes,
        "rule of thumb": est.rule_of_thumb_bytes,
        # DeepSpeed's own model-state estimate, where the record carries one
        "deepspeed": (record.get("deepspeed_estimate") or {}).get("gpu_bytes"),
        "ranks": record["measured"].get("ranks"),
        "states": record["measured"].get("start_bytes"),  # alive before the step
        # offloaded states in host RAM, one process's (the worst rank's) and ours
        "host": max(record["measured"].get("host_ranks") or [0]),
        "host ours": est.host_offloaded_bytes // max(1, plan.gpus),
    }
    for name, (fn, _) in PEERS.items():
        try:
            row[name] = fn(arch, peer_plan)
        except (KeyError, ValueError, TypeError, ZeroDivisionError):
            row[name] = None
    cuda = record["measured"].get("cuda")
    if cuda and cuda.get("max_reserved") and machine is not None:
        row["cuda"] = device_peak_row(plan, spec, cuda, machine)
    return row


def device_peak_row(
    plan: Plan, spec: Any, cuda: dict[str, Any], machine: dict[str, Any]
) -> dict[str, Any]:
    """What a GPU run measured (bench/measure/cuda_stats.py CudaPeak, over the measured step)
    beside the plan's device peak on that GPU: the simulated reserve (which holds cuBLAS's
    workspaces) against ``torch.cuda.max_memory_reserved``, and reserve + context against
    NVML's most used memory less what was used before CUDA started (other processes)."""
    figures = built_in_figures(machine.get("gpu"), machine.get("cuda"))
    est = estimate(plan, spec, "cuda", figures=figures)
    peak = est.device_peak
    assert peak is not None  # a GPU plan is simulated
    context = machine.get("cuda_context") or {}
    before, polled = context.get("nvml_used_before_init"), cuda.get("nvml_used_max_polled")
    return {
        "allocated": cuda["max_allocated"],
        "allocated ours": est.allocated_bytes,
        "reserved": cuda["max_reserved"],
        "reserved ours": peak.reserved,
        "device": polled - before if polled is not None and before is not None else None,
        "device ours": est.device_bytes,
        "context": context.get("context_bytes"),
        "context ours": figures.context_bytes,
    }


def cuda_section(rows: list[dict[str, Any]]) -> list[str]:
    """The device peak on a GPU, simulated against measured, where a CUDA run recorded it."""
    measured = [r for r in rows if r.get("cuda")]
    if not measured:
        return []
    lines = [
        "",
        "## Device peak on a GPU",
        "",
        "Measured by `bench/measure/harness.py --device cuda` over the measured step (after "
        "`torch.cuda.reset_peak_memory_stats`, the warm-up step's cached segments still "
        "held): `torch.cuda.max_memory_allocated` and `max_memory_reserved`, and NVML's most "
        "used memory (5 ms polling) less the memory used before CUDA started. `ours`: the "
        "plan's estimate on that GPU (the simulated allocator over two steps, cuBLAS "
        "workspaces inside it; the device figure adds the built-in CUDA context). Error = "
        "(ours - measured) / measured.",
        "",
        "| model | recipe | seq x batch | allocated GB | reserved GB | ours GB | error | "
        "device (NVML) GB | ours GB | error |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in measured:
        c, p = r["cuda"], r["plan"]
        device = "n/a" if c["device"] is None else f"{c['device'] / 1e9:.3f}"
        device_err = None if c["device"] is None else err(c["device ours"], c["device"])
        lines.append(
            f"| {r['model']} | {recipe_name(p)} | {p.seq_len} x {p.batch} | "
            f"{c['allocated'] / 1e9:.3f} | {c['reserved'] / 1e9:.3f} | "
            f"{c['reserved ours'] / 1e9:.3f} | {fmt_pct(err(c['reserved ours'], c['reserved']))}"
            f" | {device} | {c['device ours'] / 1e9:.3f} | {fmt_pct(device_err)} |"
        )
    pairs = [
        {"ours": r["cuda"]["reserved ours"], "measured": r["cuda"]["reserved"]} for r in measured
    ]
    summary = summarize(pairs, ["ours"])["ours"]
    lines += [
        "",
        f"Reserved: {summary['n']} steps, median {summary['median']:.2f}%, worst "
        f"{summary['worst']:.2f}%.",
    ]
    contexts = {r["cuda"]["context"] for r in measured if r["cuda"]["context"]}
    if contexts:
        ours = measured[0]["cuda"]["context ours"]
        lines.append(
            f"CUDA context measured {', '.join(f'{c / 1e9:.3f}' for c in sorted(contexts))} GB "
            f"(NVML after `torch.cuda.init()` and a 1-element tensor); built in: "
            f"{ours / 1e9:.3f} GB."
        )
    return lines


def err(pred: int | None, measured: int) -> float | None:
    return None if pred is None else 100.0 * (pred - measured) / measured


def summarize(rows: list[dict[str, Any]], tools: list[str]) -> dict[str, dict[str, Any]]:
    out = {}
    for tool in tools:
        errs = [abs(e) for r in rows if (e := err(r[tool], r["measured"])) is not None]
        out[tool] = {
            "n": len(errs),
            "median": statistics.median(errs) if errs else None,
            "worst": max(errs) if errs else None,
        }
    return out


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f}%"


def fmt_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.1f}%"


def recipe_name(plan: Plan) -> str:
    """The sharded precision recipe (trainmem.core.recipes), or the plan's precision."""
    found = recipe(plan)
    return f"{found.name}, reduce {found.reduce * 8}-bit" if found else plan.precision


def old_accelerate(record: dict[str, Any], plan: Plan) -> bool:
    """A record of an untied model in the FSDP2 units accelerate made before 1.14 (one root
    unit): not what the estimate models for the stacks that run accelerate's."""
    from trainmem.core.sharding import accelerate_carves

    spec = spec_from_config(hf_config(record["model"]), record["model"]["name"])
    return record.get("layout") != "accelerate" and accelerate_carves(plan, spec)


def before_carving_section(rows: list[dict[str, Any]]) -> list[str]:
    """The untied models measured in accelerate < 1.14's units, against today's estimate."""
    errors = [err(r["ours"], r["measured"]) for r in rows]
    lines = [
        "",
        "## FSDP2 units of accelerate < 1.14 (untied models, bench/measure/sharded.py)",
        "",
        "The estimate follows accelerate >= 1.14 (the rows marked `(accelerate layout)` in the "
        "per-rank table), which carves an untied model's embedding and [final norm, lm_head] "
        "into units of their own. Before 1.14 the root unit held both, gathered from forward "
        "to the end of backward; these runs measure that layout, which an older accelerate "
        "still makes, against the same estimate: under by "
        f"{-min(e for e in errors if e is not None):.1f}% at worst, median "
        f"{statistics.median(e for e in errors if e is not None):+.1f}% (n={len(rows)}).",
        "",
        "| model | precision | FSDP | world | seq | ckpt | measured GB | ours |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r["plan"]
        lines.append(
            f"| {r['model']} | {recipe_name(p)} | {p.fsdp} | {p.world} | {p.seq_len} | "
            f"{'on' if p.grad_ckpt else 'off'} | {r['measured'] / 1e9:.3f} | "
            f"{fmt_pct(err(r['ours'], r['measured']))} |"
        )
    return lines


def is_sharded(plan: Plan) -> bool:
    return plan.strategy != "ddp" or plan.world > 1


def per_rank_section(rows: list[dict[str, Any]], validation: list[dict[str, Any]]) -> list[str]:
    """Sharded runs: one rank's peak (every rank does the same work on its own batch)."""
    if not rows:
        return []
    lines = [
        "",
        "## Per rank: FSDP (bench/measure/sharded.py) and DeepSpeed ZeRO",
        "",
        "One rank's peak allocated bytes in a data-parallel FSDP run, measured on a CPU with "
        "PyTorch's fake process group under FakeTensorMode (one process standing for any "
        "rank), against the estimate for the same plan. Validated first against real "
        "multi-process gloo runs of a 4-layer model (below). Mixed precision is FSDP2's "
        "MixedPrecisionPolicy (bf16 units, fp32 or bf16 reduce) over fp32 parameters, as "
        "accelerate upcasts them, and FSDP1's MixedPrecision (param and buffer dtype bf16, "
        "bf16 or fp32 reduce) over fp32 flat parameters with the forward under autocast, as "
        "accelerate prepares it (trainmem.core.recipes; FSDP1 runs on a CPU given "
        "device_id=cpu, which torch 2.13's _init_utils.py _init_device_handle otherwise "
        "refuses). **Derived from source, not measured:** DDP's gradient buckets and NCCL's "
        "own buffers (outside PyTorch's allocator). Units are one per decoder layer and the "
        "root, except the rows marked `(accelerate layout)`: accelerate >= 1.14's own "
        "fsdp2_prepare_model (run here from accelerate 1.16), which makes an untied model's "
        "input embedding a unit of its own and [final norm, lm_head] one never resharded after "
        "forward, as the estimate models it for the stacks that run accelerate's "
        "(trainmem.core.sharding.accelerate_carves). Untied models in accelerate < 1.14's "
        "units are in a section of their own at the end.",
        "",
        "| world | n | median | worst |",
        "|---|---|---|---|",
    ]
    for world in sorted({r["plan"].world for r in rows}):
        s = summarize([r for r in rows if r["plan"].world == world], ["ours"])["ours"]
        lines.append(f"| {world} | {s['n']} | {s['median']:.2f}% | {s['worst']:.2f}% |")
    s = summarize(rows, ["ours"])["ours"]
    lines.append(f"| all | {s['n']} | {s['median']:.2f}% | {s['worst']:.2f}% |")
    lines += ["", "| recipe | n | median | worst |", "|---|---|---|---|"]
    for name in sorted({recipe_name(r["plan"]) for r in rows}):
        s = summarize([r for r in rows if recipe_name(r["plan"]) == name], ["ours"])["ours"]
        lines.append(f"| {name} | {s['n']} | {s['median']:.2f}% | {s['worst']:.2f}% |")
    if validation:
        lines += [
            "",
            "Fake process group against real gloo processes (same model, plan and tracker):",
            "",
            "A real gloo reduce-scatter all-reduces a clone of its whole input "
            "(ProcessGroupGloo::reduce_scatter_tensor_coalesced); NCCL does not. Where that "
            "clone sets the peak (fp32 reduce), the last column adds it to the fake run.",
            "",
            "| model | method | world | real, per rank (GB) | fake (GB) | fake - real "
            "| fake + gloo's clone - real |",
            "|---|---|---|---|---|---|---|",
        ]
        for v in validation:
            real = v["real"]
            worst = max(real, key=lambda b: abs(b - v["fake"]))
            clone = v.get("fake_gloo_clone")
            lines.append(
                f"| {v['model']} | {v['method']} | {v['world']} | "
                + ", ".join(f"{b / 1e9:.4f}" for b in real)
                + f" | {v['fake'] / 1e9:.4f} | {100 * (v['fake'] - worst) / worst:+.2f}% | "
                + ("" if clone is None else f"{100 * (clone - worst) / worst:+.2f}%")
                + " |"
            )
    lines += [
        "",
        "| model | method | recipe | FSDP | world | seq | ckpt | measured GB | ours |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r["plan"]
        if p.sharding == "zero":  # in zero_section, with DeepSpeed's own estimate
            continue
        lines.append(
            f"| {r['model']} | {p.method} | {recipe_name(p)} | {p.fsdp_version}: {p.fsdp} | "
            f"{p.world} | {p.seq_len} | "
            f"{'on' if p.grad_ckpt else 'off'} | {r['measured'] / 1e9:.3f} | "
            f"{fmt_pct(err(r['ours'], r['measured']))} |"
        )
    return lines


def compare_trace(record: dict[str, Any]) -> dict[str, Any] | None:
    """A traced allocation sequence (bench/measure/trace_events.py) and the synthetic one for
    the same plan, both through this commit's simulate()."""
    if "sequence" not in record:
        return None
    spec = spec_from_config(hf_config(record["model"]), record["model"]["name"])
    plan = to_plan(record).validated()
    traced = simulate(unpack(record["sequence"]))
    synthetic = simulate(step_events(plan, spec, step_sizes(plan, spec, "cpu")).events)
    return {
        "model": record["model"]["name"],
        "plan": plan,
        "execution": record["execution"],
        "moe": spec.is_moe,
        "events": traced.events_run,
        "tensors": record["traced"]["tracker_peak"],
        "estimate": estimate(plan, spec, "cpu").allocated_bytes,
        "traced": traced,
        "synthetic": synthetic,
        "measured": traced.peak_reserved,
        "ours": synthetic.peak_reserved,
    }


# A plan whose simulated peak swings with the batch: the allocator's packing, not the tensors.
SWINGING = Plan(
    model="meta-llama/Llama-3.1-8B", method="full", strategy="fsdp", gpus=8, device="h100-80gb"
)


def monotony_section(sweep: list[dict[str, Any]]) -> list[str]:
    """The simulated device peak against the batch for one plan: computed, not measured;
    then ``sweep``, a traced plan over batches (trace_events.py --subset sweep)."""
    from trainmem.core.estimator import device_peak_on
    from trainmem.devices.target import parse_device_spec
    from trainmem.sources import catalog

    entry = catalog.find(SWINGING.model)
    assert entry is not None
    spec = entry.spec()
    usable = parse_device_spec(SWINGING.device)[0].usable_bytes
    lines = [
        "",
        "### The simulated reserve is not monotone",
        "",
        "Computed by the simulator, not measured (`make accuracy` reruns it): a few tokens or "
        "examples more can reserve less, since best fit then packs the segments otherwise. "
        "Mostly by a percent or two (tests/core/test_step_events.py bounds it for one plan), "
        "but where the logits' fp32 tensors are gigabytes it swings by over a tenth. So "
        "the longest sequence and largest batch a report gives are searched from the plan's "
        "own value, on its side of its verdict. The last column runs the step within the "
        "H100's memory, where PyTorch's allocator frees its cached segments and retries "
        "before an out-of-memory error, and gives the verdict, judged on that run: a step the "
        "retry runs is tight, so a swing of the reserve with memory to spare does not make a "
        "smaller batch too big beside larger ones that fit (docs/planning.md). Llama-3.1-8B, "
        "full, FSDP on 8 GPUs, 2,048 tokens:",
        "",
        "| batch | tensors' peak GB | simulated reserved GB | fragmentation GB "
        "| on an H100 (85.5 GB) |",
        "|---|---|---|---|---|",
    ]
    for batch in range(12, 20):
        est = estimate(replace(SWINGING, batch=batch).validated(), spec)
        peak = est.device_peak
        assert peak is not None
        on = device_peak_on(est, usable, "gpu")
        verdict = judge_fit(on.bytes, "H100", usable, on.retried).verdict
        there = f"{verdict}: " + (
            "runs by the cache retry" if on.retried else ("fails" if on.failure else "runs")
        )
        lines.append(
            f"| {batch} | {peak.tensors / 1e9:.2f} | {peak.reserved / 1e9:.2f} "
            f"| {peak.fragmentation / 1e9:.2f} | {there} |"
        )
    return lines + sweep_table(sweep)


def sweep_table(rows: list[dict[str, Any]]) -> list[str]:
    """Traced against synthetic over one plan's batches: is the swing the real step's?"""
    if not rows:
        return []
    rows = sorted(rows, key=lambda r: r["plan"].batch)
    p = rows[0]["plan"]

    def drops(sims: list[Any]) -> str:  # the batches that reserve less than the one before
        found = [
            f"{r['plan'].batch} ({sims[i].peak_reserved / 1e9:.1f} GB against "
            f"{sims[i - 1].peak_reserved / 1e9:.1f})"
            for i, r in enumerate(rows)
            if i and sims[i].peak_reserved < sims[i - 1].peak_reserved
        ]
        return ", ".join(found) or "none"

    traced = [r["traced"] for r in rows]
    synthetic = [r["synthetic"] for r in rows]
    worst = max(rows, key=lambda r: abs(err(r["ours"], r["measured"])))
    spread = abs(err(worst["ours"], worst["measured"]))
    lines = [
        "",
        "Is the swing the real step's, or our sequence's? Measured: the real transformers "
        "step traced (FakeTensor, as in the table above; `trace_events.py --subset sweep`) "
        f"and run through the same simulator, {rows[0]['model']}, {p.method}, {p.precision}, "
        f"{p.seq_len:,} tokens, one device. Batches that reserve less than the one before: "
        f"traced {drops(traced)}; synthetic {drops(synthetic)}. The real step's sequence "
        "swings too, but not always where ours does: near such a point the simulated "
        f"reserve can be off by {spread:.0f}% "
        f"(batch {worst['plan'].batch}). Only a GPU run can show PyTorch's own reserve.",
        "",
        "| batch | tensors' peak GB | traced: reserved GB | fragmentation GB "
        "| synthetic: reserved GB | fragmentation GB | error |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| {r['plan'].batch} | {r['tensors'] / 1e9:.3f} | {reserve_cells(r)} |")
    return lines


def reserve_cells(r: dict[str, Any]) -> str:
    """A traced row's reserve and fragmentation, traced then synthetic, and the error."""
    traced, synthetic = r["traced"], r["synthetic"]
    return (
        f"{traced.peak_reserved / 1e9:.3f} | {traced.fragmentation_at_peak / 1e9:.3f} | "
        f"{synthetic.peak_reserved / 1e9:.3f} | {synthetic.fragmentation_at_peak / 1e9:.3f} "
        f"| {fmt_pct(err(r['ours'], r['measured']))}"
    )


def trace_section(rows: list[dict[str, Any]]) -> list[str]:
    """Device peak: the synthetic allocation sequence against the traced one."""
    if not rows:
        return []
    lines = [
        "",
        "## Device peak: synthetic vs traced allocation sequence (bench/measure/trace_events.py)",
        "",
        "The device peak is what PyTorch's caching allocator reserves at the step's worst "
        "moment (trainmem.core.allocator simulates it; trainmem.core.step_events builds the "
        "step's ordered allocations and frees from the estimator's sizes). Here the real "
        "sequence was recorded instead: every tensor storage's allocation and free, in order, "
        "over two training steps (the first without optimizer state) from the loaded model "
        "on, of the real transformers / PEFT step on a CPU (small random Llama and Qwen2 "
        "models run for real, real sizes as FakeTensor runs of the same code, mixture-of-"
        "experts models too: transformers 5 runs their experts through grouped_mm, whose "
        "shapes need no routing; `--subset moe`; QLoRA too, bitsandbytes' 4-bit load on "
        "fake tensors, trainmem.probe.fake4bit, whose steps match a real load's in "
        "tests/measure/test_fake_qlora.py; `--subset qlora`). Both sequences "
        "run through the same simulator (default `PYTORCH_CUDA_ALLOC_CONF`); error = "
        "(synthetic - traced) / traced peak reserved. Fragmentation: reserved but holding "
        "no block at the moment the reserve peaks; the two sequences may reach their peaks at "
        "different moments, so it can differ far more than the reserve does (the LoRA runs at "
        "real sizes). `estimate`: the estimator's allocated peak against the traced tensors' "
        "peak over the same two steps. **Not in either sequence:** the CUDA context and cuBLAS / "
        "cuBLASLt workspaces (the estimator adds them to the device peak), and what a CPU "
        "trace cannot show: scratch allocated and freed inside one kernel, and the CUDA-only "
        "paths (flash / memory-efficient SDPA, which save a log-sum-exp where the CPU's "
        "math path keeps the attention weights; fused AdamW's CUDA kernel; eager softmax's "
        "fp16-to-fp32 upcast). A GPU run's `torch.cuda.max_memory_reserved` is the check "
        "still to make. The device peak a plan prints is the synthetic reserve plus the "
        "runtime: cuBLAS's workspace (8 MiB + 128 KiB, 32 MiB on compute capability 9-12) and "
        "cuBLASLt's 1 MiB, from aten/src/ATen/cuda/CublasHandlePool.cpp and allocated "
        "through the simulated allocator, and the CUDA context outside it (600 MiB, a typical "
        "figure under lazy loading, not measured here; `calibrate` measures it on a GPU), "
        "with, for a multi-GPU plan, NCCL's own buffers beside it (derived from NCCL 2.30.7's "
        "source with typical channel counts, trainmem.core.nccl; not measured).",
        "",
        "| execution | n | median | worst |",
        "|---|---|---|---|",
    ]
    for execution in ("real", "fake"):
        subset = [r for r in rows if r["execution"] == execution]
        if subset:
            s = summarize(subset, ["ours"])["ours"]
            lines.append(f"| {execution} | {s['n']} | {s['median']:.2f}% | {s['worst']:.2f}% |")
    for label, part in (
        ("MoE", [r for r in rows if r["moe"]]),
        ("QLoRA", [r for r in rows if r["plan"].method == "qlora"]),
    ):
        if part:
            s = summarize(part, ["ours"])["ours"]
            lines.append(
                f"| of which {label} | {s['n']} | {s['median']:.2f}% | {s['worst']:.2f}% |"
            )
    s = summarize(rows, ["ours"])["ours"]
    lines += [
        f"| all | {s['n']} | {s['median']:.2f}% | {s['worst']:.2f}% |",
        "",
        "| model | method | precision | seq | batch | ckpt | attn | run | events "
        "| tensors' peak GB | estimate | traced: reserved GB | fragmentation GB "
        "| synthetic: reserved GB | fragmentation GB | error |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r["plan"]
        lines.append(
            f"| {r['model']} | {p.method} | {p.precision} | {p.seq_len} | {p.batch} | "
            f"{'on' if p.grad_ckpt else 'off'} | {p.attn} | {r['execution']} | {r['events']} | "
            f"{r['tensors'] / 1e9:.3f} | {fmt_pct(err(r['estimate'], r['tensors']))} | "
            f"{reserve_cells(r)} |"
        )
    return lines


def mlx_section(rows: list[dict[str, Any]]) -> list[str]:
    """The mlx stack: real mlx-lm steps on MLX's CPU build (bench/measure/mlx_measure.py)."""
    if not rows:
        return []
    s = summarize(rows, ["ours"])["ours"]
    lines = [
        "",
        "## The mlx stack: mlx-lm on MLX's CPU build (bench/measure/mlx_measure.py)",
        "",
        "Real mlx-lm 0.32.2 training steps (its own compiled step, `mlx_lm/tuner/trainer.py`) "
        "of small random Llama and Qwen2 models on MLX 0.32.4's CPU build: "
        "`mx.get_peak_memory()` over the second step against the estimate "
        "(trainmem.core.mlx_step, CPU kernels). **What only a Mac can show:** Metal's "
        "allocator rounds each buffer over 16 KiB to whole pages and keeps a buffer cache up "
        "to its memory limit (`mlx/backend/metal/allocator.cpp`), its fused attention and "
        "`mx.fast.cross_entropy` kernels keep other buffers than the CPU's ops, and the "
        "wired-memory limit is macOS's; none of that is measured here.",
        "",
        f"{s['n']} steps: median {s['median']:.2f}%, worst {s['worst']:.2f}%.",
        "",
        "The step's peak beyond the saves (4 logits buffers; the last layer's backward "
        "started while they are alive) is measured by bench/measure/mlx_peak_terms.py "
        "(bench/results/mlx_peak_terms.txt). DoRA with checkpointing peaks at the saves, one "
        "recomputed layer and the loss, without the last layer's backward on top, and on a "
        "16-bit model keeps an fp32 copy of each trained layer's adapted weights (the upcast "
        "in tuner/dora.py reads only the weight mx.checkpoint captures): both measured in "
        "these steps and counted that way, their mechanism in MLX's evaluation not traced; "
        "the 1024-token DoRA steps were measured after the terms were set. Known residual: "
        "full fine-tunes are 3-6% under (not found).",
        "",
        "| fine-tune | n | median | worst |",
        "|---|---|---|---|",
    ]

    def kind(p: Plan) -> str:
        quantized = f" q{p.mlx_bits}" if p.method == "qlora" else ""
        return ("dora" if p.dora else p.method) + quantized

    for name in sorted({kind(r["plan"]) for r in rows}):
        k = summarize([r for r in rows if kind(r["plan"]) == name], ["ours"])["ours"]
        lines.append(f"| {name} | {k['n']} | {k['median']:.2f}% | {k['worst']:.2f}% |")
    lines += [
        "",
        "| model | fine-tune | dtype | opt | seq | batch | ckpt | num_layers | measured GB "
        "| ours |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        p = r["plan"]
        lines.append(
            f"| {r['model']} | {kind(p)} r{p.lora_rank} | {p.precision} | {p.optimizer} | "
            f"{p.seq_len} | {p.batch} | {'on' if p.grad_ckpt else 'off'} | "
            f"{p.mlx_num_layers} | {r['measured'] / 1e9:.4f} | "
            f"{fmt_pct(err(r['ours'], r['measured']))} |"
        )
    return lines


def zero_section(rows: list[dict[str, Any]]) -> list[str]:
    """DeepSpeed ZeRO per rank (bench/measure/deepspeed_zero.py), beside DeepSpeed's own
    model-state estimate for the same model and world."""
    zero = [r for r in rows if r["plan"].sharding == "zero"]
    if not zero:
        return []
    s = summarize(zero, ["ours", "deepspeed"])
    lines = [
        "",
        "## Per rank: DeepSpeed ZeRO (bench/measure/deepspeed_zero.py)",
        "",
        "Real 2- and 4-process gloo runs of DeepSpeed 0.19.8 on its CPU accelerator, bf16, "
        "torch's fused AdamW (no compiled DeepSpeed ops), small random Llama and Qwen2 "
        "models; each rank tracked with the FSDP runs' tracker; the record is the worst "
        "rank. Under offload the host-side buffers (those DeepSpeed pins, the fp32 "
        "partitions, the optimizer's states and what it allocates while stepping) are left "
        "out of the per-GPU peak. `DeepSpeed's estimate`: "
        "estimate_zero2_model_states_mem_needs / estimate_zero3_model_states_mem_needs "
        "(additional_buffer_factor 1), model states only, so it misses activations, logits, "
        "buckets and temporaries. **Still derived:** NCCL's own buffers, CUDA streams' "
        "overlap (overlap_comm's second bucket is measured, its timing is not), pinned "
        "host memory's page-locking, DeepSpeedCPUAdam.",
        "",
        f"ours: n={s['ours']['n']}, median {pct(s['ours']['median'])}, worst "
        f"{pct(s['ours']['worst'])}; DeepSpeed's estimate: median "
        f"{pct(s['deepspeed']['median'])}, worst {pct(s['deepspeed']['worst'])}.",
        "",
        "| model | stage | offload | buckets | world | ckpt | measured GB (ranks) | ours "
        "| DeepSpeed's estimate | its estimate vs measured states before the step "
        "| host RAM per process, measured GB | ours |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in zero:
        p = r["plan"]
        ranks = ", ".join(f"{b / 1e9:.3f}" for b in r.get("ranks") or [r["measured"]])
        buckets = "auto" if p.reduce_bucket < 0 else "DeepSpeed's"
        lines.append(
            f"| {r['model']} | {p.zero} | {p.offload} | {buckets}"
            f"{' + overlap' if p.overlap_comm else ''} | {p.world} | "
            f"{'on' if p.grad_ckpt else 'off'} | {ranks} | "
            f"{fmt_pct(err(r['ours'], r['measured']))} | "
            f"{fmt_pct(err(r['deepspeed'], r['measured']))} | "
            f"{fmt_pct(err(r['deepspeed'], r['states']) if r['states'] else None)} | "
            + (
                f"{r['host'] / 1e9:.3f} | {fmt_pct(err(r['host ours'], r['host']))} |"
                if r["host"]
                else "- | - |"
            )
        )
    return lines


def render(
    rows: list[dict[str, Any]],
    meta: list[dict[str, Any]],
    command: str,
    sharded: list[dict[str, Any]] | None = None,
    validation: list[dict[str, Any]] | None = None,
    traces: list[dict[str, Any]] | None = None,
    sweep: list[dict[str, Any]] | None = None,
) -> str:
    tools = ["ours", "rule of thumb", *PEERS]
    lines = ["# Accuracy against measured training steps", ""]
    lines += [
        "Peak allocated memory (live tensor bytes) of one measured training step, against "
        "each tool's prediction for the same model and plan. Error = (predicted - measured) "
        "/ measured. `n/a`: the tool has no answer for that plan.",
        "",
        f"Reproduce this page: `{command}` (no torch needed). Re-measure: `make measure` "
        "(see `bench/measure/README.md`: how the tracker was validated to the byte, and how "
        "fake-tensor runs were checked against real ones).",
        "",
        "**What was measured.** Every step ran in PyTorch on a CPU (small models for real, "
        "larger ones and long sequences as shape-only FakeTensor runs of the same code), with "
        "a dispatch-mode tracker summing unique live tensor storages: the quantity "
        "`torch.cuda.max_memory_allocated` reports on a GPU. What a CPU run cannot show is "
        "the device-only part of the `device` peak (CUDA context, allocator reserve), and "
        "kernels that keep different tensors on CUDA; the one such kernel met here is "
        "dropout (an fp32 noise tensor on CPU, a 1-byte mask on CUDA), which the estimator "
        "models per backend and is compared here with its CPU form. No GPU has been "
        "available to this project yet: the CUDA subset (`harness.py --device cuda "
        "--subset gpu`) is ready and unrun.",
        "",
        "Peers are re-implemented from their published sources in "
        "`bench/accuracy/peers.py` (each cited there); `rule of thumb` is the guide's rule.",
        "",
        "## Summary (absolute error)",
        "",
        "| tool | plans answered | median | worst | ours on the same plans (median, worst) |",
        "|---|---|---|---|---|",
    ]
    for tool, s in summarize(rows, tools).items():
        same = [r for r in rows if r[tool] is not None]
        o = summarize(same, ["ours"])["ours"]
        ours = "n/a" if o["median"] is None else f"{o['median']:.2f}%, {o['worst']:.2f}%"
        lines.append(
            f"| {tool} | {s['n']} / {len(rows)} | {pct(s['median'])} | {pct(s['worst'])} | {ours} |"
        )
    lines += [
        "",
        "### By method (ours)",
        "",
        "| method | n | median | worst |",
        "|---|---|---|---|",
    ]
    for method in ("full", "lora", "qlora"):
        subset = [r for r in rows if r["plan"].method == method]
        if subset:
            s = summarize(subset, ["ours"])["ours"]
            lines.append(f"| {method} | {s['n']} | {s['median']:.2f}% | {s['worst']:.2f}% |")
    lines += [
        "",
        "### By training stack (ours)",
        "",
        "`trainer`: the Hugging Face Trainer's step (the model output dropped before backward; "
        "the harness's own step and, from `bench/measure/real_stacks.py`, the real "
        "`Trainer.train()`); `trl`: TRL 1.16's real `SFTTrainer` with its defaults (a model "
        "path loaded in fp32 under bf16 autocast, its chunked loss through the torch path a "
        "CPU runs); `loop`: a hand-written loop that keeps `out` (logits, and the KV cache "
        "without checkpointing) alive through backward and the optimizer step. Not measured "
        "here, derived from source only: the `fused` loss (Liger's Triton kernels) and "
        "flash-attention-2 / flex attention, which need a GPU.",
        "",
        "| stack | n | median | worst |",
        "|---|---|---|---|",
    ]
    for stack in STACKS:
        subset = [r for r in rows if r["plan"].stack == stack]
        if subset:
            s = summarize(subset, ["ours"])["ours"]
            lines.append(f"| {stack} | {s['n']} | {s['median']:.2f}% | {s['worst']:.2f}% |")
    lines += ["", "## Measurements", ""]
    head = ["model", "method", "precision", "opt", "seq", "batch", "ckpt", "attn", "measured GB"]
    head[1] = "method (rank, targets, dropout)"
    lines.append("| " + " | ".join(head + tools) + " |")
    lines.append("|" + "---|" * (len(head) + len(tools)))
    for r in rows:
        p = r["plan"]
        cells = [
            r["model"],
            p.method
            + (
                f" r{p.lora_rank} {p.lora_targets} {p.lora_dropout:g}"
                + (" kbit-prep" if p.method == "qlora" and p.kbit_prep else "")
                + (" no-double-quant" if p.method == "qlora" and not p.double_quant else "")
                + (f" {p.quant}" if p.method == "qlora" and p.quant != "nf4" else "")
                + (f" save {p.modules_to_save}" if p.modules_to_save else "")
                + (" fp32 base" if p.fp32_base and p.precision != "fp32" else "")
                if p.method != "full"
                else ""
            )
            + ("" if p.stack == "trainer" else f", {p.stack}")
            + ("" if p.loss_kind == "standard" else f", {p.loss_kind} loss"),
            p.precision,
            p.optimizer,
            str(p.seq_len),
            str(p.batch),
            "on" if p.grad_ckpt else "off",
            p.attn,
            f"{r['measured'] / 1e9:.3f}",
        ]
        cells += [fmt_pct(err(r[t], r["measured"])) for t in tools]
        lines.append("| " + " | ".join(cells) + " |")
    lines += per_rank_section(sharded or [], validation or [])
    lines += zero_section(sharded or [])
    lines += trace_section(traces or [])
    lines += monotony_section(sweep or [])
    lines += published_cuda_section()
    lines += unsloth_section()
    lines += ["", "## Where the measurements come from", ""]
    for m in meta:
        lines.append(f"- `{m['file']}`: {m['machine']}; versions {m['versions']}; {m['command']}")
    lines.append("")
    return "\n".join(lines)


def frameworks_section(records: list[dict[str, Any]]) -> list[str]:
    """The frameworks' own entry points on a published-style config file, against
    ``plan --from`` on the same file (bench/measure/frameworks_axolotl.py and
    frameworks_llama_factory.py): the whole path from file to bytes."""
    if not records:
        return []
    lines = [
        "",
        "## From the file to the bytes: the frameworks' own entry points",
        "",
        "Each framework's published LoRA example, and axolotl's QLoRA one (the file is in "
        "the results record), with a "
        "tiny random Llama and a local alpaca file, run through the framework's own entry "
        "point on the CPU, the tracker over step 2 of the Trainer it builds; then "
        "`trainmem-tui plan --from FILE --json` on the same file from the same folder. "
        "`plan --from` plans a GPU (CUDA kernels, a 16-bit LoRA base where the framework "
        "loads one on a GPU); `same plan, as run` is that plan estimated with the CPU "
        "kernels (dropout's fp32 noise tensor) and the dtype the run's hidden states had. "
        "Reproduce: the venv commands in each script's docstring (it prints them when it "
        "runs). The QLoRA runs (bitsandbytes 0.50.2's CPU backend, bf16 autocast) confirm "
        "axolotl's dtypes as planned: after its load only the LoRA adapters are fp32, the "
        "norms, embed_tokens and lm_head bf16 again (the record's param_dtypes); their "
        "remaining shortfall is not explained (bitsandbytes' CPU kernels are not modelled).",
        "",
        "| framework | file | plan --from read | measured MB | plan --from | same plan, as run |",
        "|---|---|---|---|---|---|",
    ]
    for rec in records:
        p = rec["plan_from"]
        m = rec.get("measured")
        if not m or "allocated_bytes" not in p:
            why = rec.get("error") or p.get("error", "")
            lines.append(
                f"| {rec['framework']} {rec['framework_version']} | "
                f"{rec['config_file']} | not run: {why[:160]} | | | |"
            )
            continue
        values = {k: v for k, v in p["plan"].items() if k in PLAN_FIELDS and v is not None}
        as_run = m.get("hidden_states_dtype") == "float32" and not m.get("autocast_in_forward")
        if as_run and values.get("precision") != "fp32":
            values["precision"] = "fp32"
        plan = Plan(**{**values, "model": "tiny"}).validated()
        spec = spec_from_config(rec["model_config"], "tiny")
        cpu = estimate(plan, spec, "cpu").allocated_bytes
        read = (
            f"{plan.method} r{plan.lora_rank} {plan.lora_targets}, seq {plan.seq_len} x "
            f"{plan.batch}, ckpt {'on' if plan.grad_ckpt else 'off'}, {p['plan']['precision']}"
        )
        lines.append(
            f"| {rec['framework']} {rec['framework_version']} | {rec['config_file']} | {read} | "
            f"{m['peak_allocated_bytes'] / 1e6:.2f} | "
            f"{fmt_pct(err(p['allocated_bytes'], m['peak_allocated_bytes']))} | "
            f"{fmt_pct(err(cpu, m['peak_allocated_bytes']))} |"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    rows, meta = [], []
    sharded: list[dict[str, Any]] = []
    validation: list[dict[str, Any]] = []
    mlx: list[dict[str, Any]] = []  # the mlx stack's steps: a table of their own
    traces: list[dict[str, Any]] = []
    sweep: list[dict[str, Any]] = []  # one plan traced over batches: the monotony section's
    frameworks: list[dict[str, Any]] = []
    loads: list[dict[str, Any]] = []  # 4-bit loads of MoE models: what stays 16-bit
    before_carving: list[dict[str, Any]] = []  # accelerate < 1.14's FSDP2 units, untied
    for path in args.results:
        data = json.loads(path.read_text())
        if data.get("kind") == "frameworks":  # file-to-bytes runs: a section of their own
            frameworks += data["records"]
        if data.get("kind") == "bnb-load":
            loads += data["records"]
        meta.append(
            {
                "file": str(path),
                "machine": data.get("machine"),
                "versions": data.get("versions"),
                "command": data.get("command"),
            }
        )
        # CPU measurements are compared with the CPU kernels' tensors (dropout keeps an fp32
        # noise tensor there, a 1-byte mask on CUDA); everything else is the same model.
        kernels = "cuda" if (data.get("machine") or {}).get("device") == "cuda" else "cpu"
        gpu = None  # a CUDA run's GPU and measured context, for its device-peak rows
        if kernels == "cuda":
            gpu = {**data["machine"], "cuda_context": data.get("cuda_context")}
        seen = set()
        for record in data["records"] if data.get("kind") not in ("frameworks", "bnb-load") else []:
            if (traced := compare_trace(record)) is not None:
                (sweep if data.get("kind") == "sweep" else traces).append(traced)
                continue
            key = record["id"].rsplit("/", 1)[0]  # a fake run repeating a real one
            if key in seen:
                continue
            row = compare(record, kernels, gpu)
            if row:
                seen.add(key)
                if row["plan"].stack == "mlx":
                    mlx.append(row)
                elif old_accelerate(record, row["plan"]):
                    before_carving.append(row)
                else:
                    (sharded if is_sharded(row["plan"]) else rows).append(row)
                real = [
                    r.get("peak_allocated_bytes") for r in record["measured"].get("real_ranks", [])
                ]
                if real and all(real):
                    validation.append(
                        {
                            "model": row["model"],
                            "method": row["plan"].method
                            + (
                                ""
                                if recipe(row["plan"]) is None
                                else f", {recipe_name(row['plan'])}"
                            ),
                            "world": row["plan"].world,
                            "real": real,
                            "fake": row["measured"],
                            "fake_gloo_clone": record["measured"].get(
                                "fake_with_gloo_input_clone_bytes"
                            ),
                        }
                    )
    command = "python bench/accuracy/compare.py " + " ".join(map(str, args.results))
    if args.out:
        command += f" --out {args.out}"
    text = render(rows, meta, command, sharded, validation, traces, sweep)
    gpu_rows = cuda_section(rows + sharded)
    text += "\n".join([*gpu_rows, ""])[1:] if gpu_rows else ""
    text += "\n".join([*mlx_section(mlx), ""])[1:] if mlx else ""
    text += "\n".join([*frameworks_section(frameworks), ""])[1:] if frameworks else ""
    text += "\n".join([*bnb_load_section(loads), ""])[1:] if loads else ""
    if before_carving:
        text += "\n".join([*before_carving_section(before_carving), ""])[1:]
    if args.out:
        args.out.write_text(text)
    s = summarize(rows, ["ours", "rule of thumb", *PEERS])
    for tool, v in s.items():
        print(f"{tool:24s} n={v['n']:3d} median={v['median']} worst={v['worst']}")
    if sharded:
        v = summarize(sharded, ["ours"])["ours"]
        print(
            f"{'ours, per rank (FSDP)':24s} n={v['n']:3d} median={v['median']} worst={v['worst']}"
        )
    if traces:
        v = summarize(traces, ["ours"])["ours"]
        print(f"{'synthetic vs traced':24s} n={v['n']:3d} median={v['median']} worst={v['worst']}")
    if mlx:
        v = summarize(mlx, ["ours"])["ours"]
        print(f"{'ours, mlx stack':24s} n={v['n']:3d} median={v['median']} worst={v['worst']}")
    if not args.out:
        print(text)


if __name__ == "__main__":
    main()
