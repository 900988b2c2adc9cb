"""The dataset's token lengths (``--data``) as a histogram with the plan's maximum length
marked: bins past it are the examples truncation cuts. Redrawn on every estimate, so it
moves as the Seq length field is edited."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import Static

if TYPE_CHECKING:  # the dataset readers load only when --data is given
    from trainmem.planner.lengths import Lengths

BINS = 10
BAR = 24


def _nice(step: float) -> int:
    """A round bin width (1, 2 or 5 times a power of ten) at least ``step``."""
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale >= step:
                return m * scale
        scale *= 10


def histogram(lengths: Lengths, seq_len: int, bins: int = BINS, bar: int = BAR) -> Text:
    """Horizontal bars over equal-width length bins up to the p99 example (the longest ones
    fold into the last bin), the bin holding ``seq_len`` marked; bins past it in red."""
    text = Text()
    if not lengths.examples:
        return text
    top = max(lengths.percentile(99), min(seq_len, lengths.longest), 1)
    width = _nice(top / bins)
    counts = [0] * bins
    for n, c in lengths.lengths.items():
        counts[min(n // width, bins - 1)] += c
    most = max(counts) or 1
    for i, count in enumerate(counts):
        low = i * width
        last = i == bins - 1
        label = f"{low:>7,}+" if last else f"{low:>7,}-{low + width - 1:<7,}"
        filled = round(bar * count / most)
        cut = low >= seq_len
        marked = low <= seq_len < low + width and not (last and seq_len >= low + width)
        style = "red" if cut else "green"
        text.append(f"{label:<16}")
        text.append("█" * filled, style=style)
        text.append("·" * (bar - filled), style="dim")
        text.append(f" {count:>7,}")
        if marked:
            text.append("  ◀ max length", style="bold")
        text.append("\n")
    over = lengths.longer_than(seq_len)
    cut = lengths.answer_cut(seq_len)
    answers = lengths.answer_tokens
    text.append(
        f"p50 {lengths.percentile(50):,} · p95 {lengths.percentile(95):,} · "
        f"max {lengths.longest:,} tokens; {over:,} of {lengths.examples:,} examples "
        f"({100 * over / lengths.examples:.1f}%) longer than {seq_len:,}"
    )
    if answers:
        text.append(f", {100 * cut / answers:.1f}% of answer tokens cut")
    return text


class LengthHistogram(Static):
    """Hidden until a dataset has been read."""

    def show(self, lengths: Lengths, seq_len: int) -> None:
        self.display = True
        self.update(histogram(lengths, seq_len))
