"""Device panes: one per GPU plus system or unified memory, redrawn on each sample.

Each pane shows used/total as a bar with the selected plan's predicted device peak stacked
after what is already in use (so "will it fit next to what is running" is one glance), the
recent history as a sparkline and the processes holding the most memory.

Devices of other nodes (ids ``node/gpu0``, read from a cluster's Prometheus) go into one
``ClusterPane`` instead: a summary row per node (GPU memory used/total, RAM), each GPU marked
against the plan; with more than a few nodes one line per node, led by the node closest to
running out, so that dozens of nodes stay readable at 80x24.

Names, ids, commands and reasons come from outside (a process's command line, a cluster's
labels): they go in as ``Text`` (never parsed as markup) with control characters shown as
escapes (``trainmem.core.text.visible``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Protocol

from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.text import Text
from textual.containers import Container
from textual.widget import Widget

from trainmem.app.widgets.bars import VERDICT_STYLE, sparkline, usage_bar
from trainmem.core import fit
from trainmem.core.fit import FitResult, judge_fit
from trainmem.core.text import visible
from trainmem.core.units import fmt_bytes
from trainmem.devices.promql import node_of

if TYPE_CHECKING:  # the sampler imports these, after the first frame
    from trainmem.devices.sampler import HistoryPoint
    from trainmem.devices.snapshot import DeviceReading, ProcessReading, Snapshot


class HistorySource(Protocol):
    def history(self, device_id: str) -> list[HistoryPoint]: ...


class PlanMark(NamedTuple):
    """The plan marked on the panes: its device peak with memory to spare and, where its
    first target runs it only by the allocator's cache retry, the peak it runs at there."""

    bytes: int
    retry_bytes: int | None = None

    def fit(self, device: str, free: int) -> FitResult:
        """Judged on what ``device`` has free as the report judges its target (planner
        report): the peak with memory to spare where it fits, else the retried run's, which
        is tight at best."""
        if self.retry_bytes is None or self.bytes <= free:
            return judge_fit(self.bytes, device, free)
        return judge_fit(self.retry_bytes, device, free, retried=True)


def low_free(d: DeviceReading) -> bool:
    return fit.low_free(d.free_bytes, d.total_bytes)


def top_processes(d: DeviceReading, n: int) -> list[ProcessReading]:
    return sorted(d.processes, key=lambda p: p.used_bytes or 0, reverse=True)[:n]


def process_label(p: ProcessReading) -> str:
    """The command line if the OS told us, else the name, else why not."""
    return visible(p.cmdline or p.name or (p.unavailable or "unknown"))


def short_device_name(name: str) -> str:
    """``NVIDIA GeForce RTX 4090`` -> ``RTX 4090``: the vendor words carry no information."""
    for vendor in ("NVIDIA ", "GeForce ", "Tesla "):
        name = name.replace(vendor, "")
    return name


def whole_words(text: str, room: int) -> str:
    """``text`` cut to at most ``room`` cells at a word boundary ('' if no word fits)."""
    if len(text) <= room:
        return text
    cut = text[: room + 1].rsplit(" ", 1)[0] if " " in text[: room + 1] else ""
    return cut.rstrip()


def device_title(d: DeviceReading, room: int) -> Text:
    """``gpu0 RTX 4090`` or ``System RAM`` (no id that the name already says), cut at a word
    boundary to ``room`` cells: a pane never reads "system System…"."""
    name, device_id = visible(short_device_name(d.name)), visible(d.id)
    show_id = device_id.lower() not in name.lower().replace(" ", "")
    title = Text(no_wrap=True)
    if show_id:
        title.append(device_id, style="bold")
        room -= len(device_id) + 1
    shown = whole_words(name, room)
    if shown:
        title.append((" " if show_id else "") + shown, style="" if show_id else "bold")
    return title


