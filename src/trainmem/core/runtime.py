"""What the device shows beyond live tensors, by kind of device.

- CUDA GPUs: the CUDA context (kernel images, cuBLAS/cuDNN handles after the first step) and
  the caching allocator's reserved-but-unallocated memory (block rounding, fragmentation).
  These cannot be derived from the model, so they are constants: typical figures for
  PyTorch 2.x on CUDA 12 until GPU measurements (bench/results/measure-cuda.json) calibrate
  them, and the estimate says so.
- Unified memory (Apple silicon, MPS): no CUDA context. PyTorch's MPS allocator
  (aten/src/ATen/mps/MPSAllocator.mm) caches freed blocks too, but no measurement of its
  overhead exists here, so none is added and the note says so.
- CPU RAM: the allocated peak is what the process's tensors take; the Python process itself
  and the libraries' code are not counted, said in the note.
"""

from __future__ import annotations

from trainmem.core.target import TargetKind

MiB = 2**20
CUDA_CONTEXT_BYTES = 600 * MiB
ALLOCATOR_RESERVE_FRACTION = 0.08  # of the allocated peak
CALIBRATED = False
RUNTIME_COMPONENTS = ("CUDA context", "allocator reserve")


def runtime_overhead(kind: TargetKind, allocated_bytes: int) -> dict[str, int]:
    """The runtime components for a device of ``kind`` (zero where none is modelled)."""
    if kind != "gpu":
        return {name: 0 for name in RUNTIME_COMPONENTS}
    return {
        "CUDA context": CUDA_CONTEXT_BYTES,
        "allocator reserve": round(allocated_bytes * ALLOCATOR_RESERVE_FRACTION),
    }


def runtime_note(kind: TargetKind) -> str:
    """What the device peak adds on this kind of device, and how sure it is."""
    if kind == "unified":
        return (
            "unified memory (MPS): no CUDA context; the MPS allocator's cache is not "
            "measured, so the device peak is the allocated peak"
        )
    if kind == "system":
        return (
            "CPU RAM: the device peak is the tensors' peak; the Python process and libraries "
            "come on top"
        )
    if CALIBRATED:
        return "runtime overhead (CUDA context, allocator reserve) calibrated on a GPU"
    return (
        "runtime overhead (CUDA context, allocator reserve) uses typical figures, "
        "not yet calibrated on a GPU"
    )
