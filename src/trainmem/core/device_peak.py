"""The device peak as PyTorch's caching allocator makes it: the step's allocation sequence
(trainmem.core.step_events) run through the allocator's simulation (trainmem.core.allocator),
plus what it never sees (the CUDA context).

What the simulation gives beyond the tensors' peak:
- rounding: every block is a multiple of 512 bytes, and a block whose remainder is too small
  to split stays whole (CUDACachingAllocator.cpp should_split);
- fragmentation: segments reserved but free at the peak, cached after earlier frees whose
  sizes the later requests cannot reuse (no merging across segments);
- library workspaces: cuBLAS's per handle and stream, allocated through the same allocator at
  the first matmul and kept (aten/src/ATen/cuda/CublasHandlePool.cpp, getChosenWorkspaceSize:
  ":4096:2:16:8" = 8 MiB + 128 KiB by default, 32 MiB on compute capability 9-12, i.e. Hopper
  and Blackwell; cuBLASLt's own 1 MiB, parseCUDABlasLtWorkspaceSize, since workspace caching
  is off by default on CUDA). Forward and backward run on the default stream: one of each.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from trainmem.core.alloc_conf import AllocatorConfig
from trainmem.core.allocator import Alloc, BeyondPyTorch, Event, Oom, simulate
from trainmem.core.architecture import ModelSpec
from trainmem.core.errors import PlanError
from trainmem.core.plan import Plan
from trainmem.core.step import Step
from trainmem.core.step_events import MOMENTS, step_events

KIB, MIB = 1024, 1024 * 1024
CUBLAS_WORKSPACE = 4096 * KIB * 2 + 16 * KIB * 8  # ":4096:2:16:8"
CUBLAS_WORKSPACE_32MB = 4096 * 8 * KIB  # ":4096:8", compute capability 9-12
CUBLASLT_WORKSPACE = 1024 * KIB
LARGE_WORKSPACE_FAMILIES = ("hopper", "blackwell")


def workspace_bytes(family: str | None) -> int:
    """cuBLAS + cuBLASLt workspaces of one stream on a GPU of ``family``."""
    cublas = CUBLAS_WORKSPACE_32MB if family in LARGE_WORKSPACE_FAMILIES else CUBLAS_WORKSPACE
    return cublas + CUBLASLT_WORKSPACE


@dataclass(frozen=True)
class DevicePeak:
    """What the allocator holds at its fullest over the first two steps."""

    reserved: int  # the peak reserved (torch.cuda.max_memory_reserved)
    allocated: int  # allocated blocks at that moment (rounded sizes)
    tensors: int  # the tensors' peak (the estimate's allocated peak)
    workspaces: int
    moment: str  # where the peak was reached ("backward (last layer), step 2")
    events: int  # the sequence's length
    oom: Oom | None = None  # the first allocation that fails on the capacity given
    # On the capacity given, CUDA ran out and the allocator's freeing its cache let the step
    # go on (CUDACachingAllocator.cpp malloc); False on a run that never met the limit.
    retried: bool = False

    @property
    def fragmentation(self) -> int:
        """Reserved but holding no block at the peak."""
        return self.reserved - self.allocated

    @property
    def overhead(self) -> int:
        """All the allocator adds to the tensors' peak: rounding, fragmentation, workspaces."""
        return max(0, self.reserved - self.tensors)


def _moment(index: int, moments: tuple[dict[str, int], ...]) -> str:
    """The moment an event leads up to, named with its step."""
    for number, marks in enumerate(moments, 1):
        for name in MOMENTS:
            if name in marks and index <= marks[name]:
                return f"{name}, step {number}"
    return f"end of step {len(moments)}"