class DevicePane(Widget):
    """One device. ``plan_bytes``: the plan's predicted device peak to mark on the bar."""

    DEFAULT_CSS = "DevicePane { height: auto; }"

    def __init__(self, reading: DeviceReading, *, max_processes: int = 3) -> None:
        super().__init__(id=f"dev-{reading.id}", classes="device-pane")
        self.reading = reading
        self.history: Sequence[int | None] = ()
        self.plan_bytes: PlanMark | None = None
        self.max_processes = max_processes

    def update_reading(
        self, reading: DeviceReading, history: Sequence[int | None], plan_bytes: PlanMark | None
    ) -> None:
        before = self._height()
        self.reading, self.history, self.plan_bytes = reading, history, plan_bytes
        self.set_class(low_free(reading), "-low")
        # A new layout only when the pane changes height: a sample a second stays cheap.
        self.refresh(layout=self._height() != before)

    def _height(self) -> int:
        return len(self._lines(80))  # every line is one row whatever the width

    def render(self) -> RenderableType:
        # Drawn at the width Rich is given: asking the widget for its size here would make
        # Textual lay out the screen again (slow, and stale while a layout is under way).
        return AtWidth(self._lines)

    def _lines(self, width: int) -> list[Text]:
        d = self.reading
        width = max(10, width)
        if d.unavailable or d.total_bytes is None or d.used_bytes is None:
            head = device_title(d, width)
            return [head, Text(f"unavailable: {visible(d.unavailable or 'no memory reading')}")]
        total, used = d.total_bytes, d.used_bytes
        figures = f" {fmt_bytes(used)} / {fmt_bytes(total)} {100 * used / total:3.0f}%"
        if d.stale_s is not None:  # its source has not answered lately: say how old it is
            figures = f" stale {d.stale_s:.0f}s" + figures
        head = device_title(d, max(1, width - len(figures)))
        head.pad_right(max(0, width - len(figures) - head.cell_len))
        head.append(figures)
        lines: list[Text] = [head]
        # Judged on what this device has left, the question a busy machine asks.
        verdict = self.plan_bytes.fit(d.id, total - used) if self.plan_bytes else None
        plan = verdict.required_bytes if verdict else None
        style = VERDICT_STYLE.get(verdict.verdict, "") if verdict else ""
        lines.append(usage_bar(width, used, total, plan, style.replace("bold ", "")))
        if verdict is not None and plan is not None:
            lines.append(plan_line(plan, verdict.verdict, verdict.headroom_bytes, style, width))
        if low_free(d):
            lines.append(
                Text(
                    f"⚠ LOW FREE MEMORY: {fmt_bytes(d.free_bytes or 0)} free", style="bold reverse"
                )
            )
        if self.history:
            spark = Text(no_wrap=True)
            spark.append("hist ", style="dim")
            spark.append_text(sparkline(self.history, width - 5, total))
            lines.append(spark)
        for p in top_processes(d, self.max_processes):
            row = Text(no_wrap=True, overflow="ellipsis")
            size = fmt_bytes(p.used_bytes) if p.used_bytes is not None else "?"
            row.append(f"{p.pid:>7} ", style="dim")
            label = process_label(p)
            room = max(1, width - 8 - len(size) - 1)
            row.append(label[:room].ljust(room))
            row.append(f" {size}", style="bold")
            lines.append(row)
        if d.kind == "gpu" and not d.processes:
            lines.append(Text("no processes", style="dim"))
        return lines


# Up to this many nodes (and GPUs in all), each GPU has a line of its own.
FEW_NODES = 4
FEW_GPUS = 16
MAX_NODE_LINES = 64  # nodes listed a row each: past it, the fullest, and the rest counted


def _free_fraction(d: DeviceReading) -> float | None:
    if d.unavailable or not d.total_bytes or d.free_bytes is None:
        return None
    return d.free_bytes / d.total_bytes


def plan_line(plan: int, verdict: str, headroom: int, style: str, width: int) -> Text:
    """``plan ┃ 24.1 GB → ! tight 0.7 GB spare``, shortened a word at a time to fit
    ``width`` (never cut inside a word): the verdict and the figures stay longest."""
    if verdict == "too big":
        mark, rest = f"✗ {fmt_bytes(-headroom)} short", ""
    else:
        mark, rest = (
            f"{'✓' if verdict == 'fits' else '!'} {verdict}",
            f" {fmt_bytes(headroom)} spare",
        )
    for prefix, tail in (
        (f"plan ┃ {fmt_bytes(plan)} → ", rest),
        (f"┃ {fmt_bytes(plan)} → ", rest),
        (f"┃ {fmt_bytes(plan)} → ", ""),
        ("", ""),
    ):
        if len(prefix) + len(mark) + len(tail) <= width:
            break
    line = Text(no_wrap=True, overflow="crop")
    line.append(prefix)
    line.append(mark, style=style)
    line.append(tail)
    return line


def _plan_mark(d: DeviceReading, plan: PlanMark | None) -> Text:
    """``✓``, ``!`` or ``✗ 2.1 GB short``: the plan's peak against what the GPU has free."""
    if plan is None or d.total_bytes is None or d.used_bytes is None:
        return Text()
    verdict = plan.fit(d.id, d.total_bytes - d.used_bytes)
    style = VERDICT_STYLE.get(verdict.verdict, "")
    if verdict.verdict == "too big":
        return Text(f"✗ {fmt_bytes(-verdict.headroom_bytes)} short", style=style)
    return Text("✓" if verdict.verdict == "fits" else "! tight", style=style)


def _pair(used: int, total: int) -> str:
    """``60/320 GB``: whole GB, enough for a summary row."""
    return f"{used / 1e9:.0f}/{fmt_bytes(total, digits=0)}"


