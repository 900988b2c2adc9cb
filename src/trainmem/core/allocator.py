"""PyTorch's CUDA caching allocator, simulated: what it reserves from the GPU for a sequence of
allocations and frees, and where that sequence would run out of memory.

Written from torch's c10/cuda/CUDACachingAllocator.cpp (class DeviceCachingAllocator; read at
the newest stored pytorch/pytorch snapshot, a fork at commit 076f0279 of cyyever/pytorch, newer
than torch 2.13.0 = git cf30153c, checked against 2.13's installed headers) with the constants
of 2.13's c10/core/AllocatorConfig.h. Each rule names the function it follows. Modelled: one
device, the default pools (no CUDA graphs, no user mempools), frees as ``free_completed`` (a
block used on another stream returns to its pool when its events complete: the trace's order).

Addresses are virtual and only ever grow, one range per segment, so ordering free blocks by
(stream, size, address) orders them as PyTorch's BlockComparatorSizeCounterAddress does (by
stream, size, then the segment's registration_counter, which also grows with each segment, then
address).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Hashable, Iterable, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from trainmem.core.alloc_conf import DEFAULT, SIZE_MAX, AllocatorConfig

# c10/core/AllocatorConfig.h (torch 2.13)
K_MIN_BLOCK_SIZE = 512  # all sizes are rounded to at least 512 bytes
K_SMALL_SIZE = 1024 * 1024  # largest "small" allocation is 1 MiB
K_SMALL_BUFFER = 2 * 1024 * 1024  # "small" allocations are packed in 2 MiB blocks
K_MIN_LARGE_ALLOC = 10 * 1024 * 1024  # allocations between 1 and 10 MiB may use kLargeBuffer
K_ROUND_LARGE = 2 * 1024 * 1024  # round up large allocations to 2 MiB
ONE_EXA_BYTES = 1152921504606846976  # NativeCachingAllocator::allocate refuses this and more
_VA_START = 1 << 40  # where our virtual addresses begin (any value would do)
_UNLIMITED_DEVICE = 1 << 50  # the "GPU size" for an expandable segment's reserve when none given


class Alloc(NamedTuple):
    """A tensor's storage is allocated: ``size`` bytes requested on ``stream``."""

    id: Hashable
    size: int
    stream: int = 0


class Free(NamedTuple):
    """The storage allocated as ``id`` returns to the allocator (``free_completed``)."""

    id: Hashable


class EmptyCache(NamedTuple):
    """torch.cuda.empty_cache(): every cached segment that is wholly free goes back."""


Event = Alloc | Free | EmptyCache


def format_size(size: int) -> str:
    """c10::CachingAllocator::format_size (c10/core/Allocator.h), as OOM messages print."""
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024.0:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576.0:.2f} MiB"
    return f"{size / 1073741824.0:.2f} GiB"


