"""What the device shows beyond live tensors: CUDA context and the caching allocator.

These cannot be derived from the model, so they are constants. Until the project's GPU
measurements (bench/results/measure-cuda.json) calibrate them they are typical figures for
PyTorch 2.x on CUDA 12, and the estimate says so.
"""

from __future__ import annotations

MiB = 2**20
# CUDA context, kernel images and cuBLAS/cuDNN handles after the first training step.
CUDA_CONTEXT_BYTES = 600 * MiB
# Reserved-but-unallocated memory of PyTorch's caching allocator (block rounding, fragmentation)
# as a fraction of the allocated peak.
ALLOCATOR_RESERVE_FRACTION = 0.08
CALIBRATED = False
