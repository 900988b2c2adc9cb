"""What the peak of mlx-lm's compiled step holds beyond the saves, measured in the real step
(trainmem.core.mlx_step CPU_LOSS_BUFFERS and the last layer's backward term).

    .venv/bin/python bench/measure/mlx_peak_terms.py > bench/results/mlx_peak_terms.txt

Each figure is a difference of two real steps (bench/measure/mlx_measure.py run_case) that
differ in one size only, so what does not change cancels:

- logits buffers: the vocabulary doubled; the rise of ``peak - active before the step``
  (the weights and optimizer state are in the active figure) over one logits tensor's
  growth (tokens x added vocab x dtype bytes).
- the rest: ``peak - active - buffers x logits - trained layers x one layer's saves - the
  final norm``, per token, beside one layer's saves per token as trainmem counts them
  (core/mlx_step.py _per_token_saves and the attention probabilities); the hidden and MLP
  widths are varied to show it follows a layer, not the vocabulary or the layer count.

A standalone cross-entropy head (compiled alone) holds 5 fp32 / 7 16-bit logits buffers
at its peak; inside the whole step MLX's evaluation order gives the figures printed here.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "accuracy"))

import mlx_measure as mm
from compare import hf_config, spec_from_config, to_plan

from trainmem.core import mlx_step

CASE = {
    "model": "llama-tiny",
    "method": "lora",
    "dtype": "fp32",
    "ckpt": False,
    "num_layers": 2,
    "rank": 8,
    "optimizer": "adam",
    "bits": 0,
    "seq": 128,
    "batch": 2,
}


def step(case: dict[str, Any], **cfg: Any) -> tuple[int, dict[str, Any]]:
    """(peak - active before the step, the record) of one real step with ``cfg`` changed."""
    base = dict(mm.MODELS[case["model"]])
    mm.MODELS[case["model"]] = {**base, **cfg}
    try:
        m = mm.run_case(case)
        return m["peak_allocated_bytes"] - m["active_start_bytes"], mm.record(case, m)
    finally:
        mm.MODELS[case["model"]] = base


def one_layer(rec: dict[str, Any]) -> tuple[float, float]:
    """(one layer's saves per token, the final norm per token) as trainmem counts them."""
    spec = spec_from_config(hf_config(rec["model"]), rec["model"]["name"])
    plan = to_plan(rec).validated()
    d = mlx_step.dtype_bytes(plan)
    saves = mlx_step._per_token_saves(replace(plan, dora=False), spec, d)
    scores = plan.batch * spec.heads * plan.seq_len**2 * d / (plan.seq_len * plan.batch)
    return saves + scores, spec.hidden * d


def main() -> None:
    import mlx.core as mx

    print(f"MLX {mx.__version__}, mlx-lm {mm.version('mlx-lm')}, on {mx.default_device()}")
    print("logits buffers at the peak (vocabulary 8192 -> 16384, seq 128 x batch 2):")
    buffers: dict[tuple[str, str], float] = {}
    for model, dtype in (("llama-tiny", "fp32"), ("qwen2-tiny", "fp32"), ("qwen2-tiny", "bf16")):
        case = {**CASE, "model": model, "dtype": dtype}
        tokens, d = case["seq"] * case["batch"], 4 if dtype == "fp32" else 2
        low, _ = step(case, vocab_size=8192)
        high, _ = step(case, vocab_size=16384)
        buffers[model, dtype] = (high - low) / (tokens * 8192 * d)
        print(f"  {model} {dtype} lora nl2: {buffers[model, dtype]:.2f}")
    print("the rest of the peak per token, beside one layer's saves (llama, fp32 lora nl2,")
    print("vocabulary 8192, less the logits buffers measured above):")
    for layers, hidden, mlp in (
        (8, 128, 352),
        (8, 256, 704),
        (8, 384, 1024),
        (8, 256, 1408),
        (4, 256, 704),
        (16, 256, 704),
    ):
        heads = hidden // 32
        cfg = {
            "num_hidden_layers": layers,
            "hidden_size": hidden,
            "intermediate_size": mlp,
            "num_attention_heads": heads,
            "num_key_value_heads": heads // 2,
        }
        extra, rec = step(CASE, **cfg)
        tokens = CASE["seq"] * CASE["batch"]
        layer, norm = one_layer(rec)
        rest = (
            extra / tokens
            - buffers["llama-tiny", "fp32"] * 8192 * 4
            - CASE["num_layers"] * layer
            - norm
        )
        print(
            f"  layers {layers:2d} hidden {hidden} mlp {mlp:4d}: rest {rest:7.0f} B/token, "
            f"one layer's saves {layer:7.0f} B/token ({rest / layer:.2f} layers)"
        )


if __name__ == "__main__":
    main()
