"""A traced allocation sequence as compact text, for the results files (no torch needed, so
bench/accuracy/compare.py can simulate the recorded sequences again)."""

from __future__ import annotations

from trainmem.core.allocator import Alloc, Event, Free


def encode(events: list[Event]) -> str:
    """A traced sequence as text: an allocation as its size, a free as minus one plus the
    number of the allocation it frees (allocations numbered from 0 in order)."""
    return " ".join(str(e.size) if isinstance(e, Alloc) else str(-1 - e.id) for e in events)


def decode(text: str) -> list[Event]:
    """The inverse of ``encode``."""
    events: list[Event] = []
    count = 0
    for word in text.split():
        value = int(word)
        if value > 0:
            events.append(Alloc(count, value))
            count += 1
        else:
            events.append(Free(-1 - value))
    return events
