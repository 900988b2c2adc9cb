"""Validation of bench/measure/tracker.py on cases whose answer is known exactly.

Needs torch (skipped cleanly without it); `make test` and CI install the CPU build.
"""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "measure"))
from tracker import StorageTracker  # noqa: E402

pytestmark = pytest.mark.torch

N = 1024
B = 8
P = N * N * 4 + N * 4  # weight + bias, fp32
X = B * N * 4  # the input batch
STEPS = 2 * 4  # one fp32 scalar `step` tensor per parameter
LOSS = 4  # the fp32 scalar loss, kept alive as the Trainer keeps it


def _step(lin, opt, x, tr=None):
    ph = tr.phase if tr is not None else (lambda _n: contextlib.nullcontext())
    with ph("forward"):
        loss = lin(x).square().mean()
    with ph("backward"):
        loss.backward()
    with ph("optimizer"):
        opt.step()
    with ph("zero_grad"):
        opt.zero_grad(set_to_none=True)
    return loss


def _measure(variant: str):
    torch.manual_seed(0)
    lin = torch.nn.Linear(N, N)
    if variant == "fused":
        opt = torch.optim.AdamW(lin.parameters(), lr=1e-3, fused=True)
    else:
        opt = torch.optim.AdamW(lin.parameters(), lr=1e-3, fused=False, foreach=True)
    x = torch.randn(B, N)
    _step(lin, opt, x)  # warm-up: creates the optimizer states
    tr = StorageTracker(detail=True)
    tr.register_model_and_optimizer(lin, opt, extra=[x])
    with tr:
        loss = _step(lin, opt, x, tr)
    del loss
    return lin, opt, x, tr


@pytest.mark.parametrize("variant", ["fused", "foreach"])
def test_linear_adamw_exact(variant: str) -> None:
    _lin, _opt, _x, tr = _measure(variant)
    s = tr.summary()
    # registered before the step: weights + two moments + step tensors + input
    assert s["start_bytes"] == 3 * P + STEPS + X
    # everything allocated inside the step was freed again (weakref finalizers work)
    assert s["end_bytes"] == s["start_bytes"]
    assert s["phase_end_bytes"]["backward"] == 3 * P + STEPS + X + P + LOSS  # + gradients
    if variant == "fused":
        # the fused kernel allocates nothing visible: params + grads + 2 moments + steps
        assert s["phase_peaks"]["optimizer"] == 4 * P + STEPS + X + LOSS
        # the overall peak is in backward: the weight grad (about to become .grad),
        # the bias grad and grad_y (B x N) are alive together with the states
        assert s["peak_phase"] == "backward"
        assert s["peak_bytes"] == 4 * P + STEPS + X + LOSS + X + LOSS
    else:
        # foreach AdamW materialises sqrt(exp_avg_sq) for every parameter: one extra P
        assert s["peak_phase"] == "optimizer"
        assert s["peak_op"] == "aten._foreach_sqrt.default"
        assert s["peak_bytes"] == 5 * P + STEPS + X + LOSS
        cat = s["by_category_at_peak"]
        assert cat == {
            "parameters": P,
            "gradients": P,
            "optimizer": 2 * P + STEPS,
            "other": P + X + LOSS,
        }


@pytest.mark.parametrize("variant", ["fused", "foreach"])
def test_agrees_with_torch_memtracker(variant: str) -> None:
    try:
        from torch.distributed._tools.mem_tracker import MemTracker
    except Exception:  # pragma: no cover - torch built without distributed
        pytest.skip("torch.distributed._tools.mem_tracker unavailable")
    lin, opt, x, tr = _measure(variant)
    mt = MemTracker()
    mt.track_external(lin, opt, x)
    with mt:
        loss = _step(lin, opt, x)
    del loss
    total = next(iter(mt.get_tracker_snapshot("peak").values()))["Total"]
    assert total == tr.summary()["peak_bytes"]


def test_fake_matches_real_tiny_llama() -> None:
    """Same tracked peak for a real and a FakeTensorMode training step (tiny Llama)."""
    pytest.importorskip("transformers")
    import harness  # bench/measure/harness.py

    cfg = dict(
        architecture="llama",
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=128,
        vocab_size=512,
        tie_word_embeddings=False,
    )
    model_entry = {"name": "tiny-llama", "hf_id": "none", **cfg, "config_extra": {}}
    plan = harness.measured_plan("full", "bf16", "adamw", seq_len=32, batch=2)
    real = harness.run_case(model_entry, plan, execution="real")
    fake = harness.run_case(model_entry, plan, execution="fake")
    assert real["measured"]["peak_allocated_bytes"] == fake["measured"]["peak_allocated_bytes"]
    assert real["measured"]["peak_phase"] == fake["measured"]["peak_phase"]
