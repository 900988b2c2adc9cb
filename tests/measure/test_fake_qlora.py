"""A QLoRA step on fake tensors (trainmem.probe.fake4bit: bitsandbytes' 4-bit load on shapes
only) against the same step run for real: transformers' from_pretrained quantizing real
weights with bitsandbytes on the CPU. The tracked peaks agree, so the fake load is what
`plan --trace` and bench/measure/trace_events.py trace for QLoRA at real sizes.

Needs torch, transformers, peft and bitsandbytes (skipped cleanly without them).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("bitsandbytes")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench" / "measure"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

pytestmark = pytest.mark.torch

# Fake execution under checkpointing keeps one hidden-wide tensor (batch x seq x hidden,
# bf16) more than the real step, LoRA on a 16-bit base alike (measured: 131,072 bytes here).
HIDDEN_ACTIVATION = 2 * 256 * 128 * 2


@pytest.mark.parametrize(
    ("arch", "kbit_prep", "grad_ckpt"),
    [
        ("llama", True, True),
        ("llama", False, False),
        ("llama", False, True),
        ("qwen2", True, True),  # q/k/v biases: loaded as they are beside the packed weights
    ],
)
def test_a_fake_4bit_load_steps_as_the_real_one(
    arch: str, kbit_prep: bool, grad_ckpt: bool
) -> None:
    import harness
    from tiny_llama import TINY

    entry = {**TINY, "name": f"tiny-{arch}", "architecture": arch, "model_type": arch}
    plan = harness.qlora(kbit_prep, seq_len=256, batch=2, grad_ckpt=grad_ckpt)
    real, fake = (harness.run_case(entry, plan, execution) for execution in ("real", "fake"))
    assert "error" not in real and "error" not in fake, (real, fake)
    r, f = real["measured"], fake["measured"]
    # the packed weights, their quantization state and the adapters: byte for byte
    assert (f["params_bytes"], f["trainable_params"]) == (r["params_bytes"], r["trainable_params"])
    assert f["adapter_dtype"] == r["adapter_dtype"]
    slack = HIDDEN_ACTIVATION if grad_ckpt else 0
    for phase, real_peak in r["phase_peaks"].items():
        assert 0 <= f["phase_peaks"][phase] - real_peak <= slack, phase


def test_the_trace_of_a_qlora_plan_names_bitsandbytes_and_dequantizes_per_op() -> None:
    """`plan --trace` of a QLoRA plan: bitsandbytes' version recorded, and the CUDA matmul's
    dequantized weights (one per linear and op, the largest the MLP's) come and go."""
    from trainmem.core.allocator import Alloc
    from trainmem.core.plan import Plan
    from trainmem.probe.trace import trace_plan
    from trainmem.sources import catalog

    model = "HuggingFaceTB/SmolLM2-135M"
    entry = catalog.find(model)
    assert entry is not None
    spec = entry.spec()
    plan = Plan(model=model, method="qlora", seq_len=1024, batch=1).validated()
    trace = trace_plan(plan, spec, steps=1)
    assert "bitsandbytes" in trace.versions
    mlp = spec.hidden * spec.intermediate * 2  # bf16
    assert sum(1 for e in trace.events if isinstance(e, Alloc) and e.size == mlp) >= 3 * spec.layers


@pytest.mark.parametrize(("rows", "allocations"), [(4, 1), (5, 4)])
def test_the_cuda_matmul_dequantizes_above_the_custom_kernels_floor(
    rows: int, allocations: int
) -> None:
    """bitsandbytes' CUDA gemm_4bit: at 4 rows or fewer its custom kernel, the output alone;
    above, _dequant_linear_fallback: the nested absmax (fp32, then offset), the bf16 weight,
    the output."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode

    from trainmem.probe import fake4bit
    from trainmem.probe.trace import _dispatch_mode, _Recorder

    with FakeTensorMode():
        a = torch.empty(rows, 256, dtype=torch.bfloat16)
        packed = torch.empty(256 * 512 // 2, 1, dtype=torch.uint8)
        absmax, nested = torch.empty(8), torch.empty(256 * 512 // 64, dtype=torch.uint8)
        code, offset = torch.empty(256), torch.empty(())
        recorder = _Recorder()
        gemm = fake4bit.cuda_gemm_4bit(torch)
        for tensor in (a, packed, absmax, nested, code, offset):  # there before the op
            recorder.see(tensor)
        before = len(recorder.events)
        with _dispatch_mode(torch, recorder):
            out = gemm(a, packed, [512, 256], absmax, 64, "nf4", None, nested, code, offset)
    assert tuple(out.shape) == (rows, 512)
    sizes = [e.size for e in recorder.events[before:] if type(e).__name__ == "Alloc"]
    assert len(sizes) == allocations
    if allocations > 1:
        assert 512 * 256 * 2 in sizes  # the dequantized bf16 weight
