"""CUDA-only parts of the harness (``--device cuda``).  Untested on this CPU-only
machine: kept small and separate so the CPU path never imports it.

Around the measured step (after the warm-up step) it records:

* ``torch.cuda.max_memory_allocated``/``max_memory_reserved`` after
  ``reset_peak_memory_stats`` (allocated = tensor bytes incl. kernel scratch such
  as cuBLAS/SDPA workspaces; reserved adds the caching allocator's slack);
* the same relative to the memory allocated at the start of the step;
* NVML's used memory (whole device, includes the CUDA context) before/after,
  and the maximum seen by a 5 ms polling thread during the step.

``cuda_context_bytes`` measures the context alone: NVML used memory after
``torch.cuda.init()`` plus a 1-element tensor, minus NVML used memory before
init (other processes on the GPU make this wrong; the GPU should be idle).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch


def _nvml_used() -> int | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(
            torch.cuda.current_device() if torch.cuda.is_initialized() else 0
        )
        return int(pynvml.nvmlDeviceGetMemoryInfo(h).used)
    except Exception:
        return None


def cuda_context_bytes() -> dict[str, Any]:
    before = _nvml_used()
    torch.cuda.init()
    x = torch.zeros(1, device="cuda")  # forces the context and the allocator's first block
    torch.cuda.synchronize()
    after = _nvml_used()
    res = {
        "nvml_used_before_init": before,
        "nvml_used_after_init": after,
        "context_bytes": (after - before) if (after is not None and before is not None) else None,
        "allocated_for_probe": torch.cuda.memory_allocated(),
        "reserved_for_probe": torch.cuda.memory_reserved(),
    }
    del x
    return res


def device_info() -> dict[str, Any]:
    p = torch.cuda.get_device_properties(0)
    return {
        "gpu": p.name,
        "gpu_total_bytes": p.total_memory,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }


class CudaPeak:
    """Context manager around the measured step."""

    def __init__(self, poll_s: float = 0.005) -> None:
        self.poll_s = poll_s
        self._stop = threading.Event()
        self._nvml_max: int | None = None
        self._res: dict[str, Any] = {}

    def _poll(self) -> None:
        while not self._stop.is_set():
            u = _nvml_used()
            if u is not None and (self._nvml_max is None or u > self._nvml_max):
                self._nvml_max = u
            time.sleep(self.poll_s)

    def __enter__(self) -> CudaPeak:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        self._res["allocated_start"] = torch.cuda.memory_allocated()
        self._res["reserved_start"] = torch.cuda.memory_reserved()
        self._res["nvml_used_start"] = _nvml_used()
        self._t = threading.Thread(target=self._poll, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        torch.cuda.synchronize()
        self._stop.set()
        self._t.join()
        r = self._res
        r["max_allocated"] = torch.cuda.max_memory_allocated()
        r["max_reserved"] = torch.cuda.max_memory_reserved()
        r["allocated_end"] = torch.cuda.memory_allocated()
        r["nvml_used_end"] = _nvml_used()
        r["nvml_used_max_polled"] = self._nvml_max
        r["alloc_retries"] = torch.cuda.memory_stats().get("num_alloc_retries")

    def result(self) -> dict[str, Any]:
        return dict(self._res)


def gpu_cases(Plan: Any, lora: Any, qlora: Any) -> list[tuple[str, Any, str, int]]:
    """A representative subset that fits one GPU (>= 40 GB) in a few minutes.  Every
    case is real execution; the record keeps both the tracked peak and CUDA's numbers."""
    out: list[tuple[str, Any, str, int]] = []
    for m in ("SmolLM2-135M", "Qwen2.5-0.5B", "Llama-3.2-1B"):
        for seq, b in ((512, 2), (2048, 1)):
            for g in (False, True):
                for prec in ("fp32", "bf16", "bf16-mixed"):
                    out.append((m, Plan("full", prec, "adamw", seq, b, g), "real", 0))
                out.append(
                    (
                        m,
                        lora("bf16", 16, "all-linear", seq_len=seq, batch=b, grad_ckpt=g),
                        "real",
                        0,
                    )
                )
                out.append(
                    (
                        m,
                        lora("bf16-mixed", 16, "all-linear", seq_len=seq, batch=b, grad_ckpt=g),
                        "real",
                        0,
                    )
                )
        out.append((m, Plan("full", "bf16", "adamw-foreach", 1024, 2), "real", 0))
        out.append((m, Plan("full", "bf16", "adamw", 1024, 2, attn="eager"), "real", 0))
        out.append((m, qlora(True, seq_len=1024, batch=2, grad_ckpt=True), "real", 0))
        out.append((m, qlora(False, seq_len=1024, batch=2, grad_ckpt=False), "real", 0))
    for m in ("Llama-2-7b", "Qwen2.5-7B"):  # 7B: LoRA / QLoRA only (full bf16 AdamW needs ~60 GB+)
        out.append(
            (m, lora("bf16", 16, "all-linear", seq_len=2048, batch=1, grad_ckpt=True), "real", 0)
        )
        out.append((m, qlora(True, seq_len=2048, batch=1, grad_ckpt=True), "real", 0))
    return out
