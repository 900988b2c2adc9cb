"""The run log's format: what trainmem.probe writes and trainmem.sources.run_logs reads.

A run log is JSON Lines, one file per rank, appended and flushed once per optimizer step.

Line 1, ``"kind": "run"`` (once)::

    {"format": 1, "kind": "run", "time": 1767225600.0, "rank": 0, "world_size": 1,
     "local_rank": 0, "pid": 4242, "host": "gpu-node-1",
     "device": {"type": "cuda", "index": 0, "name": "NVIDIA H100 80GB HBM3",
                "total_bytes": 85520809984, "cuda": "12.8", "driver_source": "nvml"},
     "peaks": "exact",
     "plan": {"method": "lora", "seq_len": 2048, "batch": 2, "precision": "bf16",
              "optimizer": "adamw", "grad_ckpt": true, "lora_rank": 16, "lora_alpha": 32.0,
              "lora_targets": "q,k,v,o", "lora_dropout": 0.05, "gpus": 1, "stack": "trainer"},
     "model": {"name": "Qwen/Qwen2.5-7B", "config": {...config.json as a dict...}},
     "run": {"dtype": "bfloat16", "optimizer_class": "torch.optim.adamw.AdamW",
             "gradient_accumulation_steps": 1, "trainable_params": 40370176,
             "params": 7655986688},
     "versions": {"torch": "2.13.0", "transformers": "5.24.0", "peft": "0.21.2",
                  "trl": null, "trainmem": "0.1.0"},
     "unknown": ["seq_len"]}

``plan`` holds trainmem plan fields (trainmem.core.plan, by key) the probe could read from the
run; what it could not is listed in ``unknown`` (the reader takes the plan's default and says
so). ``peaks``: "exact" where the device counts peaks (CUDA: torch.cuda.max_memory_allocated
and max_memory_reserved, reset at every phase), "sampled" where it does not (MPS, CPU: the
figures are read at each phase boundary, so a peak between two boundaries is missed).

Then one line per optimizer step, ``"kind": "step"``::

    {"kind": "step", "step": 1, "time": 1767225601.5, "duration_s": 1.42,
     "allocated_bytes": ..., "reserved_bytes": ...,          # at the step's end
     "max_allocated_bytes": ..., "max_reserved_bytes": ...,  # over the step
     "phases": {"forward": {"max_allocated_bytes": ..., "max_reserved_bytes": ...}, ...},
     "driver_bytes": ...,   # the process's device memory as the driver sees it, at the end
     "free_bytes": ..., "total_bytes": ...}                  # the device's, at the end

On MPS and CPU the step also has ``max_driver_bytes``, the largest driver figure read at
its phase boundaries. The device-wide reads (``free_bytes``, ``total_bytes``, and on CUDA
NVML's ``driver_bytes``) are taken at most once a second, so steps in between have them null.
Any byte figure may be null where the device cannot give it: allocated and reserved on CPU
(``driver_bytes`` is then the process's RSS), reserved on MPS (``driver_bytes`` is then
torch.mps.driver_allocated_memory()), ``driver_bytes`` on CUDA without NVML. The phases are
those the loop marks, in order: the Trainer callback marks "forward" (the model's forward and
its loss), "backward" (to gradient clipping, inclusive), "optimizer" (optimizer.step) and
"zero_grad" (scheduler step and model.zero_grad); a plain loop marks what it calls.

Last, when the run ends normally, ``{"kind": "end", "time": ..., "steps": 120}``.

Readers must ignore keys they do not know; a new key never changes the format number.
"""

from __future__ import annotations

import re

FORMAT_VERSION = 1
RUN, STEP, END = "run", "step", "end"
PEAK_KINDS = ("exact", "sampled")
DEVICE_TYPES = ("cuda", "mps", "cpu")
TRAINER_PHASES = ("forward", "backward", "optimizer", "zero_grad")
# The plan fields that move the estimate most: a reader names each one a log does not hold.
DESCRIBED = ("method", "seq_len", "batch", "precision", "optimizer", "grad_ckpt", "stack")
BYTE_FIELDS = (
    "allocated_bytes",
    "reserved_bytes",
    "max_allocated_bytes",
    "max_reserved_bytes",
    "driver_bytes",
    "free_bytes",
    "total_bytes",
)

RANK_FIELD = "{rank}"
MAX_RANK_DIGITS = 7  # ranks up to 9,999,999: more GPUs than any job runs on


def rank_name(name: str, rank: int) -> str:
    """The file name of ``rank``'s log, from the file name the user gave: ``{rank}`` filled
    in, or ``.rank<N>`` put before the extension (run.jsonl -> run.rank0.jsonl), so ranks
    never share a file. The probe writes these names; a reader finds them from the base."""
    if RANK_FIELD in name:
        return name.replace(RANK_FIELD, str(rank))
    stem, dot, ext = name.rpartition(".")
    return f"{stem}.rank{rank}.{ext}" if dot and stem else f"{name}.rank{rank}"


def rank_of(name: str, base: str) -> int | None:
    """The rank whose log file ``name`` is, for the base name ``base`` the probe was given
    (``rank_of("run.rank3.jsonl", "run.jsonl")`` is 3); None when it is not one of them."""
    if RANK_FIELD in base:
        pieces = base.split(RANK_FIELD)
    else:
        stem, dot, ext = base.rpartition(".")
        pieces = [f"{stem}.rank", f".{ext}"] if dot and stem else [f"{base}.rank", ""]
    digits = f"([0-9]{{1,{MAX_RANK_DIGITS}}})"
    found = re.fullmatch(digits.join(re.escape(p) for p in pieces), name)
    if found is None or len(set(found.groups())) != 1:
        return None
    rank = int(found.group(1))
    return rank if rank_name(base, rank) == name else None  # "run.rank01" is no rank's
