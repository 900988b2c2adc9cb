"""`trainmem-tui replay FILE`: snapshots written here in the format torch.cuda.memory.
_dump_snapshot writes (a plain pickle of the dict torch/cuda/memory.py's _snapshot documents),
with the segments a real allocator records for them (worked out from the rules), and hostile or
broken files that must be refused without running anything."""

from __future__ import annotations

import json
import os
import pickle

import pytest

from trainmem.cli.main import main
from trainmem.sources.snapshots import SnapshotError, load_snapshot, replay_events

MiB = 1024 * 1024
SMALL, L1, L2 = 0x7F0000000000, 0x7F0000200000, 0x7F0001600000


def entry(action, addr, size, stream=0):
    return {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": stream,
        "time_us": 1,
        "frames": [],
    }


def segment(address, total, allocated, kind, blocks):
    return {
        "device": 0,
        "address": address,
        "total_size": total,
        "allocated_size": allocated,
        "active_size": allocated,
        "requested_size": allocated,
        "stream": 0,
        "segment_type": kind,
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": [],
        "blocks": blocks,
    }


def snapshot(big_segment=20 * MiB, empty_cache=False, settings="", unmatched=False):
    """1000 B (a 2 MiB small segment), 5 MiB (a 20 MiB one), 12 MiB (in its 15 MiB left),
    5 MiB freed, 30 MiB (a new segment) freed; optionally empty_cache() at the end."""
    trace = [
        entry("segment_alloc", SMALL, 2 * MiB),
        entry("alloc", SMALL, 1000),
        entry("segment_alloc", L1, big_segment),
        entry("alloc", L1, 5 * MiB),
        entry("alloc", L1 + 5 * MiB, 12 * MiB),
        entry("free_requested", L1, 5 * MiB),
        entry("free_completed", L1, 5 * MiB),
        entry("segment_alloc", L2, 30 * MiB),
        entry("alloc", L2, 30 * MiB),
        entry("free_requested", L2, 30 * MiB),
        entry("free_completed", L2, 30 * MiB),
    ]
    segments = [
        segment(SMALL, 2 * MiB, 1024, "small", []),
        segment(L1, 20 * MiB, 12 * MiB, "large", []),
    ]
    if empty_cache:
        trace.append(entry("segment_free", L2, 30 * MiB))
    else:
        segments.append(segment(L2, 30 * MiB, 0, "large", []))
    if unmatched:
        trace.insert(0, entry("free_completed", 0x1000, 4096))
    return {
        "segments": segments,
        "device_traces": [trace],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": settings,
            "max_split_size": 2**64 - 1,
            "garbage_collection_threshold": 0.0,
            "expandable_segments": "expandable_segments:True" in settings,
            "roundup_power2_divisions": {str(2**i): 0 for i in range(16)},
        },
    }


def write(tmp_path, data, name="snap.pickle"):
    path = tmp_path / name
    path.write_bytes(pickle.dumps(data))
    return str(path)


def replay(args, capsys):
    status = main(["replay", *args])
    out, err = capsys.readouterr()
    return status, out, err


def test_a_snapshot_is_replayed_and_its_segments_reproduced(tmp_path, capsys):
    status, out, err = replay([write(tmp_path, snapshot())], capsys)
    assert status == 0 and err == ""
    assert "peak reserved    52.00 MiB" in out
    assert (
        "check: the 3 segment actions of the trace are reproduced; the final segments match" in out
    )
    # with one expandable segment the 30 MiB request extends the 20 MiB page after 17 MiB
    assert "expandable_segments:True would reserve" in out


def test_the_json_report(tmp_path, capsys):
    status, out, _ = replay([write(tmp_path, snapshot()), "--json"], capsys)
    report = json.loads(out)
    assert status == 0
    assert report["peak_reserved_bytes"] == 52 * MiB
    assert report["peak_allocated_bytes"] == 1024 + 12 * MiB + 30 * MiB
    assert report["allocations"] == 4 and report["check"]["reproduced"] is True
    assert report["check"]["final_segments_match"] is True


