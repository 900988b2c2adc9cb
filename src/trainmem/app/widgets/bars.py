"""Text bars: stacked estimate bars, device usage bars with the plan's marker, sparklines.

Every segment carries a glyph as well as a colour, so the bars read the same with NO_COLOR,
in 256-colour terminals and on a monochrome SSH session.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.text import Text

from trainmem.core.estimator import Component
from trainmem.core.units import fmt_bytes

# name -> (glyph, colour). Order and names follow trainmem.core.estimator.COMPONENTS.
COMPONENT_STYLE: dict[str, tuple[str, str]] = {
    "weights": ("█", "#4f9ee8"),
    "master copy": ("▓", "#8a7fe0"),
    "adapter": ("▚", "#d87ad8"),
    "gradients": ("▒", "#e8b84f"),
    "optimizer state": ("░", "#e8884f"),
    "activations": ("▞", "#5fc98a"),
    "logits": ("≡", "#4fc8c8"),
    "temporaries": ("╳", "#c8c84f"),
    "CUDA context": ("┼", "#a0a0a0"),
    "NCCL buffers": ("╪", "#a0a0a0"),
    "allocator reserve": ("·", "#a0a0a0"),
}
VERDICT_STYLE = {"fits": "bold #5fc98a", "tight": "bold #e8b84f", "too big": "bold #e85f5f"}
VERDICT_MARK = {"fits": "✓", "tight": "!", "too big": "✗"}
SPARK = " ▁▂▃▄▅▆▇█"


def _cells(sizes: Iterable[int], scale: int, width: int) -> list[int]:
    """Cell widths for consecutive sizes on a bar of ``width`` cells for ``scale`` bytes.

    Boundaries are rounded, not each width, so the parts always add up to the whole."""
    out, total, prev = [], 0, 0
    for size in sizes:
        total += max(size, 0)
        edge = min(width, round(total * width / scale)) if scale > 0 else 0
        out.append(edge - prev)
        prev = edge
    return out


def stacked_bar(components: Sequence[Component], width: int, scale: int | None = None) -> Text:
    """One row: each component's share as its glyph in its colour, on ``scale`` bytes."""
    parts = [c for c in components if c.bytes > 0]
    total = sum(c.bytes for c in parts)
    scale = max(scale or total, total, 1)
    bar = Text(no_wrap=True, overflow="crop")
    for comp, cells in zip(parts, _cells((c.bytes for c in parts), scale, width), strict=True):
        glyph, colour = COMPONENT_STYLE.get(comp.name, ("#", ""))
        bar.append(glyph * cells, style=colour)
    bar.append(" " * max(0, width - bar.cell_len))
    return bar


def legend(components: Sequence[Component], width: int) -> Text:
    """Glyph, name and size of each non-zero component, in as many columns as fit."""
    items = [c for c in components if c.bytes > 0]
    cell = 31
    cols = max(1, width // cell)
    out = Text(no_wrap=True, overflow="crop")
    for i, comp in enumerate(items):
        glyph, colour = COMPONENT_STYLE.get(comp.name, ("#", ""))
        if i and i % cols == 0:
            out.append("\n")
        name = comp.name + (" *" if comp.kind == "runtime" else "")
        size = fmt_bytes(comp.bytes)
        out.append(f"{glyph}{glyph} ", style=colour)
        out.append(f"{name:<20}")
        out.append(f"{size:>8}", style="bold")
        if (i + 1) % cols and i + 1 < len(items):
            out.append("  ")
    return out


def usage_bar(
    width: int, used: int, total: int, plan: int | None = None, plan_style: str = ""
) -> Text:
    """Device memory: used ``█``, the plan's predicted peak stacked after it ``▒`` ending in a
    ``┃`` marker (``▶`` when it runs past the end), free ``·``."""
    total = max(total, 1)
    used_cells, plan_cells = _cells((used, plan or 0), total, width)
    bar = Text(no_wrap=True, overflow="crop")
    ratio = used / total
    used_style = "#e85f5f" if ratio > 0.95 else "#e8b84f" if ratio > 0.8 else "#4f9ee8"
    bar.append("█" * used_cells, style=used_style)
    if plan:
        over = used + plan > total
        if plan_cells > 0:
            bar.append("▒" * (plan_cells - 1), style=plan_style)
            bar.append("▶" if over else "┃", style=f"bold {plan_style}")
    bar.append("·" * max(0, width - bar.cell_len), style="dim")
    return bar


def sparkline(values: Sequence[int | None], width: int, top: int) -> Text:
    """The last ``width`` values as eighth-blocks scaled to ``top`` (gaps stay blank)."""
    top = max(top, 1)
    chars = []
    for v in list(values)[-width:]:
        if v is None:
            chars.append(" ")
        else:
            chars.append(SPARK[min(8, max(1 if v > 0 else 0, -(-v * 8 // top)))])
    return Text("".join(chars).rjust(width), style="#4f9ee8", no_wrap=True)


def verdict_text(verdict: str) -> Text:
    return Text(f"{VERDICT_MARK.get(verdict, '?')} {verdict}", style=VERDICT_STYLE.get(verdict, ""))
