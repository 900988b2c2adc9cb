"""The caching-allocator simulation against figures worked out by hand from the rules of torch's
c10/cuda/CUDACachingAllocator.cpp (the function each case exercises is named), and properties
that hold for any trace."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from trainmem.core.alloc_conf import parse_alloc_conf
from trainmem.core.allocator import (
    Alloc,
    CachingAllocator,
    EmptyCache,
    Free,
    allocation_size,
    format_size,
    round_size,
    roundup_power2_next_division,
    simulate,
)

KiB = 1024
MiB = 1024 * 1024
EXPANDABLE = parse_alloc_conf("expandable_segments:True")


def segment_sizes(sim, action="segment_alloc"):
    return [e.size for e in sim.log if e.action == action]


# -- round_size, roundup_power2_next_division, get_allocation_size ----------------------------


@pytest.mark.parametrize(
    ("size", "rounded"),
    [(0, 512), (1, 512), (512, 512), (513, 1024), (1000, 1024), (MiB, MiB), (MiB + 1, MiB + 512)],
)
def test_sizes_round_to_512_bytes(size, rounded):
    assert round_size(size) == rounded


def test_power2_divisions_round_up_to_the_next_step():
    assert roundup_power2_next_division(1200, 4) == 1280  # the source's own example
    assert roundup_power2_next_division(1024, 4) == 1024  # a power of two stays
    four = parse_alloc_conf("roundup_power2_divisions:4")
    # only sizes above 512 x divisions use them: 1200 is still rounded to 512 bytes
    assert round_size(1200, four) == 1536
    # 5 MiB + 1 lies in [4, 8) MiB: steps of 1 MiB
    assert round_size(5 * MiB + 1, four) == 6 * MiB


def test_per_interval_divisions_follow_the_parsers_table():
    cfg = parse_alloc_conf("roundup_power2_divisions:[64:8,256:4,>:1]")
    assert round_size(100 * MiB, cfg) == 104 * MiB  # [64, 128) MiB: 8 steps of 8 MiB
    assert round_size(300 * MiB, cfg) == 320 * MiB  # [256, 512) MiB: 4 steps of 64 MiB
    # [128, 256) MiB is not named and '>' fills only after 256: 0, plain 512-byte rounding
    assert round_size(200 * MiB + 1, cfg) == 200 * MiB + 512
    # below 64 MiB the first value, 8: [2, 4) MiB in steps of 256 KiB
    assert round_size(3 * MiB + 1, cfg) == 3 * MiB + 256 * KiB


@pytest.mark.parametrize(
    ("size", "segment"),
    [
        (512, 2 * MiB),  # small pool: 2 MiB segments
        (MiB, 2 * MiB),  # 1 MiB is still small
        (MiB + 512, 20 * MiB),  # large, under 10 MiB: kLargeBuffer
        (10 * MiB - 512, 20 * MiB),
        (10 * MiB, 10 * MiB),  # from 10 MiB: 2 MiB multiples
        (12 * MiB + 512, 14 * MiB),
    ],
)
def test_allocation_size(size, segment):
    assert allocation_size(size) == segment


def test_pool_choice_and_segment_sizes():
    sim = simulate([Alloc(1, 1000), Alloc(2, MiB), Alloc(3, MiB + 1), Alloc(4, 12 * MiB + 1)])
    # 1000 B and 1 MiB share one 2 MiB small segment; 1 MiB + 1 opens a 20 MiB large one,
    # whose 19 MiB - 512 remainder cannot hold 12 MiB + 512 ... it can: best fit takes it.
    assert segment_sizes(sim) == [2 * MiB, 20 * MiB]
    assert sim.peak_reserved == 22 * MiB
    assert sim.peak_allocated == 1024 + MiB + (MiB + 512) + (12 * MiB + 512)


# -- should_split, alloc_found_block, free_block/try_merge_blocks -----------------------------


def test_small_blocks_pack_into_2_mib_segments():
    sim = simulate([Alloc(i, 512 * KiB) for i in range(5)])
    # four 512 KiB blocks fill one segment (the last remainder is 0: no split), the fifth opens
    # a second
    assert segment_sizes(sim) == [2 * MiB, 2 * MiB]
    assert sim.segments[0].blocks == 4 and sim.segments[0].free_blocks == 0


def test_large_remainders_of_1_mib_or_less_are_not_split():
    sim = simulate([Alloc(1, 9 * MiB), Alloc(2, 10 * MiB)])
    # 9 MiB splits the 20 MiB segment (11 MiB > 1 MiB left); 10 MiB takes the 11 MiB block
    # whole, since 1 MiB left is not more than kSmallSize
    assert segment_sizes(sim) == [20 * MiB]
    assert sim.peak_allocated == 20 * MiB
    assert sim.segments[0].blocks == 2


def test_freed_neighbours_merge_and_a_whole_free_segment_is_released():
    split = simulate([Alloc(1, 512 * KiB), Alloc(2, 512 * KiB), Free(1), EmptyCache()])
    assert split.reserved[-1] == 2 * MiB  # a split segment cannot be cudaFree'd
    merged = simulate([Alloc(1, 512 * KiB), Alloc(2, 512 * KiB), Free(1), Free(2), EmptyCache()])
    assert merged.reserved[-1] == 0
    assert segment_sizes(merged, "segment_free") == [2 * MiB]


def test_streams_have_their_own_blocks():
    sim = simulate([Alloc(1, MiB, stream=0), Free(1), Alloc(2, MiB, stream=7)])
    assert segment_sizes(sim) == [2 * MiB, 2 * MiB]
    same = simulate([Alloc(1, MiB, stream=0), Free(1), Alloc(2, MiB, stream=0)])
    assert segment_sizes(same) == [2 * MiB]


def test_zero_bytes_never_reach_the_allocator():
    sim = simulate([Alloc(1, 0), Free(1)])
    assert sim.peak_reserved == 0 and sim.log == ()


# -- max_split_size_mb: get_free_block, should_split ------------------------------------------


def test_oversize_blocks_are_not_split_for_smaller_requests():
    trace = [Alloc(1, 150 * MiB), Free(1), Alloc(2, 50 * MiB)]
    assert simulate(trace).peak_reserved == 150 * MiB  # split: 100 MiB stays cached
    capped = simulate(trace, config=parse_alloc_conf("max_split_size_mb:100"))
    # the 150 MiB block is >= max_split_size and 50 MiB is below it: a new segment
    assert segment_sizes(capped) == [150 * MiB, 50 * MiB]


def test_oversize_requests_take_a_block_within_the_rounding_margin_unsplit():
    cfg = parse_alloc_conf("max_split_size_mb:100")
    within = simulate([Alloc(1, 150 * MiB), Free(1), Alloc(2, 140 * MiB)], config=cfg)
    assert segment_sizes(within) == [150 * MiB]
    assert within.peak_allocated == 150 * MiB  # handed out whole: 140 MiB >= max_split_size
    # 150 MiB >= 129 MiB + max_non_split_rounding_size (20 MiB): refused, a new segment
    beyond = simulate([Alloc(1, 150 * MiB), Free(1), Alloc(2, 129 * MiB)], config=cfg)
    assert segment_sizes(beyond) == [150 * MiB, 130 * MiB]


# -- the retry chain: release_available_cached_blocks, release_cached_blocks -----------------


def test_cached_blocks_are_freed_and_the_allocation_retried():
    trace = [Alloc(1, 60 * MiB), Free(1), Alloc(2, 70 * MiB)]
    sim = simulate(trace, capacity=100 * MiB)
    assert sim.oom is None
    assert [(e.action, e.size) for e in sim.log] == [
        ("segment_alloc", 60 * MiB),
        ("segment_free", 60 * MiB),
        ("segment_alloc", 70 * MiB),
    ]
    assert sim.peak_reserved == 70 * MiB
    assert sim.failed_mallocs == 1  # the 70 MiB request's first cudaMalloc
    # unlimited, the 60 MiB segment stays cached beside the new one
    unlimited = simulate(trace)
    assert unlimited.peak_reserved == 130 * MiB and unlimited.failed_mallocs == 0
    assert simulate(trace, capacity=130 * MiB).failed_mallocs == 0
    assert simulate(trace, capacity=60 * MiB).failed_mallocs == 1  # then out of memory


def test_oversize_cached_blocks_are_released_first_with_max_split_size():
    cfg = parse_alloc_conf("max_split_size_mb:20")
    trace = [Alloc(1, 30 * MiB), Alloc(2, 40 * MiB), Free(1), Free(2), Alloc(3, 1000)]
    trace += [Alloc(4, 50 * MiB)]
    sim = simulate(trace, capacity=80 * MiB, config=cfg)
    # 50 MiB: no block fits (30, 40 are too small), 72 + 50 > 80 MiB; no single oversize block
    # >= 50 MiB, so the largest ones go (40, then 30: 70 >= 50) and the retry succeeds
    assert sim.oom is None
    assert segment_sizes(sim, "segment_free") == [40 * MiB, 30 * MiB]
    assert sim.reserved[-1] == 2 * MiB + 50 * MiB
    # a 2 MiB request is large: oversize blocks are refused it (2 < 20 MiB), its 20 MiB
    # segment does not fit (90 > 80), and the one oversize block >= 20 MiB (30 MiB) goes
    trace[4] = Alloc(3, 2 * MiB)
    sim = simulate(trace, capacity=80 * MiB, config=cfg)
    assert [(e.event, e.size) for e in sim.log if e.action == "segment_free"] == [
        (4, 30 * MiB),
        (5, 40 * MiB),  # then 40 < 50 MiB is released and the rest is split: none left
    ]


def test_out_of_memory_with_pytorchs_figures():
    trace = [Alloc(1, 9 * MiB), Alloc(2, 9 * MiB), Alloc(3, 15 * MiB), Free(1), Alloc(4, 12 * MiB)]
    sim = simulate(trace, capacity=40 * MiB)
    oom = sim.oom
    assert oom is not None and oom.event == 4 and sim.events_run == 5
    # segments: 20 MiB split three ways (9 free, 9 used, 2 free) and 16 MiB (15 MiB request);
    # neither can be released, and 36 + 12 > 40 MiB
    assert oom.alloc_size == 12 * MiB
    assert oom.reserved == 36 * MiB and oom.allocated == 9 * MiB + 16 * MiB
    assert oom.device_free == 4 * MiB
    assert oom.free_blocks == 2 and oom.largest_free == 9 * MiB
    assert oom.message().startswith(
        "CUDA out of memory. Tried to allocate 12.00 MiB. GPU 0 has a total capacity of "
        "40.00 MiB of which 4.00 MiB is free. Of the allocated memory 25.00 MiB is allocated by "
        "PyTorch, and 11.00 MiB is reserved by PyTorch but unallocated. If reserved"
    )


# -- garbage_collection_threshold: garbage_collect_cached_blocks ------------------------------


def test_garbage_collection_frees_old_cached_segments():
    trace = [Alloc(1, 30 * MiB), Free(1), Alloc(2, 32 * MiB), Free(2), Alloc(3, 34 * MiB)]
    cfg = parse_alloc_conf("garbage_collection_threshold:0.5,per_process_memory_fraction:0.8")
    sim = simulate(trace, capacity=100 * MiB, config=cfg)
    # allowed 80 MiB, threshold 40 MiB; at the third miss 62 MiB are reserved: the segment
    # older than the average (30 MiB, age 2 against 1) goes, and 30 >= 62 - 40 stops it
    assert segment_sizes(sim, "segment_free") == [30 * MiB]
    assert sim.reserved[-1] == 32 * MiB + 34 * MiB
    # without a memory fraction the threshold does nothing (malloc checks both)
    no_fraction = parse_alloc_conf("garbage_collection_threshold:0.5")
    assert simulate(trace, capacity=100 * MiB, config=no_fraction).peak_reserved == 96 * MiB


# -- expandable_segments: find_expandable_block, map_block, unmap_block -----------------------


def test_expandable_segments_map_20_mib_pages_in_one_segment():
    trace = [Alloc(1, 30 * MiB), Alloc(2, 5 * MiB), Alloc(3, 15 * MiB)]
    sim = simulate(trace, config=EXPANDABLE)
    # 30 MiB maps 2 pages; 5 MiB fits the 10 MiB left; 15 MiB extends the 5 MiB free tail
    # by one page
    assert segment_sizes(sim, "segment_map") == [40 * MiB, 20 * MiB]
    assert segment_sizes(sim) == []
    assert [s.size for s in sim.segments] == [60 * MiB]  # one contiguous mapped range
    small = simulate([Alloc(1, 1000)], config=EXPANDABLE)
    assert segment_sizes(small, "segment_map") == [2 * MiB]


def test_expandable_segments_reuse_where_new_segments_would_pile_up():
    trace = [Alloc(1, 30 * MiB), Free(1), Alloc(2, 32 * MiB), Free(2), Alloc(3, 34 * MiB)]
    assert simulate(trace).peak_reserved == 96 * MiB  # 30 + 32 + 34: none fits the last
    assert simulate(trace, config=EXPANDABLE).peak_reserved == 40 * MiB


def test_expandable_segments_can_reserve_more():
    # Not a property: a freed 19 MiB hole in the one segment cannot hold 20 MiB, so the
    # segment grows; separate segments had a 20 MiB one (19 MiB rounded) ready.
    trace = [Alloc(1, 19 * MiB), Alloc(2, 11 * MiB), Free(1), Alloc(3, 20 * MiB)]
    assert simulate(trace).peak_reserved == 32 * MiB
    assert simulate(trace, config=EXPANDABLE).peak_reserved == 60 * MiB


def test_empty_cache_unmaps_the_free_pages_of_expandable_segments():
    sim = simulate([Alloc(1, 30 * MiB), Free(1), EmptyCache()], config=EXPANDABLE)
    assert sim.reserved[-1] == 0
    assert segment_sizes(sim, "segment_unmap") == [40 * MiB]


def test_mapping_a_huge_expandable_request_costs_no_memory_per_page():
    # A replayed snapshot is a stranger's file: 512 TiB requests once took a Python int per
    # 20 MiB page (gigabytes, then MemoryError); the pages mapped are what the blocks say
    import tracemalloc

    trace = [Alloc(i, 1 << 49) for i in range(8)] + [Free(i) for i in range(8)] + [EmptyCache()]
    tracemalloc.start()
    try:
        sim = simulate(trace, config=EXPANDABLE)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert 8 << 49 <= sim.peak_reserved < (8 << 49) + 8 * 20 * MiB  # whole 20 MiB pages
    assert sim.reserved[-1] == 0
    assert peak < 16 * MiB


def test_larger_sizes_can_reserve_less():
    # Not a property either: 10 MiB gets a 10 MiB segment, 9 MiB a 20 MiB one (kLargeBuffer)
    # whose 11 MiB remainder cannot hold 12 MiB.
    assert simulate([Alloc(1, 9 * MiB), Alloc(2, 12 * MiB)]).peak_reserved == 32 * MiB
    assert simulate([Alloc(1, 10 * MiB), Alloc(2, 12 * MiB)]).peak_reserved == 22 * MiB


def test_segments_at_the_peak_are_the_fullest_moment_of_the_peak_reserve():
    sim = simulate([Alloc(1, 9 * MiB), Alloc(2, 5 * MiB), Free(2), Free(1)])
    assert sim.peak_reserved == 20 * MiB and sim.peak_event == 1
    assert sim.allocated_at_peak == 14 * MiB and sim.fragmentation_at_peak == 6 * MiB


def test_format_size_is_pytorchs():
    assert [format_size(n) for n in (1024, 1025, MiB, MiB + 1, 2**30, 2**30 + 1)] == [
        "1024 bytes",
        "1.00 KiB",
        "1024.00 KiB",
        "1.00 MiB",
        "1024.00 MiB",
        "1.00 GiB",
    ]


def test_impossible_events_are_one_line_errors():
    with pytest.raises(ValueError, match="event 1: id 1 is not allocated"):
        simulate([Alloc(2, 10), Free(1)])
    with pytest.raises(ValueError, match="already allocated"):
        simulate([Alloc(1, 10), Alloc(1, 10)])
    with pytest.raises(ValueError, match="not a byte count"):
        simulate([Alloc(1, -1)])


# -- properties -------------------------------------------------------------------------------

SIZES = st.one_of(
    st.integers(0, 2 * MiB), st.integers(MiB, 40 * MiB), st.integers(10 * MiB, 300 * MiB)
)
CONFIGS = st.sampled_from(
    [
        "",
        "expandable_segments:True",
        "max_split_size_mb:64",
        "roundup_power2_divisions:4",
        "roundup_power2_divisions:[32:8,>:2],max_split_size_mb:100",
        "garbage_collection_threshold:0.6,per_process_memory_fraction:0.9",
    ]
)


@st.composite
def traces(draw):
    events, live, next_id = [], [], 0
    for _ in range(draw(st.integers(1, 60))):
        choice = draw(st.integers(0, 9))
        if live and choice < 4:
            events.append(Free(live.pop(draw(st.integers(0, len(live) - 1)))))
        elif choice == 9:
            events.append(EmptyCache())
        else:
            events.append(Alloc(next_id, draw(SIZES), stream=draw(st.sampled_from([0, 0, 1]))))
            live.append(next_id)
            next_id += 1
    return events


@settings(max_examples=150, deadline=None)
@given(traces(), CONFIGS, st.sampled_from([None, 200 * MiB, 600 * MiB]))
def test_reserved_covers_allocated_and_the_segments_add_up(trace, conf, capacity):
    cfg = parse_alloc_conf(conf)
    sim = simulate(trace, capacity=capacity, config=cfg, device_total=1024 * MiB)
    assert all(r >= a for r, a in zip(sim.reserved, sim.allocated, strict=True))
    assert sum(s.size for s in sim.segments) == sim.reserved[-1]
    assert sum(s.allocated for s in sim.segments) == sim.allocated[-1]
    assert sim.peak_reserved >= max(sim.reserved) and sim.peak_allocated == max(sim.allocated)
    if capacity is not None and sim.oom is None:
        assert sim.peak_reserved <= capacity
    if sim.oom is None:
        assert sum(s.size for s in sim.segments_at_peak) == sim.peak_reserved


@settings(max_examples=100, deadline=None)
@given(traces(), CONFIGS)
def test_a_gpu_as_large_as_the_unlimited_peak_changes_nothing(trace, conf):
    cfg = parse_alloc_conf(conf)
    # garbage_collection_threshold is a share of the allowed maximum (garbage_collect_cached_
    # blocks): a smaller device moves the moment it frees cached blocks, so the log differs.
    assume(cfg.garbage_collection_threshold == 0)
    free = simulate(trace, config=cfg, device_total=1024 * MiB)
    fits = simulate(trace, capacity=free.peak_reserved, config=cfg, device_total=1024 * MiB)
    assert fits.oom is None and fits.log == free.log and fits.reserved == free.reserved


@settings(max_examples=100, deadline=None)
@given(traces())
def test_live_bytes_beyond_the_capacity_always_run_out(trace):
    live, need, peak_live = {}, 0, 0
    for e in trace:
        if isinstance(e, Alloc):
            live[e.id] = e.size
            need += e.size
        elif isinstance(e, Free):
            need -= live.pop(e.id)
        peak_live = max(peak_live, need)
    if peak_live > 0:
        for cfg in ("", "expandable_segments:True"):
            sim = simulate(trace, capacity=peak_live - 1, config=parse_alloc_conf(cfg))
            assert sim.oom is not None


@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(1, 40 * MiB)), min_size=1, max_size=120),
    st.booleans(),
)
@settings(max_examples=60, deadline=None)
def test_the_pools_index_what_emptying_the_cache_can_give_back(ops, expandable) -> None:
    """Emptying the cache looks only at the pool's whole cached segments (and, expandable,
    its blocks of a page or more), kept as blocks come and go: they must be exactly those."""
    conf = parse_alloc_conf("expandable_segments:True" if expandable else "")
    a = CachingAllocator(config=conf, device_total=4096 * MiB)
    live = []
    for kind, size in ops:
        if kind == 0 or not live:
            live.append(a.malloc(size))
        elif kind == 1:
            a.free(live.pop(size % len(live)))
        else:
            a.empty_cache()
        for pool in (a.small, a.large):
            free = list(pool.blocks.values())
            assert pool.whole == {b.ptr: b for b in free if b.segment is None and not b.is_split()}
            assert pool.pageful == {
                b.ptr: b for b in free if b.segment is not None and b.size >= b.segment.page
            }


def test_emptying_the_cache_beside_many_split_blocks_looks_at_none_of_them(monkeypatch) -> None:
    """A replayed trace that empties the cache after every free, beside 2,000 cached 512-byte
    blocks that split segments hold: each empty_cache() walked all of them (a 5 MB snapshot
    ran for minutes)."""
    conf = parse_alloc_conf("expandable_segments:True")
    a = CachingAllocator(config=conf, device_total=4096 * MiB)
    blocks = [a.malloc(512) for _ in range(4000)]
    for b in blocks[::2]:
        a.free(b)
    looked = []
    real = a._unmap_block
    monkeypatch.setattr(a, "_unmap_block", lambda pool, b: (looked.append(b), real(pool, b)))
    for _ in range(100):
        a.empty_cache()
    assert len(a.small.blocks) >= 2000 and len(looked) <= 100


@settings(max_examples=120, deadline=None)
@given(traces(), CONFIGS, st.sampled_from([None, 200 * MiB]))
def test_pools_kept_in_a_sorted_list_simulate_exactly_as_in_a_list(trace, conf, capacity) -> None:
    """Past LIST_KEYS_MAX free blocks a pool's keys move to a SortedList (O(log n) inserts for
    replayed traces that cache many blocks); with the limit at 1 every pool does at once, and
    every figure must stay as the list gives it."""
    from unittest import mock

    from trainmem.core import allocator

    cfg = parse_alloc_conf(conf)
    run = lambda: simulate(trace, capacity=capacity, config=cfg, device_total=1024 * MiB)  # noqa: E731
    listed = run()
    with mock.patch.object(allocator, "LIST_KEYS_MAX", 1):
        sorted_ = run()
    assert sorted_ == listed


def test_a_pool_of_many_free_blocks_leaves_the_list_for_a_sorted_list() -> None:
    """400,000 blocks freed last-first took 50 s: each insort moved every key."""
    from trainmem.core.allocator import LIST_KEYS_MAX

    n = LIST_KEYS_MAX + 10
    events = [Alloc(i, 12 * MiB) for i in range(n)] + [Free(i) for i in reversed(range(n))]
    a = CachingAllocator()
    blocks = [a.malloc(12 * MiB) for _ in range(n)]
    for b in reversed(blocks):
        a.free(b)
    assert type(a.large.keys) is not list and list(a.large.keys) == sorted(a.large.keys)
    assert simulate(events).segments == a.segments()
