"""A CUDA memory snapshot as ``torch.cuda.memory._dump_snapshot`` writes it, read safely, and
its trace turned into the events the allocator simulation runs.

The format (torch 2.13: torch/cuda/memory.py ``_snapshot``'s docstring, and
torch/csrc/cuda/memory_snapshot.cpp ``_memory_snapshot_pickled``, whose keys the Python dict
repeats): a dict with "segments" (each: device, address, total_size, allocated_size, stream,
segment_type "small"/"large", is_expandable, blocks), "device_traces" (one list per device of
entries: action, addr, size, stream; "device_free" instead of addr for "oom") and
"allocator_settings" (PYTORCH_CUDA_ALLOC_CONF's text and the values the allocator used).

A pickle can run any code while it loads (its REDUCE opcode calls whatever GLOBAL names), so it
is unpickled with every global refused: dicts, lists, tuples, str, int, float, bool and None,
all a snapshot holds, are built by opcodes that name no global. The file is read whole first,
bounded in size, and the walk over what it holds is bounded in items (shared references could
otherwise make a small file a huge walk).
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

from trainmem.core.alloc_conf import DEFAULT, AllocatorConfig, AllocConfError, parse_alloc_conf
from trainmem.core.allocator import Alloc, EmptyCache, Event, Free, Simulation
from trainmem.sources.files import read_bytes, show

MAX_SNAPSHOT_BYTES = 1024 * 1024 * 1024  # a 1 GiB pickle: over a million traced actions
MAX_ITEMS = 20_000_000  # dicts and list entries looked at, in all
BYTES_PER_ITEM = 4  # the fewest pickled bytes an entry can honestly take, with margin
_BYTES = 2**64  # sizes, addresses and streams are 64-bit in the snapshot
_ACTIONS = frozenset(
    {
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "oom",
        "snapshot",
    }
)


class SnapshotError(ValueError):
    """A file that is not a memory snapshot; ``str()`` is one line naming it."""


class _Refused(pickle.UnpicklingError):
    pass


class _TooMany(_Refused):
    pass


# The opcodes that make a new object, or a memo entry: counted against the file's size.
_MAKES = frozenset(
    op[0]
    for op in (
        *(pickle.EMPTY_DICT, pickle.EMPTY_LIST, pickle.TUPLE, pickle.TUPLE1, pickle.TUPLE2),
        *(pickle.TUPLE3, pickle.LIST, pickle.DICT, pickle.STRING, pickle.BINSTRING),
        *(pickle.SHORT_BINSTRING, pickle.UNICODE, pickle.BINUNICODE, pickle.SHORT_BINUNICODE),
        *(pickle.BINUNICODE8, pickle.BINBYTES, pickle.SHORT_BINBYTES, pickle.BINBYTES8),
        *(pickle.BYTEARRAY8, pickle.INT, pickle.BININT, pickle.BININT2, pickle.LONG),
        *(pickle.LONG1, pickle.LONG4, pickle.FLOAT, pickle.BINFLOAT, pickle.PUT),
        *(pickle.BINPUT, pickle.LONG_BINPUT, pickle.MEMOIZE),
    )
)
# No snapshot holds a set (nor a buffer): refused, not built (an EMPTY_SET is 1 byte).
_NEVER = frozenset(
    op[0] for op in (pickle.EMPTY_SET, pickle.ADDITEMS, pickle.FROZENSET, pickle.NEXT_BUFFER)
)
MAKES_PER_BYTE = 2  # a new object or memo entry takes at least 2 pickled bytes honestly


def _counted(code: int, load: Any) -> Any:
    if code in _NEVER:

        def refuse(self: _PlainUnpickler) -> None:
            raise _Refused(f"it holds a set or buffer (opcode {bytes([code])!r})")

        return refuse
    if code not in _MAKES:
        return load

    def run(self: _PlainUnpickler) -> None:
        self.made += 1
        if self.made > self.budget:
            raise _TooMany(f"it makes more than {self.budget:,} objects for its size")
        load(self)

    return run


class _PlainUnpickler(pickle._Unpickler):
    """Builds only what needs no global: a pickle naming any class or function is refused
    before anything is called.

    Python's own unpickler (pickle._Unpickler), not the C one: the C one keeps its memo as
    an array, which one PUT of index 2^29 (a 9-byte file) grows to 8 GB before any check
    could run; this one's memo is a dict. Each new object and memo entry counts against
    ``budget`` (half the file's bytes) as it is made, so a file of 1-byte opcodes that each
    make an object (parsed by the C unpickler, 250 times its size in memory) stops there.
    About five times slower than the C unpickler: 8 MB of snapshot take 2-3 s here."""

    dispatch: ClassVar[dict[int, Any]] = {
        code: _counted(code, load) for code, load in pickle._Unpickler.dispatch.items()
    }

    def __init__(self, file: io.BytesIO, budget: int) -> None:
        super().__init__(file)
        self.made, self.budget = 0, budget

    def find_class(self, module: str, name: str) -> Any:
        raise _Refused(f"it names {module[:60]}.{name[:60]}")

    def persistent_load(self, pid: Any) -> Any:
        raise _Refused("it holds a persistent reference")


@dataclass(frozen=True)
class TraceEntry:
    action: str
    addr: int
    size: int
    stream: int


@dataclass(frozen=True)
class RecordedSegment:
    device: int
    address: int
    size: int
    allocated: int
    stream: int
    pool: str
    expandable: bool


@dataclass(frozen=True)
class Snapshot:
    segments: tuple[RecordedSegment, ...]
    traces: tuple[tuple[TraceEntry, ...], ...]  # one per device
    settings: dict[str, Any]  # "allocator_settings", when present
    name: str  # the file, for messages


class _Walk:
    """The checks on what the pickle held, with one budget of items for the whole file."""

    def __init__(self, name: str, size: int) -> None:
        self.name = name
        self.items = 0
        # A trace entry pickles to tens of bytes (its keys, numbers and frames), so a file
        # holds far fewer entries than bytes: more is a pickle whose references repeat
        # objects (a few KiB that would unfold into millions), refused before the work.
        self.budget = min(MAX_ITEMS, size // BYTES_PER_ITEM + 1000)
        self.seen: set[int] = set()  # the containers walked: each appears once in a snapshot

    def fail(self, message: str) -> SnapshotError:
        return SnapshotError(f"{self.name} is not a CUDA memory snapshot: {message}")

    def count(self, value: Any, n: int, what: str) -> None:
        if n:  # an empty container repeats nothing (and the empty tuple is one object)
            if id(value) in self.seen:
                raise self.fail(f"{what} is an object it already holds elsewhere")
            self.seen.add(id(value))
        self.items += n
        if self.items > self.budget:
            raise self.fail(f"it holds more than {self.budget:,} entries for its size")

    def mapping(self, value: Any, what: str) -> dict[Any, Any]:
        if not isinstance(value, dict):
            raise self.fail(f"{what} is a {type(value).__name__}, not a dict")
        self.count(value, 1, what)
        return value

    def sequence(self, value: Any, what: str) -> Sequence[Any]:
        if not isinstance(value, (list, tuple)):
            raise self.fail(f"{what} is a {type(value).__name__}, not a list")
        self.count(value, len(value), what)
        return value

    def size(self, entry: dict[Any, Any], key: str, what: str, signed: bool = False) -> int:
        value = entry.get(key)
        low = -_BYTES if signed else 0
        if not isinstance(value, int) or isinstance(value, bool) or not low <= value < _BYTES:
            raise self.fail(f"{what} has no byte count {key!r} (found {type(value).__name__})")
        return value


def read_snapshot(data: bytes, name: str) -> Snapshot:
    """The snapshot pickled in ``data``; SnapshotError (one line) for anything else."""
    walk = _Walk(name, len(data))
    if data[:2] == b"\x1f\x8b":
        raise walk.fail("it is gzip-compressed: decompress it first (gunzip)")
    if data[:4] == b"PK\x03\x04":  # torch.save's zip archive
        raise walk.fail(
            "it is a zip archive (what torch.save writes); a snapshot is the pickle "
            "torch.cuda.memory._dump_snapshot writes"
        )
    try:
        raw = _PlainUnpickler(io.BytesIO(data), len(data) // MAKES_PER_BYTE + 1000).load()
    except _TooMany as exc:
        raise walk.fail(str(exc)) from None
    except _Refused as exc:
        raise walk.fail(f"refused to unpickle ({exc})") from None
    except Exception as exc:  # a truncated or corrupt pickle raises nearly anything
        reason = str(exc).splitlines()[0][:80] if str(exc) else type(exc).__name__
        raise walk.fail(f"not a readable pickle ({reason})") from None
    top = walk.mapping(raw, "the file")
    if "segments" not in top or "device_traces" not in top:
        raise walk.fail("no 'segments' and 'device_traces'")
    segments = []
    for i, seg in enumerate(walk.sequence(top["segments"], "'segments'")):
        what = f"segment {i}"
        seg = walk.mapping(seg, what)
        pool = seg.get("segment_type")
        if pool not in ("small", "large"):
            raise walk.fail(f"{what} has no segment_type 'small' or 'large'")
        segments.append(
            RecordedSegment(
                device=walk.size(seg, "device", what) if "device" in seg else 0,
                address=walk.size(seg, "address", what),
                size=walk.size(seg, "total_size", what),
                allocated=walk.size(seg, "allocated_size", what),
                stream=walk.size(seg, "stream", what, signed=True),
                pool=pool,
                expandable=seg.get("is_expandable") is True,
            )
        )
    traces = []
    for d, trace in enumerate(walk.sequence(top["device_traces"], "'device_traces'")):
        entries = []
        for i, entry in enumerate(walk.sequence(trace, f"device_traces[{d}]")):
            what = f"trace entry {i} of device {d}"
            entry = walk.mapping(entry, what)
            action = entry.get("action")
            if not isinstance(action, str) or action not in _ACTIONS:  # a list is unhashable
                raise walk.fail(f"{what} has an unknown action")
            addr = 0 if action in ("oom", "snapshot") else walk.size(entry, "addr", what)
            entries.append(
                TraceEntry(
                    action=action,
                    addr=addr,
                    size=walk.size(entry, "size", what),
                    stream=walk.size(entry, "stream", what, signed=True),
                )
            )
        traces.append(tuple(entries))
    settings = top.get("allocator_settings", {})
    return Snapshot(
        segments=tuple(segments),
        traces=tuple(traces),
        settings=walk.mapping(settings, "'allocator_settings'") if settings else {},
        name=name,
    )


def load_snapshot(path: Path | str, limit: int = MAX_SNAPSHOT_BYTES) -> Snapshot:
    """The snapshot in the file at ``path``; FileReadError or SnapshotError, one line."""
    data = read_bytes(Path(path), limit=limit, what="snapshot")
    return read_snapshot(data, show(path))


def snapshot_config(snapshot: Snapshot) -> tuple[AllocatorConfig, str]:
    """The allocator settings the run used and where they came from: its
    PYTORCH_CUDA_ALLOC_CONF text, with the values the allocator reported over it."""
    settings = snapshot.settings
    text = settings.get("PYTORCH_CUDA_ALLOC_CONF")
    config, origin = DEFAULT, "torch's defaults (the snapshot records no settings)"
    if isinstance(text, str):
        try:
            config, origin = parse_alloc_conf(text), f"the run's PYTORCH_CUDA_ALLOC_CONF {text!r}"
        except AllocConfError:
            origin = f"the values the snapshot records (its {text[:60]!r} is not understood)"
        if not text:
            origin = "torch's defaults (the run set no PYTORCH_CUDA_ALLOC_CONF)"
    changes: dict[str, Any] = {}
    if isinstance(settings.get("expandable_segments"), bool):
        changes["expandable_segments"] = settings["expandable_segments"]
    split = settings.get("max_split_size")
    if isinstance(split, int) and not isinstance(split, bool) and split > 0:
        changes["max_split_size"] = min(split, 2**64 - 1)
    gc = settings.get("garbage_collection_threshold")
    if isinstance(gc, float) and 0.0 <= gc < 1.0:
        changes["garbage_collection_threshold"] = gc
    return replace(config, **changes), origin


@dataclass(frozen=True)
class Replay:
    """A device's trace as simulator events, and what the allocator recorded doing."""

    device: int
    events: tuple[Event, ...]
    recorded: tuple[tuple[str, int], ...]  # (segment action, size), in order
    allocs: int
    unmatched_frees: int  # frees of memory allocated before the trace began
    ooms: int
    empty_caches: int


_GROW = ("segment_alloc", "segment_map")
_SHRINK = ("segment_free", "segment_unmap")


def replay_events(snapshot: Snapshot, device: int | None = None) -> Replay:
    """The events of ``device``'s trace (the busiest when None): each "alloc", each
    "free_completed" (when the block is back in its pool), and an empty_cache() where the
    trace gives segments back with no allocation after them to make room for."""
    traces = snapshot.traces
    if device is None:
        device = max(range(len(traces)), key=lambda d: len(traces[d]), default=0)
    if not 0 <= device < len(traces) or not traces[device]:
        raise SnapshotError(f"{snapshot.name} has no trace for device {device}")
    trace = traces[device]
    events: list[Event] = []
    recorded: list[tuple[str, int]] = []
    live: dict[int, int] = {}
    allocs = unmatched = ooms = empties = 0
    for i, entry in enumerate(trace):
        action = entry.action
        if action == "alloc":
            if entry.addr in live:  # its free is missing from the trace
                events.append(Free(live.pop(entry.addr)))
            live[entry.addr] = allocs
            events.append(Alloc(allocs, entry.size, entry.stream))
            allocs += 1
        elif action == "free_completed":
            if entry.addr in live:
                events.append(Free(live.pop(entry.addr)))
            else:
                unmatched += 1
        elif action in _GROW or action in _SHRINK:
            recorded.append((action, entry.size))
            if action in _SHRINK and (i + 1 == len(trace) or trace[i + 1].action not in _SHRINK):
                j = i + 1  # the end of a run of releases: did the allocator need the room?
                if j == len(trace) or trace[j].action not in (*_GROW, "oom"):
                    events.append(EmptyCache())
                    empties += 1
        elif action == "oom":
            ooms += 1
    return Replay(
        device=device,
        events=tuple(events),
        recorded=tuple(recorded),
        allocs=allocs,
        unmatched_frees=unmatched,
        ooms=ooms,
        empty_caches=empties,
    )


@dataclass(frozen=True)
class Check:
    """Whether the simulation did what the recorded allocator did."""

    compared: int  # segment actions compared
    mismatch: str | None  # the first difference, or None
    final: bool | None  # the recorded final segments reproduced (None: trace incomplete)

    @property
    def reproduced(self) -> bool:
        return self.mismatch is None and self.final is not False


def check_replay(snapshot: Snapshot, replay: Replay, sim: Simulation) -> Check:
    """Compare the segments the simulation asked CUDA for with the ones the trace recorded,
    in order, then the final segments with the snapshot's "segments" (when the trace covers
    the whole run: no free of memory allocated before it began)."""
    simulated = [(e.action, e.size) for e in sim.log]
    recorded = list(replay.recorded)
    mismatch = None
    for n, (ours, theirs) in enumerate(zip(simulated, recorded, strict=False)):
        if ours != theirs:
            mismatch = (
                f"segment action {n + 1}: recorded {theirs[0]} of {theirs[1]:,} bytes, "
                f"simulated {ours[0]} of {ours[1]:,} bytes"
            )
            break
    if mismatch is None and len(simulated) != len(recorded):
        mismatch = f"recorded {len(recorded)} segment actions, simulated {len(simulated)}"
    final = None
    if replay.unmatched_frees == 0:
        kept = sorted(s.size for s in snapshot.segments if s.device == replay.device)
        final = kept == sorted(s.size for s in sim.segments)
    return Check(compared=min(len(simulated), len(recorded)), mismatch=mismatch, final=final)