def device_peak(
    plan: Plan,
    spec: ModelSpec,
    step: Step,
    tensors: int,
    family: str | None = None,
    config: AllocatorConfig | None = None,
    capacity: int | None = None,
) -> DevicePeak:
    """Simulate the validated ``plan``'s first two steps on ``config`` (default: the plan's
    own ``alloc_conf``); ``tensors`` is the estimate's allocated peak, ``capacity`` the bytes
    the allocator may reserve (None: unlimited; else the first failing request is kept).

    Memoized: ``step`` and ``tensors`` follow from the plan and the model, so a report, its
    searches and a dashboard redraw that meet the same plan again simulate it once. A run
    that never met its capacity is the run of any capacity its peak fits, unlimited
    included (the allocator is the same until a cudaMalloc fails), so it answers those too."""
    config = config or plan.allocator
    key = (plan, spec, step, tensors, family, config)
    # Only with the plain limits: a memory fraction or expandable segments size their work by
    # the GPU's total, which the capacity stands in for.
    plain = not config.expandable_segments and config.per_process_memory_fraction >= 1.0
    free = _UNLIMITED.get(key) if plain else None
    if free is not None and (capacity is None or free.reserved <= capacity):
        return free
    peak = _device_peak(*key, capacity)
    if plain and peak.oom is None and not peak.retried:
        # The dashboard's workers simulate side by side: each step below is one operation
        # of the C-implemented OrderedDict, whole under the GIL (core takes no threading),
        # and a pop another worker got to first is no error.
        _UNLIMITED[key] = peak
        while len(_UNLIMITED) > _UNLIMITED_RUNS:
            try:
                _UNLIMITED.popitem(last=False)
            except KeyError:
                break
    return peak


# Runs that never met a capacity (device_peak), oldest first: as many as the cache below.
_UNLIMITED: OrderedDict[tuple[object, ...], DevicePeak] = OrderedDict()
_UNLIMITED_RUNS = 512


def clear_cache() -> None:
    """Forget every simulation (benchmarks time them afresh)."""
    _device_peak.cache_clear()
    _UNLIMITED.clear()


@lru_cache(maxsize=512)
def _device_peak(
    plan: Plan,
    spec: ModelSpec,
    step: Step,
    tensors: int,
    family: str | None,
    config: AllocatorConfig,
    capacity: int | None,
) -> DevicePeak:
    built = step_events(plan, spec, step)
    sequence = with_workspaces(built.events, built.loaded, family)
    added = len(sequence) - len(built.events)
    marks = tuple(
        {name: index + added if index >= built.loaded else index for name, index in m.items()}
        for m in built.moments
    )
    try:
        sim = simulate(sequence, capacity=capacity, config=config, peak_segments=False)
    except BeyondPyTorch as exc:  # the plan's words, not the event's
        raise PlanError(
            "seq_len",
            f"at {plan.seq_len:,} tokens x batch {plan.batch:,} one tensor of the step would "
            f"be {exc.size:.3g} bytes; PyTorch refuses any allocation of 1 EiB or more "
            "(c10/cuda/CUDACachingAllocator.cpp NativeCachingAllocator::allocate)",
        ) from None
    at = sim.peak_event
    return DevicePeak(
        reserved=sim.peak_reserved,
        allocated=sim.allocated[at] if at >= 0 else 0,
        tensors=tensors,
        workspaces=workspace_bytes(family),
        moment=_moment(sim.oom.event if sim.oom else at, marks),  # the failing one's, if any
        events=len(sequence),
        oom=sim.oom,
        retried=sim.failed_mallocs > 0 and sim.oom is None,
    )


def with_workspaces(events: Sequence[Event], loaded: int, family: str | None) -> list[Event]:
    """``events`` with cuBLAS's and cuBLASLt's workspaces allocated where loading ends
    (``events[:loaded]``): they come at the first matmul and stay. For a synthetic step and a
    traced one alike (trainmem.probe.trace)."""
    workspace = workspace_bytes(family)
    return [
        *events[:loaded],
        Alloc("cublas workspace", workspace - CUBLASLT_WORKSPACE),
        Alloc("cublaslt workspace", CUBLASLT_WORKSPACE),
        *events[loaded:],
    ]
