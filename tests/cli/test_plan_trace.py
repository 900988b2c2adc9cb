"""`plan --trace` end to end on a tiny Llama config.json: the real step traced in a child
process (trainmem.probe.trace) beside the analytic device peak. Needs torch + transformers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainmem.cli.main import main

pytestmark = pytest.mark.torch

TINY = {
    "model_type": "llama",
    "hidden_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 512,
    "vocab_size": 4096,
    "tie_word_embeddings": False,
    "max_position_embeddings": 1024,
}


def _traced(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """`plan --trace --json` of the tiny config on an H100 with ``args``: its JSON, the trace
    checked for what every trace holds."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    command = ["plan", "--model", str(config), *args, "--device", "h100-80gb", "--trace", "--json"]
    assert main(command) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    trace = out["trace"]
    assert trace["versions"]["torch"] and trace["versions"]["transformers"]
    assert trace["events"] > 100
    assert trace["reserved_bytes"] >= trace["allocated_peak_bytes"] >= trace["allocated_bytes"] > 0
    return out


def test_trace_beside_the_analytic_peak(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = _traced(tmp_path, capsys, "--method", "full", "--seq-len", "256")
    trace = out["trace"]
    assert trace["fragmentation_bytes"] == trace["reserved_bytes"] - trace["allocated_bytes"]
    assert trace["workspace_bytes"] == 32 * 2**20 + 2**20  # Hopper's cuBLAS + cuBLASLt
    assert trace["device_peak_bytes"] == trace["reserved_bytes"] + trace["context_bytes"]
    assert trace["nccl_bytes"] == 0  # one GPU: no NCCL
    assert trace["analytic_device_peak_bytes"] == out["peak"]["device_bytes"]
    # the weights alone are in the trace: 2 B a parameter (bf16) plus AdamW's two states
    assert trace["allocated_peak_bytes"] > 3 * 2 * out["model"]["params"]


def test_a_qlora_plan_is_traced_with_bitsandbytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The 4-bit base loaded on fake tensors (trainmem.probe.fake4bit): traced, with
    bitsandbytes' version named (the load itself: tests/measure/test_fake_qlora.py)."""
    bitsandbytes = pytest.importorskip("bitsandbytes")
    out = _traced(tmp_path, capsys, "--method", "qlora", "--seq-len", "1024")
    assert out["trace"]["versions"]["bitsandbytes"] == bitsandbytes.__version__


def test_untraceable_plan_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY))
    assert (
        main(["plan", "--model", str(config), "--method", "qlora", "--quant", "int8", "--trace"])
        == 2
    )
    err = capsys.readouterr().err
    assert err == "trainmem-tui plan: error: trace: quant int8 is not traced (nf4 and fp4 are)\n"


# A small Qwen3-MoE (transformers 5 runs its experts through grouped_mm by default, whose
# shapes do not depend on the routing, so fake tensors trace them).
TINY_MOE = {
    **TINY,
    "model_type": "qwen3_moe",
    "head_dim": 64,
    "moe_intermediate_size": 128,
    "num_experts": 8,
    "num_experts_per_tok": 2,
}


def test_moe_trace_builds_the_planned_experts(tmp_path: Path) -> None:
    from trainmem.core.allocator import Alloc
    from trainmem.core.plan import Plan
    from trainmem.probe.trace import trace_plan, traced_peak
    from trainmem.sources.resolve import resolve_model

    config = tmp_path / "config.json"
    config.write_text(json.dumps(TINY_MOE))
    spec = resolve_model(str(config))
    assert spec.is_moe
    for method in ("full", "lora"):
        plan = Plan(model=str(config), method=method, seq_len=128, batch=1, precision="bf16")
        trace = trace_plan(plan, spec)
        loaded = trace.events[: trace.loaded]
        ids = 128 * 8  # the input ids, int64
        weights = sum(e.size for e in loaded if isinstance(e, Alloc)) - ids
        if method == "full":  # every parameter the spec counts, in bf16, and the rotary
            assert 0 <= weights - 2 * spec.params <= 1024  # embedding's fp32 inv_freq buffers
        else:  # LoRA: the frozen bf16 model and its adapters (PEFT's fp32 casts come later)
            assert weights > 2 * spec.params
        peak = traced_peak(trace)
        assert peak.reserved >= peak.allocated_peak > weights
