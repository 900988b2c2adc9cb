"""`trainmem-tui replay FILE`: a CUDA memory snapshot of your own run, replayed through the
caching-allocator simulation: where the memory went, and what expandable_segments would change.

    python -c "import torch; torch.cuda.memory._record_memory_history(max_entries=1000000)"
    ... train a few steps, then torch.cuda.memory._dump_snapshot("snapshot.pickle")
    trainmem-tui replay snapshot.pickle

The pickle is read without running anything in it (trainmem.sources.snapshots). The replay
runs the trace's allocations and frees (with the allocator settings the run recorded, or
``--alloc-conf``) and checks itself: the segments the simulation asks CUDA for must be the
ones the trace recorded. ``--capacity`` sets the memory cudaMalloc may take (default: no
limit, so a run that freed cached segments to make room differs there, and says so).

Bad input (a missing file, a file that is not a snapshot, a bad --alloc-conf) is one line on
stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainmem.core.allocator import Simulation

PROG = "trainmem-tui replay"


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "replay",
        help="replay a CUDA memory snapshot through the allocator simulation",
        description="Replay the trace of a torch.cuda.memory._dump_snapshot pickle through the "
        "caching-allocator simulation: peak reserved and allocated, fragmentation, and what "
        "expandable_segments would change.",
    )
    parser.add_argument("path", metavar="FILE", help="the snapshot pickle")
    parser.add_argument("--device", type=int, default=None, help="device index (default: busiest)")
    parser.add_argument(
        "--alloc-conf", default=None, metavar="CONF", help="PYTORCH_CUDA_ALLOC_CONF to replay with"
    )
    parser.add_argument(
        "--capacity", default=None, metavar="SIZE", help="memory cudaMalloc may take (e.g. 24GiB)"
    )
    parser.add_argument("--json", action="store_true", help="print the JSON object")
    parser.set_defaults(run=run)


def _fail(message: str) -> int:
    from trainmem.core.text import visible

    sys.stderr.write(f"{PROG}: error: {visible(message)}\n")
    return 2


def run(ns: argparse.Namespace) -> int:
    from trainmem.core.alloc_conf import parse_alloc_conf
    from trainmem.core.allocator import simulate
    from trainmem.core.units import parse_size
    from trainmem.sources.snapshots import (
        check_replay,
        load_snapshot,
        replay_events,
        snapshot_config,
    )

    try:
        capacity = parse_size(ns.capacity) if ns.capacity is not None else None
    except ValueError as exc:
        return _fail(f"--capacity: {exc}")
    try:
        if ns.alloc_conf is not None:
            config, origin = parse_alloc_conf(ns.alloc_conf), "--alloc-conf"
        snapshot = load_snapshot(ns.path)
        if ns.alloc_conf is None:
            config, origin = snapshot_config(snapshot)
        replay = replay_events(snapshot, ns.device)
        if capacity is None and config.per_process_memory_fraction < 1.0:
            return _fail(
                f"{origin} sets per_process_memory_fraction "
                f"{config.per_process_memory_fraction:g}, a share of the GPU's memory: "
                "give that memory with --capacity (e.g. --capacity 80GiB)"
            )
        sim = simulate(replay.events, capacity=capacity, config=config)
        other = replace(config, expandable_segments=not config.expandable_segments)
        alt = simulate(replay.events, capacity=capacity, config=other)
    except ValueError as exc:  # FileReadError, SnapshotError, AllocConfError, a bad --device
        return _fail(str(exc))
    check = check_replay(snapshot, replay, sim)
    report = _report(ns.path, replay, sim, alt, check, origin)
    if ns.json:
        json.dump(report, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print(report)
    return 0


def _peaks(sim: Simulation) -> dict[str, Any]:
    return {
        "peak_reserved_bytes": sim.peak_reserved,
        "peak_allocated_bytes": sim.peak_allocated,
        "allocated_at_peak_bytes": sim.allocated_at_peak,
        "fragmentation_at_peak_bytes": sim.fragmentation_at_peak,
        "segments_at_peak": len(sim.segments_at_peak),
        "peak_event": sim.peak_event,
        "oom": sim.oom.summary() if sim.oom is not None else None,
    }


def _report(path: str, replay: Any, sim: Simulation, alt: Simulation, check: Any, origin: str):
    return {
        "file": path,
        "device": replay.device,
        "allocations": replay.allocs,
        "events": len(replay.events),
        "frees_of_memory_allocated_before_the_trace": replay.unmatched_frees,
        "empty_cache_calls": replay.empty_caches,
        "recorded_ooms": replay.ooms,
        "allocator_settings": origin,
        "expandable_segments": sim.config.expandable_segments,
        **_peaks(sim),
        "other_expandable_segments": {
            "expandable_segments": alt.config.expandable_segments,
            **_peaks(alt),
        },
        "check": {
            "reproduced": check.reproduced,
            "segment_actions_compared": check.compared,
            "first_difference": check.mismatch,
            "final_segments_match": check.final,
        },
    }


def _print(r: dict[str, Any]) -> None:
    from trainmem.core.allocator import format_size as fs
    from trainmem.core.text import visible

    peak = r["peak_reserved_bytes"]
    frag = r["fragmentation_at_peak_bytes"]
    print(visible(f"{r['file']}: device {r['device']}, {r['allocations']:,} allocations"))
    print(visible(f"allocator settings: {r['allocator_settings']}"))
    if r["frees_of_memory_allocated_before_the_trace"]:
        print(
            f"note: {r['frees_of_memory_allocated_before_the_trace']:,} frees of memory "
            "allocated before the trace began (its ring buffer was full, or recording started "
            "late): that memory is not in the replay"
        )
    print(f"peak reserved    {fs(peak)}")
    print(f"peak allocated   {fs(r['peak_allocated_bytes'])}")
    share = f" ({100 * frag / peak:.1f}% of the peak)" if peak else ""
    print(
        f"at the peak      {fs(r['allocated_at_peak_bytes'])} allocated, {fs(frag)} reserved "
        f"but free{share}, in {r['segments_at_peak']} segments"
    )
    if r["oom"]:
        print(f"out of memory    {r['oom']}")
    alt = r["other_expandable_segments"]
    flag = "True" if alt["expandable_segments"] else "False"
    change = alt["peak_reserved_bytes"] - peak
    sign = "+" if change > 0 else "-" if change < 0 else "±"
    print(
        f"expandable_segments:{flag} would reserve {fs(alt['peak_reserved_bytes'])} at the "
        f"peak ({sign}{fs(abs(change))})"
    )
    check = r["check"]
    if check["reproduced"]:
        final = (
            "; the final segments match"
            if check["final_segments_match"]
            else " (the final segments were not compared: the trace does not cover the run)"
        )
        print(
            f"check: the {check['segment_actions_compared']} segment actions of the trace "
            f"are reproduced{final}"
        )
    else:
        difference = check["first_difference"] or "the final segments differ"
        print(visible(f"check: NOT reproduced: {difference}"))