class _Node:
    """One node's devices, as the cluster pane summarises them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.gpus: list[DeviceReading] = []
        self.ram: DeviceReading | None = None

    def live_gpus(self) -> list[DeviceReading]:
        return [
            g for g in self.gpus if not g.unavailable and g.total_bytes and g.used_bytes is not None
        ]

    def devices(self) -> list[DeviceReading]:
        return [*self.gpus, *([self.ram] if self.ram else [])]

    def any_unavailable(self) -> bool:
        return any(d.unavailable for d in self.devices())

    def tightest(self) -> tuple[float, DeviceReading] | None:
        """(free fraction, device) of the GPU with least free memory (RAM on a CPU node)."""
        pool = self.gpus or ([self.ram] if self.ram else [])
        found = [(f, d) for d in pool if (f := _free_fraction(d)) is not None]
        return min(found, key=lambda x: x[0]) if found else None

    def summary(self, plan: dict[str, PlanMark | None]) -> Text:
        line = Text(no_wrap=True, overflow="ellipsis")
        line.append(visible(self.name), style="bold")
        live = self.live_gpus()
        if self.gpus:
            used = sum(g.used_bytes or 0 for g in live)
            total = sum(g.total_bytes or 0 for g in live)
            line.append(f"  {len(self.gpus)} GPU ")
            if live:
                line.append(_pair(used, total))
            down = len(self.gpus) - len(live)
            if down:
                line.append(f" {down} unavailable", style="bold")
        ram = self.ram
        if (
            ram is not None
            and not ram.unavailable
            and ram.total_bytes
            and ram.used_bytes is not None
        ):
            line.append(f"  RAM {_pair(ram.used_bytes, ram.total_bytes)}")
        marks = [_plan_mark(g, plan.get(g.id)) for g in live if plan.get(g.id) is not None]
        if marks:
            fits = sum(1 for m in marks if m.plain.startswith(("✓", "!")))
            style = VERDICT_STYLE[
                "fits" if fits == len(marks) else "too big" if not fits else "tight"
            ]
            line.append(f"  plan fits {fits}/{len(self.gpus)}", style=style)
        everything = self.devices()
        stale = max((d.stale_s or 0 for d in everything), default=0)
        if stale:
            line.append(f"  stale {stale:.0f}s", style="dim")
        if everything and all(d.unavailable for d in everything):
            line.append(f"  unavailable: {visible(everything[0].unavailable or '')}")
        return line


class ClusterPane(Widget):
    """Every remote node: a summary row each, and with few nodes a line per GPU; past
    MAX_NODE_LINES nodes, the ones closest to full and a line for the rest. Each snapshot's
    rows are built once, as it arrives: drawing only lays them out (a cluster's nodes, in
    the thousands, cost their rows once a second, not once a frame)."""

    DEFAULT_CSS = "ClusterPane { height: auto; column-span: 2; }"

    def __init__(self) -> None:
        super().__init__(id="cluster", classes="device-pane")
        self.nodes: list[_Node] = []
        self.plan_bytes: dict[str, PlanMark | None] = {}
        self._head = Text()
        self._rows: list[tuple[Text, list[DeviceReading]]] = []  # summary, GPUs listed under
        self._rest: Text | None = None
        self._count = 0

    def update_nodes(
        self, devices: Sequence[DeviceReading], plan_bytes: dict[str, PlanMark | None]
    ) -> None:
        nodes: dict[str, _Node] = {}
        for d in devices:
            name = node_of(d.id) or d.id
            node = nodes.get(name)
            if node is None:
                node = nodes[name] = _Node(name)
            if d.kind == "system":
                node.ram = d
            else:
                node.gpus.append(d)
        self.nodes, self.plan_bytes = list(nodes.values()), plan_bytes
        self.set_class(any(d.kind != "system" and low_free(d) for d in devices), "-low")
        tightness = {id(n): n.tightest() for n in self.nodes}
        gpus = sum(len(n.gpus) for n in self.nodes)
        self._head = self._header(gpus, tightness)
        shown, self._rest = self.nodes, None
        if len(self.nodes) > MAX_NODE_LINES:
            # a node with a device unread first, then the fullest
            def rank(n: _Node) -> float:
                t = tightness[id(n)]
                return -1.0 if t is None or n.any_unavailable() else t[0]

            ranked = sorted(self.nodes, key=rank)
            shown, rest = ranked[:MAX_NODE_LINES], ranked[MAX_NODE_LINES:]
            least = min((t[0] for n in rest if (t := tightness[id(n)])), default=None)
            more = f"… {len(rest):,} more nodes"
            self._rest = Text(
                more
                + (f", each with {100 * least:.0f}% or more free" if least is not None else ""),
                style="dim",
            )
        detailed = len(self.nodes) <= FEW_NODES and gpus <= FEW_GPUS
        self._rows = [(n.summary(plan_bytes), n.gpus if detailed else []) for n in shown]
        count = 1 + sum(1 + len(listed) for _, listed in self._rows) + (self._rest is not None)
        self.refresh(layout=count != self._count)
        self._count = count

    def _header(self, gpus: int, tightness: dict[int, tuple[float, DeviceReading] | None]) -> Text:
        head = Text(no_wrap=True, overflow="ellipsis")
        head.append(f"{len(self.nodes)} node{'s' * (len(self.nodes) != 1)}, {gpus} GPUs")
        tight = [(t[0], n, t[1]) for n in self.nodes if (t := tightness[id(n)]) is not None]
        if tight:
            fraction, node, d = min(tight, key=lambda x: x[0])
            what = visible(d.id.partition("/")[2])
            head.append(" · closest to full: ")
            head.append(visible(node.name), style="bold")
            head.append(f" {what} {fmt_bytes(d.free_bytes or 0)} free ({100 * fraction:.0f}%)")
        return head

    def render(self) -> RenderableType:
        return AtWidth(self._lines)

    def _lines(self, width: int) -> list[Text]:
        width = max(10, width)
        lines = [self._head]
        for summary, listed in self._rows:
            lines.append(summary)
            lines.extend(self._gpu_line(g, width) for g in listed)
        if self._rest is not None:
            lines.append(self._rest)
        return lines

    def _gpu_line(self, g: DeviceReading, width: int) -> Text:
        line = Text(no_wrap=True, overflow="ellipsis")
        label = f"  {visible(g.id.partition('/')[2])} "
        line.append(label)
        if g.unavailable or g.total_bytes is None or g.used_bytes is None:
            line.append(f"unavailable: {visible(g.unavailable or 'no memory reading')}")
            return line
        plan = self.plan_bytes.get(g.id)
        mark = _plan_mark(g, plan)
        figures = f" {fmt_bytes(g.used_bytes)}/{fmt_bytes(g.total_bytes)} "
        room = width - len(label) - len(figures) - max(mark.cell_len, 1)
        verdict = plan.fit(g.id, g.total_bytes - g.used_bytes) if plan else None
        style = VERDICT_STYLE.get(verdict.verdict, "") if verdict else ""
        if room >= 8:
            needed = verdict.required_bytes if verdict else None
            line.append_text(usage_bar(room, g.used_bytes, g.total_bytes, needed, style))
        line.append(figures)
        line.append_text(mark)
        return line


HISTORY_POINTS = 240


class AtWidth:
    """A Rich renderable that builds its lines for the width it is rendered at."""

    def __init__(self, build: Callable[[int], list[Text]]) -> None:
        self.build = build

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield from self.build(options.max_width)


class DevicesPanel(Container):
    """Holds a pane per device; panes are added or removed when the device list changes."""

    def show_snapshot(
        self, snapshot: Snapshot, sampler: HistorySource, plan_bytes: PlanMark | None
    ) -> None:
        """Draw ``snapshot`` with recent history; ``plan_bytes`` marks the GPUs (or, on a
        machine without any, the memory the plan would run in)."""
        history = {  # the cluster pane draws none: its thousands of GPUs copy none
            d.id: [p.used_bytes for p in sampler.history(d.id)[-HISTORY_POINTS:]]
            for d in snapshot.devices
            if node_of(d.id) is None
        }
        marks: dict[str, PlanMark | None] = {}
        if plan_bytes is not None:
            accelerators = [d for d in snapshot.devices if d.kind in ("gpu", "unified")]
            marks = {d.id: plan_bytes for d in accelerators or snapshot.devices}
        self.show(snapshot.devices, history, marks)

    def show(
        self,
        devices: Sequence[DeviceReading],
        history: dict[str, list[int | None]],
        plan_bytes: dict[str, PlanMark | None],
    ) -> None:
        local: list[DeviceReading] = []
        remote: list[DeviceReading] = []
        for d in devices:
            (local if node_of(d.id) is None else remote).append(d)
        panes = {p.reading.id: p for p in self.query(DevicePane)}
        clusters = list(self.query(ClusterPane))
        if [d.id for d in local] != list(panes) or bool(remote) != bool(clusters):
            self.remove_children()
            panes = {d.id: DevicePane(d) for d in local}
            clusters = [ClusterPane()] if remote else []
            self.mount_all([*panes.values(), *clusters])
        for d in local:
            panes[d.id].update_reading(d, history.get(d.id, ()), plan_bytes.get(d.id))
        if clusters:  # one pane for all nodes: nodes coming and going remount nothing
            clusters[0].update_nodes(remote, plan_bytes)