def _round_up(size: int, unit: int) -> int:
    return unit * ((size + unit - 1) // unit)


def roundup_power2_next_division(size: int, divisions: int) -> int:
    """DeviceCachingAllocator::roundup_power2_next_division: up to the next of ``divisions``
    equal steps between the powers of two around ``size`` (1200 in 4 -> 1280)."""
    if size & (size - 1) == 0:
        return size
    floor = 1 << (size.bit_length() - 1)
    division = floor >> (divisions.bit_length() - 1)
    if division == 0:
        return floor << 1
    rounded = size & ~(division - 1)
    return size if rounded == size else rounded + division


def round_size(size: int, config: AllocatorConfig = DEFAULT) -> int:
    """DeviceCachingAllocator::round_size: 512-byte multiples, or power-of-two divisions where
    roundup_power2_divisions sets them for the size's interval."""
    if size < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    divisions = config.divisions(size)
    if divisions > 1 and size > K_MIN_BLOCK_SIZE * divisions:
        return roundup_power2_next_division(size, divisions)
    return _round_up(size, K_MIN_BLOCK_SIZE)


def allocation_size(size: int, config: AllocatorConfig = DEFAULT) -> int:
    """DeviceCachingAllocator::get_allocation_size: the segment cudaMalloc'd for a rounded
    request no cached block serves (2 MiB small; 20 MiB under 10 MiB; else 2 MiB multiples)."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return config.large_segment_size
    return _round_up(size, K_ROUND_LARGE)


class _Segment:
    """An expandable segment (struct ExpandableSegment): a virtual range of pages of ``page``
    bytes. Which pages have physical memory is what its blocks say (``_Block.mapped``): no
    set of page numbers, whose size a replayed trace could make any (a 512 TiB request)."""

    __slots__ = ("page", "ptr", "size")

    def __init__(self, ptr: int, page: int, device_total: int) -> None:
        self.ptr = ptr
        self.page = page  # 2 MiB for the small pool, large_segment_size (20 MiB) for the large
        # "enough address space for 1 1/8 the total memory on the GPU": numSegments(reserve)
        self.size = _round_up(device_total + device_total // 8, page)


class _Block:
    __slots__ = (
        "allocated",
        "gc_base",
        "mapped",
        "next",
        "prev",
        "ptr",
        "requested",
        "segment",
        "size",
        "small",
        "stream",
    )

    def __init__(
        self, ptr: int, size: int, stream: int, small: bool, segment: _Segment | None
    ) -> None:
        self.ptr = ptr
        self.size = size
        self.stream = stream
        self.small = small
        self.segment = segment  # the expandable segment it lies in, or None
        self.allocated = False
        self.mapped = True
        self.prev: _Block | None = None
        self.next: _Block | None = None
        self.requested = 0
        self.gc_base = 0

    def is_split(self) -> bool:
        return self.prev is not None or self.next is not None

    def splice(self, before: _Block | None, after: _Block | None) -> None:
        if before is not None:
            before.next = self
        self.prev = before
        if after is not None:
            after.prev = self
        self.next = after


# A pool's keys are a plain list while it holds few (insort is one memmove, the fastest for
# the free blocks a training step caches), then a SortedList, whose inserts and removals cost
# O(log n) where a replayed trace caches hundreds of thousands of blocks: each insort moved them
# all (400,000 blocks freed last-first took 50 s, now 10 s).
LIST_KEYS_MAX = 4096


def _insert_key(keys: MutableSequence[Any], key: tuple[int, ...]) -> MutableSequence[Any]:
    """``keys`` with ``key`` added in order: the same list, or a SortedList past the limit."""
    if type(keys) is not list:
        keys.add(key)  # type: ignore[attr-defined]
        return keys
    insort(keys, key)
    if len(keys) <= LIST_KEYS_MAX:
        return keys
    from sortedcontainers import SortedList  # only a replayed trace gets here

    return SortedList(keys)  # type: ignore[no-any-return]


def _bisect(keys: Sequence[Any], key: tuple[int, ...]) -> int:
    if type(keys) is list:
        return bisect_left(keys, key)
    return keys.bisect_left(key)  # type: ignore[attr-defined,no-any-return]


class _Pool:
    """struct BlockPool: the free blocks ordered by (stream, size, address), and the unmapped
    ranges of expandable segments ordered by (stream, address)."""

    def __init__(self, small: bool) -> None:
        self.small = small
        self.keys: MutableSequence[tuple[int, int, int]] = []
        self.blocks: dict[int, _Block] = {}  # by address
        # The cached blocks that are whole segments (what release_cached_blocks can give
        # back), so that emptying the cache looks at them only: a trace that empties it
        # after every free beside thousands of split cached blocks walked them all each time.
        self.whole: dict[int, _Block] = {}
        # Likewise the cached blocks of expandable segments that span a page or more: only
        # those can hold a whole page for unmap_block to give back.
        self.pageful: dict[int, _Block] = {}
        self.unmapped_keys: MutableSequence[tuple[int, int]] = []
        self.unmapped: dict[int, _Block] = {}
        self.get_free_blocks_call_count = 0

    def insert(self, block: _Block) -> None:  # BlockPool::insert_into_blocks
        block.gc_base = self.get_free_blocks_call_count
        self.keys = _insert_key(self.keys, (block.stream, block.size, block.ptr))
        self.blocks[block.ptr] = block
        # a block's neighbours and size change only while it is out of the pool
        if block.segment is None:
            if block.prev is None and block.next is None:
                self.whole[block.ptr] = block
        elif block.size >= block.segment.page:
            self.pageful[block.ptr] = block

    def erase(self, block: _Block) -> None:  # BlockPool::erase_from_blocks
        del self.keys[_bisect(self.keys, (block.stream, block.size, block.ptr))]
        del self.blocks[block.ptr]
        self.whole.pop(block.ptr, None)
        self.pageful.pop(block.ptr, None)

    def at(self, index: int) -> _Block:
        return self.blocks[self.keys[index][2]]

    def insert_unmapped(self, block: _Block) -> None:
        self.unmapped_keys = _insert_key(self.unmapped_keys, (block.stream, block.ptr))
        self.unmapped[block.ptr] = block

    def erase_unmapped(self, block: _Block) -> None:
        del self.unmapped_keys[_bisect(self.unmapped_keys, (block.stream, block.ptr))]
        del self.unmapped[block.ptr]


@dataclass(frozen=True)
class Segment:
    """A segment as torch.cuda.memory_snapshot() lists it (an expandable segment: one entry
    per contiguous mapped range, as DeviceCachingAllocator::snapshot reports it)."""

    address: int
    stream: int
    pool: str  # "small" or "large"
    size: int  # total_size
    allocated: int  # allocated_size: bytes of its blocks in use
    blocks: int
    free_blocks: int
    largest_free: int
    expandable: bool

    @property
    def free(self) -> int:
        return self.size - self.allocated


class SegmentEvent(NamedTuple):
    """What the allocator asked of CUDA, as a memory snapshot's trace records it."""

    event: int  # index of the event during which it happened
    action: str  # "segment_alloc", "segment_free", "segment_map" or "segment_unmap"
    address: int
    size: int
    stream: int


@dataclass(frozen=True)
class Oom:
    """The allocation that failed, with the figures of PyTorch's OutOfMemoryError message
    (DeviceCachingAllocator::malloc, after release_cached_blocks and a last retry)."""

    event: int
    requested: int  # the size asked for
    alloc_size: int  # what it tried to cudaMalloc ("Tried to allocate ...")
    device_total: int
    device_free: int  # what cudaMemGetInfo would report free
    allowed: int | None  # per_process_memory_fraction's limit, when set
    allocated: int  # "allocated by PyTorch"
    reserved: int
    free_blocks: int  # cached free blocks left (split segments: they cannot be released)
    largest_free: int
    expandable: bool

    def message(self) -> str:
        """The first sentences of PyTorch's message (without NVML's per-process line)."""
        allowed = f"{format_size(self.allowed)} allowed; " if self.allowed is not None else ""
        hint = (
            ""
            if self.expandable
            else " If reserved but unallocated memory is large try setting"
            " PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
        )
        return (
            f"CUDA out of memory. Tried to allocate {format_size(self.alloc_size)}. GPU 0 has a "
            f"total capacity of {format_size(self.device_total)} of which "
            f"{format_size(self.device_free)} is free. {allowed}Of the allocated memory "
            f"{format_size(self.allocated)} is allocated by PyTorch, and "
            f"{format_size(self.reserved - self.allocated)} is reserved by PyTorch but "
            f"unallocated.{hint}"
        )

    def summary(self) -> str:
        """One line: what failed and what was left where."""
        return (
            f"tried to allocate {format_size(self.alloc_size)}; "
            f"{format_size(self.device_free)} free on the device, "
            f"{format_size(self.reserved - self.allocated)} cached in {self.free_blocks} free "
            f"blocks (largest {format_size(self.largest_free)})"
        )


class BeyondPyTorch(ValueError):
    """A request of ONE_EXA_BYTES or more, which PyTorch refuses before its allocator sees it."""

    def __init__(self, event: int, size: int) -> None:
        self.size = size
        super().__init__(f"event {event}: {size} bytes is beyond what PyTorch accepts")


class OutOfMemory(Exception):
    def __init__(self, oom: Oom) -> None:
        super().__init__(oom.message())
        self.oom = oom


class CachingAllocator:
    """DeviceCachingAllocator for one device: ``malloc``, ``free`` and ``empty_cache``.

    ``capacity``: the bytes cudaMalloc can obtain (the GPU less its CUDA context and other
    processes); None for no limit. ``device_total``: the GPU's total memory (the OOM message's
    total capacity, per_process_memory_fraction's base, an expandable segment's reserve)."""

    def __init__(
        self,
        capacity: int | None = None,
        config: AllocatorConfig = DEFAULT,
        device_total: int | None = None,
    ) -> None:
        if config.backend != "native":
            raise ValueError("backend:cudaMallocAsync does not use the caching allocator")
        self.capacity = capacity
        self.config = config
        self.device_total = device_total if device_total is not None else capacity
        self.allowed_max: int | None = None  # allowed_memory_maximum (setMemoryFraction)
        if config.per_process_memory_fraction < 1.0:
            if self.device_total is None:
                raise ValueError("per_process_memory_fraction needs the GPU's total memory")
            self.allowed_max = round(config.per_process_memory_fraction * self.device_total)
        self.gc = self.allowed_max is not None and config.garbage_collection_threshold > 0.0
        self.small = _Pool(True)
        self.large = _Pool(False)
        self.active: set[_Block] = set()
        self.reserved = 0  # total_allocated_memory == stats.reserved_bytes
        self.allocated = 0  # stats.allocated_bytes
        self.peak_reserved = 0
        self.peak_allocated = 0
        self.peak_event = -1  # the event during which peak_reserved was reached
        self.log: list[SegmentEvent] = []
        self.event = 0  # index of the event being run, for the log
        self._next_address = _VA_START
        self._sizes: dict[int, tuple[int, int]] = {}  # request -> (rounded, segment size)
        self.failed_mallocs = 0  # requests whose first cudaMalloc (or page map) failed

    # -- public operations ------------------------------------------------------------------

    def malloc(self, orig_size: int, stream: int = 0) -> _Block:
        """DeviceCachingAllocator::malloc: a block of at least ``orig_size`` bytes, or
        OutOfMemory once freeing cached blocks and retrying has failed."""
        cfg = self.config
        sizes = self._sizes.get(orig_size)
        if sizes is None:  # the same sizes come back layer after layer: round each once
            rounded = round_size(orig_size, cfg)
            sizes = self._sizes[orig_size] = (rounded, allocation_size(rounded, cfg))
        size, alloc_size = sizes
        pool = self.small if size <= K_SMALL_SIZE else self.large  # get_pool
        block = self._get_free_block(pool, size, stream)
        if block is None:
            if self.gc:
                self._garbage_collect_cached_blocks()
            block = self._alloc_block(pool, size, alloc_size, stream)
            if block is None:
                self.failed_mallocs += 1
            if block is None and self._release_available_cached_blocks(pool, size, stream):
                block = self._alloc_block(pool, size, alloc_size, stream)
            if block is None:
                self._release_cached_blocks()
                block = self._alloc_block(pool, size, alloc_size, stream)
        if block is None:
            raise OutOfMemory(self._oom(orig_size, alloc_size))
        return self._alloc_found_block(
            pool, block, size, orig_size, self._should_split(block, size)
        )

    def free(self, block: _Block) -> None:
        """free_locked then free_block: back to its pool, merged with free neighbours."""
        block.allocated = False
        self.allocated -= block.size
        self.active.discard(block)
        pool = self.small if block.small else self.large
        before, after = block.prev, block.next
        if before is not None and not before.allocated:
            self._try_merge_blocks(block, before, pool)
        if after is not None and not after.allocated:
            self._try_merge_blocks(block, after, pool)
        pool.insert(block)

    def empty_cache(self) -> None:
        """emptyCache: release_cached_blocks."""
        self._release_cached_blocks()

    def segments(self) -> tuple[Segment, ...]:
        """DeviceCachingAllocator::snapshot's segments, by address."""
        blocks = [*self.active, *self.small.blocks.values(), *self.large.blocks.values()]
        out = []
        for head in blocks:
            if head.prev is not None and head.prev.mapped:
                continue
            allocated = count = free_count = largest = total = 0
            b: _Block | None = head
            while b is not None and b.mapped:
                total += b.size
                count += 1
                if b.allocated:
                    allocated += b.size
                else:
                    free_count += 1
                    largest = max(largest, b.size)
                b = b.next
            out.append(
                Segment(
                    address=head.ptr,
                    stream=head.stream,
                    pool="small" if head.small else "large",
                    size=total,
                    allocated=allocated,
                    blocks=count,
                    free_blocks=free_count,
                    largest_free=largest,
                    expandable=head.segment is not None,
                )
            )
        return tuple(sorted(out, key=lambda s: s.address))

    # -- statistics -------------------------------------------------------------------------

    def _reserve(self, size: int) -> None:
        self.reserved += size
        if self.reserved > self.peak_reserved:
            self.peak_reserved, self.peak_event = self.reserved, self.event

    def _record(self, action: str, address: int, size: int, stream: int) -> None:
        self.log.append(SegmentEvent(self.event, action, address, size, stream))

    def _address(self, size: int, align: int) -> int:
        ptr = _round_up(self._next_address, align)
        self._next_address = ptr + size
        return ptr

    # -- finding and splitting blocks -------------------------------------------------------

    def _get_free_block(self, pool: _Pool, size: int, stream: int) -> _Block | None:
        """get_free_block: best fit, the smallest free block of the stream that holds ``size``,
        except oversize blocks (>= max_split_size) for smaller requests, and for oversize
        requests blocks more than max_non_split_rounding_size larger."""
        cfg = self.config
        if self.gc:
            pool.get_free_blocks_call_count += 1  # blocks' ages for garbage collection
        keys = pool.keys
        i = _bisect(keys, (stream, size, -1))
        if i == len(keys) or keys[i][0] != stream:
            return None
        block = pool.blocks[keys[i][2]]
        if block.segment is not None:
            # An expandable block counts as big as it can grow (its unmapped next range) for
            # best fit: look on for a block that fits more tightly that way.
            def grown(b: _Block) -> int:
                nxt = b.next
                return b.size + (nxt.size if nxt is not None and not nxt.mapped else 0)

            while block.segment is not None and i + 1 < len(keys) and keys[i + 1][0] == stream:
                following = pool.at(i + 1)
                if grown(following) >= grown(block):
                    break
                i, block = i + 1, following
        if size < cfg.max_split_size and block.size >= cfg.max_split_size:
            return None
        if size >= cfg.max_split_size and block.size >= size + cfg.max_non_split_rounding_size:
            return None
        pool.erase(block)
        return block

    def _should_split(self, block: _Block, size: int) -> bool:
        """should_split: small (and expandable) remainders of 512 bytes or more; large ones
        over 1 MiB, and never for requests of max_split_size or more."""
        remaining = block.size - size
        if block.small or self.config.expandable_segments:
            return remaining >= K_MIN_BLOCK_SIZE
        return size < self.config.max_split_size and remaining > K_SMALL_SIZE

    def _alloc_found_block(
        self, pool: _Pool, block: _Block, size: int, orig_size: int, split: bool
    ) -> _Block:
        """alloc_found_block: the front ``size`` bytes are handed out; the rest stays free."""
        if split:
            remaining = block
            block = _Block(remaining.ptr, size, remaining.stream, remaining.small, None)
            block.segment = remaining.segment
            block.splice(remaining.prev, remaining)
            remaining.ptr += size
            remaining.size -= size
            pool.insert(remaining)
        block.allocated = True
        block.requested = orig_size
        self.active.add(block)
        self.allocated += block.size
        if self.allocated > self.peak_allocated:
            self.peak_allocated = self.allocated
        return block

    def _try_merge_blocks(self, dst: _Block, src: _Block | None, pool: _Pool) -> int:
        """try_merge_blocks: ``src`` (a free neighbour, mapped like ``dst``) joins ``dst``."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return 0
        if dst.prev is src:  # [src dst]
            dst.ptr = src.ptr
            dst.prev = src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:  # [dst src]
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        if src.mapped:
            pool.erase(src)
        else:
            pool.erase_unmapped(src)
        dst.size += src.size
        return src.size

    # -- getting memory from CUDA -----------------------------------------------------------

    def _alloc_block(self, pool: _Pool, size: int, alloc_size: int, stream: int) -> _Block | None:
        """alloc_block: a new segment of ``alloc_size`` (cudaMalloc), or with expandable
        segments more pages mapped (try_allocate_expandable_block); None when CUDA is out."""
        if self.allowed_max is not None and self.reserved + alloc_size > self.allowed_max:
            return None
        if self.config.expandable_segments:
            return self._try_allocate_expandable_block(pool, size, stream)
        if self.capacity is not None and self.reserved + alloc_size > self.capacity:
            return None  # cudaMalloc: cudaErrorMemoryAllocation
        block = _Block(
            self._address(alloc_size, K_ROUND_LARGE), alloc_size, stream, pool.small, None
        )
        self._reserve(alloc_size)
        self._record("segment_alloc", block.ptr, alloc_size, stream)
        return block

    def _release_available_cached_blocks(self, pool: _Pool, size: int, stream: int) -> bool:
        """release_available_cached_blocks (only with max_split_size set): free one oversize
        cached block of at least max(size, max_split_size), or else the largest oversize
        ones of the stream until they add up to that."""
        cfg = self.config
        if cfg.max_split_size == SIZE_MAX:
            return False
        key = max(size, cfg.max_split_size)
        keys = pool.keys
        i = _bisect(keys, (stream, key, -1))
        if i < len(keys) and keys[i][0] == stream and pool.at(i).segment is None:
            self._release_block(pool.at(i))
            return True
        if i == 0:
            return False
        released = 0
        i -= 1  # the largest block below the key (of this stream, if it has any)
        while released < key and keys[i][0] == stream and pool.at(i).size >= cfg.max_split_size:
            current = pool.at(i)
            first = i == 0
            if not first:
                i -= 1
            if current.segment is None:
                released += current.size
                self._release_block(current)
            if first:
                break
        return released >= key

    def _release_cached_blocks(self) -> None:
        """release_cached_blocks: every unsplit cached segment goes back (cudaFree); the free
        pages of expandable segments are unmapped."""
        for pool in (self.large, self.small):  # release_blocks(large), then small
            whole = sorted(pool.whole.values(), key=lambda b: (b.stream, b.size, b.ptr))
            for block in whole:  # in the pool's order, as release_blocks walks it
                self._release_block(block)
            if not self.config.expandable_segments:
                continue
            to_unmap = sorted(pool.pageful.values(), key=lambda b: (b.stream, b.size, b.ptr))
            for block in to_unmap:
                self._unmap_block(pool, block)
                if not block.mapped and not block.is_split():  # release_expandable_segment
                    pool.erase_unmapped(block)

    def _release_block(self, block: _Block) -> None:
        """release_block: cudaFree of a whole cached segment."""
        pool = self.small if block.small else self.large
        pool.erase(block)
        self.reserved -= block.size
        self._record("segment_free", block.ptr, block.size, block.stream)

    def _garbage_collect_cached_blocks(self) -> None:
        """garbage_collect_cached_blocks (garbage_collection_threshold, only with a memory
        fraction set): above threshold x allowed memory, free unsplit large cached segments
        unused for longer than average, until back under it."""
        assert self.allowed_max is not None
        threshold = int(self.config.garbage_collection_threshold * self.allowed_max)
        if self.reserved <= threshold:
            return
        target = self.reserved - threshold
        pool = self.large
        count = pool.get_free_blocks_call_count
        ages = [count - b.gc_base for b in pool.blocks.values() if not b.is_split()]
        total_age, freeable = sum(ages), len(ages)
        reclaimed, freed = 0, True
        while reclaimed < target and freed and freeable > 0:
            threshold_age = total_age / freeable
            freed = False
            for block in [pool.blocks[k[2]] for k in pool.keys]:
                age = count - block.gc_base
                if not block.is_split() and block.segment is None and age >= threshold_age:
                    freed = True
                    reclaimed += block.size
                    total_age -= age
                    freeable -= 1
                    self._release_block(block)

    # -- expandable segments ----------------------------------------------------------------

    def _find_expandable_block(self, pool: _Pool, size: int, stream: int) -> _Block | None:
        """find_expandable_block: the lowest-address unmapped range of the stream (with the
        free block just before it) with room for ``size``, or a new expandable segment."""

        def allocatable(b: _Block | None) -> bool:
            return b is not None and not b.allocated

        def room(b: _Block | None) -> bool:
            total = 0
            while total < size and b is not None and allocatable(b):
                total += b.size
                b = b.next
            return total >= size

        keys = pool.unmapped_keys
        for k in range(_bisect(keys, (stream, -1)), len(keys)):
            if keys[k][0] != stream:
                break
            unmapped = pool.unmapped[keys[k][1]]
            candidate = unmapped.prev if allocatable(unmapped.prev) else unmapped
            if room(candidate):
                return candidate
        page = K_SMALL_BUFFER if pool.small else self.config.large_segment_size
        device = self.device_total if self.device_total is not None else _UNLIMITED_DEVICE
        segment = _Segment(0, page, device)
        if segment.size < size:
            return None
        segment.ptr = self._address(segment.size, page)
        block = _Block(segment.ptr, segment.size, stream, pool.small, segment)
        block.mapped = False
        pool.insert_unmapped(block)
        return block

    def _map_block(self, pool: _Pool, block: _Block, size: int) -> bool:
        """map_block: physical pages for the first ``size`` bytes of an unmapped range
        (ExpandableSegment::map: whole pages, all or none)."""
        segment = block.segment
        assert segment is not None
        begin = (block.ptr - segment.ptr) // segment.page
        end = -(-(block.ptr + size - segment.ptr) // segment.page)
        mapped = (end - begin) * segment.page
        if mapped == 0:
            return False
        if self.capacity is not None and self.reserved + mapped > self.capacity:
            return False  # cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY, the new handles released
        pool.erase_unmapped(block)
        block.mapped = True
        if mapped < block.size:
            rest = _Block(
                block.ptr + mapped, block.size - mapped, block.stream, block.small, segment
            )
            rest.mapped = False
            rest.splice(block, block.next)
            pool.insert_unmapped(rest)
            block.size = mapped
        address = block.ptr
        self._try_merge_blocks(block, block.prev, pool)
        self._try_merge_blocks(block, block.next, pool)
        pool.insert(block)
        self._reserve(mapped)
        self._record("segment_map", address, mapped, block.stream)
        return True

    def _try_allocate_expandable_block(self, pool: _Pool, size: int, stream: int) -> _Block | None:
        """try_allocate_expandable_block: map pages until one free block holds ``size``."""
        candidate = self._find_expandable_block(pool, size, stream)
        if candidate is None:
            return None
        if not candidate.mapped and not self._map_block(pool, candidate, min(candidate.size, size)):
            return None
        while candidate.size < size:  # free -> unmapped: map the rest and merge
            following = candidate.next
            assert following is not None
            if not self._map_block(pool, following, min(size - candidate.size, following.size)):
                return None
            candidate = following
        pool.erase(candidate)
        return candidate

    def _unmap_block(self, pool: _Pool, block: _Block) -> None:
        """unmap_block: the whole pages inside a free block go back (ExpandableSegment::unmap);
        the partial pages at its ends stay mapped as free blocks."""
        segment = block.segment
        assert segment is not None
        begin = -(-(block.ptr - segment.ptr) // segment.page)
        end = (block.ptr + block.size - segment.ptr) // segment.page
        if begin >= end:
            return
        start, length = segment.ptr + begin * segment.page, (end - begin) * segment.page
        pool.erase(block)
        before = start - block.ptr
        if before > 0:
            head = _Block(block.ptr, before, block.stream, block.small, segment)
            head.splice(block.prev, block)
            pool.insert(head)
        after = block.size - before - length
        if after > 0:
            tail = _Block(start + length, after, block.stream, block.small, segment)
            tail.splice(block, block.next)
            pool.insert(tail)
        block.ptr, block.size, block.mapped = start, length, False
        self._try_merge_blocks(block, block.prev, pool)
        self._try_merge_blocks(block, block.next, pool)
        pool.insert_unmapped(block)
        self.reserved -= length
        self._record("segment_unmap", start, length, block.stream)

    # -- out of memory ----------------------------------------------------------------------

    def _oom(self, orig_size: int, alloc_size: int) -> Oom:
        free = [*self.small.blocks.values(), *self.large.blocks.values()]
        total = self.device_total if self.device_total is not None else _UNLIMITED_DEVICE
        capacity = self.capacity if self.capacity is not None else total
        return Oom(
            event=self.event,
            requested=orig_size,
            alloc_size=alloc_size,
            device_total=total,
            device_free=max(0, capacity - self.reserved),
            allowed=self.allowed_max,
            allocated=self.allocated,
            reserved=self.reserved,
            free_blocks=len(free),
            largest_free=max((b.size for b in free), default=0),
            expandable=self.config.expandable_segments,
        )


@dataclass(frozen=True)
class Simulation:
    """The allocator over a sequence of events (up to and including a failing one)."""

    config: AllocatorConfig
    capacity: int | None
    events_run: int
    reserved: tuple[int, ...]  # after each event run
    allocated: tuple[int, ...]
    peak_reserved: int
    peak_allocated: int
    peak_event: int  # the fullest moment at the peak reserve (-1: no events)
    segments_at_peak: tuple[Segment, ...]
    segments: tuple[Segment, ...]  # at the end
    log: tuple[SegmentEvent, ...]
    oom: Oom | None
    # Requests that found CUDA out of memory at first (then freed cached blocks and retried,
    # or failed): none means the run is the one an unlimited device would make.
    failed_mallocs: int = 0

    @property
    def allocated_at_peak(self) -> int:
        return sum(s.allocated for s in self.segments_at_peak)

    @property
    def fragmentation_at_peak(self) -> int:
        """Reserved but free at the peak: cached in segments, holding no tensor."""
        return sum(s.free for s in self.segments_at_peak)


def _run(
    events: Sequence[Event], allocator: CachingAllocator, reserved: list[int], allocated: list[int]
) -> Oom | None:
    live: dict[Hashable, _Block | None] = {}
    for index, event in enumerate(events):
        allocator.event = index
        # exactly the three types (none is subclassed): a type test costs less than isinstance
        if type(event) is Alloc:
            if event.id in live:
                raise ValueError(f"event {index}: id {event.id!r} is already allocated")
            size = event.size
            if type(size) is not int or size < 0:  # bool is not int by type
                raise ValueError(f"event {index}: size {size!r} is not a byte count")
            if size >= ONE_EXA_BYTES:
                raise BeyondPyTorch(index, size)
            try:  # a size of 0 never reaches the allocator (NativeCachingAllocator::allocate)
                live[event.id] = allocator.malloc(size, event.stream) if size else None
            except OutOfMemory as exc:
                reserved.append(allocator.reserved)
                allocated.append(allocator.allocated)
                return exc.oom
        elif type(event) is Free:
            if event.id not in live:
                raise ValueError(f"event {index}: id {event.id!r} is not allocated")
            block = live.pop(event.id)
            if block is not None:
                allocator.free(block)
        elif type(event) is EmptyCache:
            allocator.empty_cache()
        else:
            raise ValueError(f"event {index}: {event!r} is not an Alloc, Free or EmptyCache")
        reserved.append(allocator.reserved)
        allocated.append(allocator.allocated)
    return None


def simulate(
    events: Iterable[Event],
    capacity: int | None = None,
    config: AllocatorConfig = DEFAULT,
    device_total: int | None = None,
    peak_segments: bool = True,
) -> Simulation:
    """Run ``events`` through a fresh allocator. Stops at the first allocation that fails, as
    the training step would; ValueError (one line) for an event that cannot happen.
    ``peak_segments=False`` skips listing the segments at the peak (a second run of the events
    up to it): for searches that need only the peaks."""
    events = list(events)
    allocator = CachingAllocator(capacity, config, device_total)
    reserved: list[int] = []
    allocated: list[int] = []
    oom = _run(events, allocator, reserved, allocated)
    peak = allocator.peak_reserved
    at_peak = [i for i, r in enumerate(reserved) if r == peak]
    # The fullest moment at the peak reserve; or the event within which the peak was passed
    # (pages mapped, then a failed retry gave them back).
    peak_event = max(at_peak, key=lambda i: (allocated[i], -i)) if at_peak else allocator.peak_event
    # A second, shorter run stops at the peak moment to list its segments: copying them at
    # every new peak would cost more than running the prefix again.
    if not peak_segments:
        segments_at_peak: tuple[Segment, ...] = ()
    elif peak_event == len(reserved) - 1 and oom is None:
        segments_at_peak = allocator.segments()
    elif peak_event >= 0:
        again = CachingAllocator(capacity, config, device_total)
        _run(events[: peak_event + 1], again, [], [])
        segments_at_peak = again.segments()
    else:
        segments_at_peak = ()
    return Simulation(
        config=config,
        capacity=capacity,
        events_run=len(reserved),
        reserved=tuple(reserved),
        allocated=tuple(allocated),
        peak_reserved=peak,
        peak_allocated=allocator.peak_allocated,
        peak_event=peak_event,
        segments_at_peak=segments_at_peak,
        segments=allocator.segments(),
        log=tuple(allocator.log),
        oom=oom,
        failed_mallocs=allocator.failed_mallocs,
    )
