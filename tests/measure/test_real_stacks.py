"""bench/measure/real_stacks.py end to end on a tiny Llama: one real Trainer step measured.

Needs torch + transformers + accelerate (skipped cleanly without them); the TRL case is skipped
where trl is not installed (the project venv has no trl; .measure-venv has).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "measure"))

pytestmark = pytest.mark.torch

TINY = {
    "name": "tiny-llama",
    "hf_id": "none",
    "architecture": "llama",
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 512,
    "tie_word_embeddings": False,
    "config_extra": {},
}


def _check(rec: dict) -> dict:
    assert "error" not in rec, rec.get("traceback_tail")
    assert rec["id"].startswith("tiny-llama/") and rec["id"].endswith("/real-stack")
    assert rec["model"]["config"]["model_type"] == "llama"
    for k in ("method", "precision", "optimizer", "seq_len", "batch", "grad_ckpt", "stack", "loss"):
        assert k in rec["plan"]
    m = rec["measured"]
    assert m["execution"] == "real"
    assert m["peak_allocated_bytes"] > m["params_bytes"] > 0
    assert sum(m["by_category_at_peak"].values()) == m["peak_allocated_bytes"]
    assert m["peak_phase"] in m["phase_peaks"]
    assert {"forward", "backward", "optimizer"} <= set(m["phase_peaks"])
    assert m["end_bytes"] <= m["start_bytes"] + 64  # the step frees what it made (bar scalars)
    return m


def test_real_trainer_step_tiny() -> None:
    import real_stacks as rs

    case = rs.RealCase(
        "tiny-llama", "trainer", rs._plan(precision="bf16-mixed", seq_len=16, batch=2)
    )
    m = _check(rs.run_case(TINY, case, top=5))
    st = m["stack"]
    assert st["native_amp"] and st["autocast_in_forward"]  # Trainer(bf16=True) via accelerate
    assert st["param_dtype_bytes"]["trainable"] == {"float32": m["params_bytes"]}
    assert st["lm_head_module_called"]
    assert st["optimizer_state_bytes"] >= 2 * m["params_bytes"]  # AdamW: exp_avg + exp_avg_sq


def test_real_sft_trainer_step_tiny() -> None:
    pytest.importorskip("trl")
    pytest.importorskip("datasets")
    import real_stacks as rs

    case = rs.RealCase(
        "tiny-llama",
        "trl",
        rs._plan(stack="trl", loss="chunked", precision="bf16-mixed", grad_ckpt=True, seq_len=16),
        source="path",
    )
    m = _check(rs.run_case(TINY, case, top=0))
    st = m["stack"]
    assert st["param_dtype_bytes"]["trainable"] == {"float32": m["params_bytes"]}  # TRL: fp32 load
    assert not st["lm_head_module_called"]  # the fused / chunked head
    assert st["gradient_checkpointing"]
