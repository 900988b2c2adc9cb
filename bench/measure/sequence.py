"""A traced allocation sequence as compact text, for the results files (no torch needed, so
bench/accuracy/compare.py can simulate the recorded sequences again).

Each event is a number: an allocation its size in bytes, a free minus the count of allocations
made since the one it frees (1: the latest), which repeats across layers and so compresses
well; the numbers, space-separated, gzip-compressed and base64-encoded.
"""

from __future__ import annotations

import base64
import gzip
import zlib

from trainmem.core.allocator import Alloc, Event, Free

MAX_TEXT = 64 * 1024 * 1024  # a recorded sequence inflates to at most this (bounded work)


def pack(events: list[Event]) -> str:
    """``events`` (allocations numbered 0, 1, ... in order, as trace_events records them)."""
    words, count = [], 0
    for event in events:
        if isinstance(event, Alloc):
            words.append(str(event.size))
            count += 1
        elif isinstance(event, Free):
            words.append(str(-(count - int(event.id))))
    return base64.b64encode(gzip.compress(" ".join(words).encode(), 9, mtime=0)).decode()


def unpack(text: str) -> list[Event]:
    """The inverse of ``pack``; ValueError for text that is not a packed sequence."""
    inflate = zlib.decompressobj(wbits=31)  # gzip
    raw = inflate.decompress(base64.b64decode(text, validate=True), MAX_TEXT)
    if inflate.unconsumed_tail:
        raise ValueError(f"packed sequence inflates beyond {MAX_TEXT} bytes")
    events: list[Event] = []
    count = 0
    for word in raw.decode().split():
        value = int(word)
        if value > 0:
            events.append(Alloc(count, value))
            count += 1
        elif -value <= count:
            events.append(Free(count + value))
        else:
            raise ValueError(f"free of an allocation before the first: {value}")
    return events
