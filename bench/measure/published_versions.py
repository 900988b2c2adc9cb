"""The published A100 runs' step (bench/accuracy/published_cuda.py) traced on the CPU with the
library versions the runs used, and with today's: does the tracker reproduce their measured
peak, and is the estimate's gap the versions'?

    python3 -m venv .published-venv
    .published-venv/bin/pip install torch==2.13.0 transformers==4.48.1 peft==0.13.2 \
        accelerate==1.0.1
    .published-venv/bin/python bench/measure/published_versions.py
    .venv/bin/python bench/measure/published_versions.py      # today's versions, same file

Each run is the harness's step (harness.run_case, FakeTensor execution: real shapes, no
data) of Mistral-7B-v0.1 as the one-GPU runs set it up (4,096 tokens, batch 4 and 8, bf16
weights, checkpointing, foreach AdamW; LoRA r 16 on q/k/v/o, dropout 0.1), its tracked peak
the quantity ``torch.cuda.max_memory_allocated`` reports; then two steps traced allocation by
allocation (trace_events.trace) and run through the simulated allocator, for what it
reserves. Not traceable here: the two-GPU runs
(FSDP1 needs a process group per rank), QLoRA (bitsandbytes' 4-bit weights cannot be fake
tensors) and flash-attention 2 (a CUDA kernel: sdpa runs instead; under checkpointing a
layer's attention saves live only in its own recompute). Records are kept per version set,
so the two commands above fill one file.

Under transformers 4.x the harness's transformers 5 calls are adapted to what 4.48.1 does:
``from_config(torch_dtype=)``, and ``gradient_checkpointing_enable()``, whose default there
is use_reentrant=True (modeling_utils.py:2539), followed, for a model with frozen weights, by
``enable_input_require_grads()`` as TRL 0.13's SFTTrainer calls it (trainer/sft_trainer.py).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any

# trainmem from this checkout where the venv has the runs' libraries and not trainmem
sys.path.append(str(Path(__file__).resolve().parents[2] / "src"))
import harness
import torch
import trace_events
import transformers

from trainmem.core.allocator import simulate
from trainmem.core.device_peak import with_workspaces
from trainmem.core.plan import Plan
from trainmem.core.runtime import built_in_figures

A100_BYTES = 80 * 2**30  # the runs' A100 80 GB
OUT = Path(__file__).resolve().parents[1] / "results" / "measure-cpu-published-versions.json"
BASE = Plan(
    model="Mistral-7B-v0.1",
    precision="bf16",
    seq_len=4096,
    grad_ckpt=True,
    optimizer="adamw-foreach",
    attn="sdpa",
)
LORA = {"lora_rank": 16, "lora_alpha": 16.0, "lora_dropout": 0.1, "lora_targets": "attention"}
QLORA = {**LORA, "method": "qlora", "quant": "nf4", "double_quant": True, "kbit_prep": True}
CASES = {  # id -> (method, batch): the one-GPU rows of published_cuda.RUNS
    "full/1x4": ("full", 4),
    "full/1x8": ("full", 8),
    "lora/1x4": ("lora", 4),
    "lora/1x8": ("lora", 8),
}
# With today's versions only: the runs' bitsandbytes 0.43.3 has no fake kernels, 0.50.2 loads
# a 4-bit base on fake tensors (trainmem.probe.fake4bit; TRL 0.13 prepared it for k-bit
# training on one GPU, as published_cuda.plan says)
TODAY_ONLY = {"qlora/1x4": ("qlora", 4), "qlora/1x8": ("qlora", 8)}


def mistral_v01() -> dict[str, Any]:
    """The reference entry of Mistral-7B-v0.3 with v0.1's vocabulary (32,000): the two share
    every other dimension. The sliding window stays off, as flash-attention 2 runs it at
    4,096 tokens (no mask is materialised)."""
    entry = dict(harness.load_models()["Mistral-7B-v0.3"])
    return {**entry, "name": "Mistral-7B-v0.1", "vocab_size": 32000}


def as_transformers_4() -> None:
    """The harness's transformers 5 calls, as transformers 4.48 makes them (module doc)."""

    def from_config(config: Any, dtype: torch.dtype, attn: str) -> torch.nn.Module:
        from transformers import AutoModelForCausalLM

        return AutoModelForCausalLM.from_config(config, attn_implementation=attn, torch_dtype=dtype)

    def enable_gc(model: torch.nn.Module) -> None:
        model.gradient_checkpointing_enable()  # type: ignore[operator]
        if not all(p.requires_grad for p in model.parameters()):
            model.enable_input_require_grads()  # type: ignore[operator]

    harness._from_config = from_config
    harness._enable_gc = enable_gc