def test_a_segment_the_simulation_does_not_make_is_reported(tmp_path, capsys):
    status, out, _ = replay([write(tmp_path, snapshot(big_segment=22 * MiB))], capsys)
    assert status == 0
    assert (
        "check: NOT reproduced: segment action 2: recorded segment_alloc of 23,068,672 bytes, "
        "simulated segment_alloc of 20,971,520 bytes"
    ) in out


def test_empty_cache_in_the_trace_is_replayed(tmp_path, capsys):
    _, out, _ = replay([write(tmp_path, snapshot(empty_cache=True)), "--json"], capsys)
    report = json.loads(out)
    assert report["empty_cache_calls"] == 1 and report["check"]["reproduced"] is True


def test_memory_allocated_before_the_trace_is_noted(tmp_path, capsys):
    status, out, _ = replay([write(tmp_path, snapshot(unmatched=True))], capsys)
    assert status == 0
    assert "1 frees of memory allocated before the trace began" in out
    assert "final segments were not compared" in out


def test_the_runs_settings_are_used_and_can_be_overridden(tmp_path, capsys):
    # the values the allocator reports win over the text (torch turns expandable segments off
    # where the platform lacks them)
    data = snapshot(settings="expandable_segments:True")
    data["allocator_settings"]["expandable_segments"] = False
    _, out, _ = replay([write(tmp_path, data, "off.pickle"), "--json"], capsys)
    assert json.loads(out)["expandable_segments"] is False
    path = write(tmp_path, snapshot(settings="expandable_segments:True"))
    _, out, _ = replay([path, "--json"], capsys)
    assert json.loads(out)["expandable_segments"] is True
    _, out, _ = replay([path, "--json", "--alloc-conf", "expandable_segments:False"], capsys)
    assert json.loads(out)["expandable_segments"] is False


def test_a_capacity_brings_the_retry_and_the_oom(tmp_path, capsys):
    status, out, _ = replay([write(tmp_path, snapshot()), "--capacity", "40MiB"], capsys)
    assert status == 0
    assert "out of memory    tried to allocate 30.00 MiB" in out


class Evil:
    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickle_that_would_run_code_is_refused_without_running_it(tmp_path, capsys):
    marker = tmp_path / "ran"
    evil = Evil()
    evil.marker = marker
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "device_traces": [evil]}))
    status, out, err = replay([str(path)], capsys)
    assert status == 2 and out == ""
    assert "is not a CUDA memory snapshot: refused to unpickle (it names" in err
    assert err.count("\n") == 1
    assert not marker.exists()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"not a pickle at all", "not a readable pickle"),
        (pickle.dumps([1, 2, 3]), "the file is a list, not a dict"),
        (pickle.dumps({"segments": []}), "no 'segments' and 'device_traces'"),
        (pickle.dumps({"segments": [], "device_traces": [[{"action": "alloc"}]]}), "addr"),
        (pickle.dumps({"segments": [], "device_traces": [[]]}), "has no trace for device 0"),
        (pickle.dumps(snapshot())[:200], "not a readable pickle"),
    ],
)
def test_files_that_are_not_snapshots_are_one_line(tmp_path, capsys, data, reason):
    path = tmp_path / "bad.pickle"
    path.write_bytes(data)
    status, out, err = replay([str(path)], capsys)
    assert status == 2 and out == "" and err.count("\n") == 1
    assert reason in err


def test_missing_file_and_bad_options_are_one_line(tmp_path, capsys):
    status, _, err = replay([str(tmp_path / "nope.pickle")], capsys)
    assert status == 2 and "no such file" in err
    path = write(tmp_path, snapshot())
    status, _, err = replay([path, "--alloc-conf", "expandable_segments:yes"], capsys)
    assert status == 2 and "expandable_segments" in err
    status, _, err = replay([path, "--capacity", "lots"], capsys)
    assert status == 2 and "--capacity" in err


def test_shared_references_cannot_make_the_walk_unbounded(tmp_path, monkeypatch):
    import trainmem.sources.snapshots as snapshots

    trace = [entry("alloc", 512 * i, 512) for i in range(100)]
    data = {"segments": [], "device_traces": [trace] * 20}  # 20 x 100 shared entries
    with pytest.raises(SnapshotError, match=r"device_traces\[1\] is an object it already holds"):
        load_snapshot(write(tmp_path, data))
    monkeypatch.setattr(snapshots, "MAX_ITEMS", 1000)
    traces = [[entry("alloc", 512 * i, 512) for i in range(100)] for _ in range(20)]
    distinct = {"segments": [], "device_traces": traces}
    with pytest.raises(SnapshotError, match="more than 1,000 entries"):
        load_snapshot(write(tmp_path, distinct))


