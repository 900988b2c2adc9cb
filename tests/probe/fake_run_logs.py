"""Run logs as the probe writes them, with chosen figures, for tests without torch or a GPU."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

MiB, GiB = 2**20, 2**30
H100 = "NVIDIA H100 80GB HBM3"
CONFIG = {  # a small Llama: the estimate is quick and exact to the config
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "vocab_size": 1024,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def run_record(
    *, device: str = "cuda", rank: int = 0, world: int = 1, gpu: str = H100, **plan: Any
) -> dict[str, Any]:
    names = {"cuda": gpu, "mps": "Apple MPS", "cpu": "CPU"}
    return {
        "format": 1,
        "kind": "run",
        "time": 1.0,
        "rank": rank,
        "local_rank": rank,
        "world_size": world,
        "pid": 1,
        "host": "test",
        "device": {
            "type": device,
            "index": 0,
            "name": names[device],
            "total_bytes": 80 * GiB,
            "cuda": "12.8" if device == "cuda" else None,
        },
        "peaks": "exact" if device == "cuda" else "sampled",
        "plan": {"method": "full", "seq_len": 128, "batch": 2, "precision": "bf16", **plan},
        "observed": [],
        "model": {"name": "tiny-llama", "config": CONFIG},
        "run": {},
        "versions": {"torch": "2.13.0", "transformers": "5.24.0"},
        "unknown": [],
    }


def step_record(
    step: int,
    *,
    allocated: int = 100 * MiB,
    reserved: int = 120 * MiB,
    context: int | None = 500 * MiB,
    free: int = 60 * GiB,
    total: int = 80 * GiB,
) -> dict[str, Any]:
    return {
        "kind": "step",
        "step": step,
        "time": 1.0 + step,
        "duration_s": 0.5,
        "allocated_bytes": allocated // 2,
        "reserved_bytes": reserved,
        "max_allocated_bytes": allocated,
        "max_reserved_bytes": reserved,
        "phases": {
            "forward": {"max_allocated_bytes": allocated // 2, "max_reserved_bytes": reserved},
            "backward": {"max_allocated_bytes": allocated, "max_reserved_bytes": reserved},
            "optimizer": {"max_allocated_bytes": allocated - 1, "max_reserved_bytes": reserved},
        },
        "driver_bytes": reserved + context if context is not None else None,
        "free_bytes": free,
        "total_bytes": total,
    }


def write_log(
    path: Path, run: dict[str, Any], steps: list[dict[str, Any]], end: bool = True
) -> Path:
    lines = [run, *steps, *([{"kind": "end", "time": 99.0, "steps": len(steps)}] if end else [])]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path