def traced_reserve(entry: dict[str, Any], plan: Plan) -> tuple[int, int, bool]:
    """What the simulated allocator reserves for two traced steps of ``plan`` (every
    storage's allocation and free in order, trace_events.trace), with an A100's cuBLAS and
    cuBLASLt workspaces added where the loaded model ends, as the estimate adds them: with
    no limit, and within the A100 less the built-in CUDA context (where PyTorch frees its
    cached segments and retries before failing), and whether it failed there."""
    tracker, _facts = trace_events.trace(entry, plan, "fake")
    loaded = next(i for i, where in enumerate(tracker.where) if where.startswith("step 1"))
    events = with_workspaces(tracker.events, loaded, "ampere")
    capacity = A100_BYTES - built_in_figures("A100").context_bytes
    within = simulate(events, capacity=capacity, device_total=A100_BYTES, peak_segments=False)
    unlimited = simulate(events, peak_segments=False).peak_reserved
    return unlimited, within.peak_reserved, within.oom is not None


def versions() -> dict[str, str]:
    import peft

    found = {
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "peft": peft.__version__,
    }
    try:
        import bitsandbytes

        found["bitsandbytes"] = bitsandbytes.__version__
    except ImportError:
        pass
    return found


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if int(transformers.__version__.split(".")[0]) < 5:
        as_transformers_4()
    entry, found = mistral_v01(), versions()
    print(f"versions {found}; {platform.platform()}", flush=True)
    records = []
    cases = dict(CASES)
    if "bitsandbytes" in found and not transformers.__version__.startswith("4."):
        cases |= TODAY_ONLY  # bitsandbytes >= 0.45 has the fake kernels fake4bit needs
    for case, (method, batch) in cases.items():
        extra = {"lora": LORA, "qlora": QLORA}.get(method, {})
        fields = {"method": method, "batch": batch, **extra}
        plan = dataclasses.replace(BASE, **fields)  # type: ignore[arg-type]
        start = time.perf_counter()
        rec = harness.run_case(entry, plan, "fake")
        if "error" in rec:
            raise SystemExit(f"{case}: {rec['error']}")
        measured = rec["measured"]
        reserved, on_a100, failed = traced_reserve(entry, plan)
        records.append(
            {
                "id": case,
                "versions": found,
                "peak_allocated_bytes": measured["peak_allocated_bytes"],
                "peak_phase": measured["peak_phase"],
                "peak_op": measured["peak_op"],
                "adapter_dtype": measured.get("adapter_dtype"),
                "traced_reserved_bytes": reserved,
                "traced_reserved_on_a100_bytes": on_a100,
                "traced_oom_on_a100": failed,
            }
        )
        print(
            f"{case}: {measured['peak_allocated_bytes']:,} bytes at {measured['peak_op']}, "
            f"the traced sequence reserves {reserved:,}, on an A100 {on_a100:,}"
            f"{' (fails)' if failed else ''} ({time.perf_counter() - start:.0f} s)",
            flush=True,
        )
    kept = json.loads(args.out.read_text())["records"] if args.out.exists() else []
    libraries = ("torch", "transformers", "peft")  # other version sets of these stay

    def version_set(v: dict[str, str]) -> tuple[str | None, ...]:
        return tuple(v.get(name) for name in libraries)

    kept = [r for r in kept if version_set(r["versions"]) != version_set(found)]
    doc = {
        "kind": "published-versions",
        "command": "bench/measure/published_versions.py (see its docstring)",
        "records": kept + records,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