def test_a_small_file_cannot_hold_millions_of_entries(tmp_path):
    """84 KiB of pickle referring to one entry 30,000 times per trace: refused at once (it
    took 32 s and 1.2 GB before), with the budget the file's size allows."""
    one = entry("alloc", 512, 512)
    data = {"segments": [], "device_traces": [[one] * 30_000]}
    path = write(tmp_path, data)
    with pytest.raises(SnapshotError, match=r"for its size|already holds"):
        load_snapshot(path)


def test_the_loader_turns_the_trace_into_events(tmp_path):
    snap = load_snapshot(write(tmp_path, snapshot(empty_cache=True)))
    events = replay_events(snap)
    assert [type(e).__name__ for e in events.events] == [
        "Alloc",
        "Alloc",
        "Alloc",
        "Free",
        "Alloc",
        "Free",
        "EmptyCache",
    ]
    assert events.recorded == (
        ("segment_alloc", 2 * MiB),
        ("segment_alloc", 20 * MiB),
        ("segment_alloc", 30 * MiB),
        ("segment_free", 30 * MiB),
    )


def test_empty_traces_are_not_taken_for_shared_objects(tmp_path):
    """Pickle gives every empty tuple as the one empty tuple: repeating it repeats nothing."""
    snap = load_snapshot(write(tmp_path, {"segments": [], "device_traces": [(), ()]}))
    assert snap.traces == ((), ())


def test_pickles_that_unfold_in_memory_are_refused_at_once(tmp_path):
    """A 9-byte pickle whose one PUT names memo slot 2^29 (the C unpickler grew its memo to
    8 GB) and 2 MB of 1-byte EMPTY_SET opcodes (a set each: 250 times the file in memory):
    both refused while unpickling, each object counted as it is made."""
    memo = tmp_path / "memo.pickle"
    memo.write_bytes(b"\x80\x02}r" + (2**29).to_bytes(4, "little") + b".")
    with pytest.raises(SnapshotError, match="no 'segments' and 'device_traces'"):
        load_snapshot(memo)
    sets = tmp_path / "sets.pickle"
    sets.write_bytes(b"\x80\x04}(\x8c\x08segments](" + b"\x8f" * 2**21 + b"e.")
    with pytest.raises(SnapshotError, match=r"refused to unpickle.*a set"):
        load_snapshot(sets)
    dicts = tmp_path / "dicts.pickle"
    dicts.write_bytes(b"\x80\x04}(\x8c\x08segments](" + b"}" * 2**21 + b"e.")
    with pytest.raises(SnapshotError, match=r"makes more than 1,049,\d+ objects for its size"):
        load_snapshot(dicts)


def test_an_action_of_the_wrong_type_is_one_line(tmp_path):
    data = {"segments": [], "device_traces": [[{**entry("alloc", 512, 512), "action": ["x"]}]]}
    with pytest.raises(SnapshotError, match="trace entry 0 of device 0 has an unknown action"):
        load_snapshot(write(tmp_path, data))


def test_compressed_files_and_a_memory_fraction_say_what_to_do(tmp_path, capsys):
    import gzip

    path = tmp_path / "snap.pickle.gz"
    path.write_bytes(gzip.compress(pickle.dumps(snapshot())))
    status, _, err = replay([str(path)], capsys)
    assert status == 2 and "gzip-compressed: decompress it first" in err
    zipped = tmp_path / "snap.pt"
    zipped.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    status, _, err = replay([str(zipped)], capsys)
    assert status == 2 and "a zip archive (what torch.save writes)" in err
    shared = {
        **snapshot(),
        "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "per_process_memory_fraction:0.5"},
    }
    status, _, err = replay([write(tmp_path, shared)], capsys)
    assert status == 2 and "give that memory with --capacity" in err
