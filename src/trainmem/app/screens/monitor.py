"""Monitor: processes holding GPU memory, their observed memory and peak against the selected
plan's predicted device peak, and a warning when a device runs low on free memory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static

from trainmem.app.screens.base import AppScreen
from trainmem.app.widgets.devices import (
    DevicesPanel,
    low_free,
    process_label,
)
from trainmem.app.widgets.keybar import KeyBar
from trainmem.core.fit import LOW_FREE_FRACTION
from trainmem.core.text import visible
from trainmem.core.units import fmt_bytes
from trainmem.devices.snapshot import DeviceReading, Snapshot
from trainmem.planner.report import Report
from trainmem.planner.run_report import difference, size
from trainmem.planner.summary import plan_line
from trainmem.sources.files import show

if TYPE_CHECKING:
    from trainmem.app.runs import RunSeen
    from trainmem.planner.run_report import RankReport


COLUMNS = (  # width 0: the process column takes what the others leave
    ("Device", 12),  # node-12/gpu7 on a cluster
    ("PID", 7),
    ("Process", 0),
    ("Used", 8),
    ("Peak", 8),
    ("Peak − plan", 11),
    ("% peak", 7),  # observed − predicted as a share of the observed peak: -100.0% at most
)
FIXED_COLUMNS = sum(w for _, w in COLUMNS) + 2 * len(COLUMNS) + 3  # cell padding, border, bar
RUN_FRACTION = 0.5  # a process holding at least half the prediction is taken for the run


def looks_like_the_run(peak: int | None, predicted: int | None) -> bool:
    """A notebook kernel or the desktop is not the training run the plan describes: compare
    only processes that reach a good part of the predicted peak."""
    return peak is not None and predicted is not None and peak >= RUN_FRACTION * predicted


OVER = "bold #e85f5f"  # the run holds more than predicted


def compared(observed: int, predicted: int) -> list[str | Text]:
    """The table's "Peak − plan" and "% peak" cells: observed minus predicted and its share
    of observed, as `run-report` computes them (planner.run_report.difference), in the
    table's GB; red when the run holds more than predicted."""
    d = difference(observed, predicted)
    style = OVER if d.over else ""
    return [Text(part, style=style) for part in d.shown(fmt_bytes)]


def run_cells(observed: int | None, predicted: int | None) -> list[str | Text]:
    """Those cells for a process: compared when it looks like the run, else said it is not."""
    if observed is not None and predicted is not None and looks_like_the_run(observed, predicted):
        return compared(observed, predicted)
    return [Text("not the run", style="dim"), ""]


def closest_to_full(devices: Sequence[DeviceReading]) -> DeviceReading | None:
    """The GPU with the least free memory (the first to fail with out-of-memory)."""
    gpus = [
        d
        for d in devices
        if d.kind != "system" and d.free_bytes is not None and d.unavailable is None
    ]
    return min(gpus, key=lambda d: d.free_bytes or 0, default=None)


class MonitorScreen(AppScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "r",
            "reset_peaks",
            "Reset peaks",
            tooltip="Forget observed peaks (a new run)",
            id="monitor.reset_peaks",
        ),
        Binding(
            "l",
            "watch_log",
            "Run log",
            tooltip="Tail a trainmem probe log (JSON Lines)",
            id="monitor.run_log",
        ),
        Binding(
            "p",
            "plan_from_run",
            "Run's plan",
            tooltip="Open the plan a run log describes",
            id="monitor.run_plan",
        ),
    ]

    def compose(self) -> ComposeResult:
        yield Static(id="monitor-plan", markup=False)
        yield Static(id="monitor-runs", markup=False)
        yield Static(id="monitor-warning", markup=False)
        yield DataTable(id="monitor-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="monitor-free", classes="hint", markup=False)
        with VerticalScroll(id="monitor-scroll"):
            yield DevicesPanel(id="monitor-devices")
        yield KeyBar()

    def on_mount(self) -> None:
        table = self.query_one("#monitor-table", DataTable)
        table.border_title = "Processes on GPUs vs the plan"
        self.query_one("#monitor-devices").border_title = "Devices"
        self.watch(self.app, "snapshot_version", self._update)
        self.watch(self.app, "report_version", self._update)
        self.watch(self.app, "runs_version", self._update)

    def on_screen_resume(self) -> None:
        self._update()

    def on_resize(self) -> None:
        self.query_one(DevicesPanel).styles.grid_size_columns = 1 if self.size.width < 110 else 2
        self.query_one("#monitor-table", DataTable).clear(columns=True)
        self._update()

    def _add_columns(self, table: DataTable[object]) -> None:
        process = max(10, self.size.width - FIXED_COLUMNS)
        for label, width in COLUMNS:
            table.add_column(label, width=width or process)

    def action_reset_peaks(self) -> None:
        reset = getattr(self.app.state.sampler, "reset_peaks", None)
        if reset is not None:
            reset()
            self.notify("Peaks reset; they rebuild from the next sample", timeout=3)

    def action_watch_log(self) -> None:
        from trainmem.app.screens.prompt import PromptScreen

        def chosen(text: str | None) -> None:
            path = self.app.typed_path(text)
            if path is not None:
                self.app.watch_run_log(path)
                self.notify(f"Tailing {show(path)}", timeout=3)

        # The probe's default base path: it finds every rank's file (trainmem-run.rank0.jsonl...).
        self.app.push_screen(PromptScreen("Tail the run log", "trainmem-run.jsonl"), chosen)

    def action_plan_from_run(self) -> None:
        """Open the plan rebuilt from the first readable run log, editable like any plan."""
        seen = next((r for r in self.app.state.runs.values() if r.report is not None), None)
        if seen is None:
            self.notify("No run log read yet (l tails one)", severity="warning", timeout=4)
            return
        estimate = seen.report.estimate
        # the model as the log described it (its config may be in the log alone), so the
        # plan estimates without looking the name up again
        self.app.state.specs.remember(estimate.plan.model, estimate.model, None)
        self.app.state.workspace.add(estimate.plan)
        self.notify(f"Opened the plan of {show(seen.path.name)} (F2 to edit it)", timeout=4)

    def _update(self, _value: object = None) -> None:
        if not self.is_current:
            return  # redrawn on resume; no work for a hidden screen
        snapshot: Snapshot | None = self.app.state.snapshot
        report: Report | None = self.app.state.report
        predicted = report.estimate.device_bytes if report else None
        self._show_plan(report)
        self._show_runs()
        self._fill_table(snapshot, predicted)
        self._show_low_memory(snapshot)
        self._show_hint(snapshot, predicted)
        if snapshot is not None:
            # No plan marker here: the run is already part of what is in use.
            self.query_one(DevicesPanel).show_snapshot(snapshot, self.app.state.sampler, None)

    def _show_plan(self, report: Report | None) -> None:
        """The selected plan and its predicted peaks, the figures everything is compared to."""
        line = Text()
        if report is not None:
            p = report.estimate.plan
            line.append(visible(self.app.state.workspace.current.name), style="bold")
            line.append(f"  {visible(plan_line(p))}")
            line.append("  predicted ")
            line.append(f"device peak {fmt_bytes(report.estimate.device_bytes)}", style="bold")
            line.append(f" (allocated {fmt_bytes(report.estimate.allocated_bytes)})")
        else:
            line.append("No valid plan yet: fill in the plan form (F2).", style="dim")
        self.query_one("#monitor-plan", Static).update(line)

    def _show_runs(self) -> None:
        """The probe logs tailed (--run-log, l), each against the plan rebuilt from it."""
        runs = self.query_one("#monitor-runs", Static)
        runs.update(runs_text(list(self.app.state.runs.values())))
        runs.display = bool(self.app.state.runs)

    def _fill_table(self, snapshot: Snapshot | None, predicted: int | None) -> None:
        """A row per process holding GPU memory (or, with no GPU, per training process found
        by its RSS), its peak against the plan's predicted device peak."""
        table = self.query_one("#monitor-table", DataTable)
        table.clear()
        if not table.columns:
            self._add_columns(table)
        for d in snapshot.devices if snapshot is not None else ():
            if d.kind == "system" or d.total_bytes is None:
                continue
            if "/" in d.id and not d.processes and d.used_bytes is not None:
                # A cluster GPU (Prometheus): one rank per GPU, its memory is the run's.
                cells: list[str | Text] = [
                    Text(visible(d.id)),
                    "",
                    "GPU memory (from the cluster)",
                    fmt_bytes(d.used_bytes),
                    "",
                ]
                tail = compared(d.used_bytes, predicted) if predicted is not None else ["", ""]
                table.add_row(*cells, *tail)
            for proc in sorted(d.processes, key=lambda p: -(p.used_bytes or 0)):
                used, peak = proc.used_bytes, proc.peak_used_bytes or proc.used_bytes
                cells = [
                    Text(visible(d.id)),
                    str(proc.pid),
                    Text(process_label(proc)),
                    fmt_bytes(used) if used is not None else "?",
                    fmt_bytes(peak) if peak is not None else "?",
                ]
                table.add_row(*cells, *run_cells(peak, predicted))
        if snapshot is None or not any(d.kind == "gpu" for d in snapshot.devices):
            for found in self.app.state.processes:
                label = Text(visible(f"{found.name} ({found.why})"))
                cells = ["RAM", str(found.pid), label, fmt_bytes(found.rss_bytes), ""]
                table.add_row(*cells, *run_cells(found.rss_bytes, predicted))
        if table.row_count == 0:
            table.add_row("", "", Text("no training process found", style="dim"), *[""] * 4)

    def _show_low_memory(self, snapshot: Snapshot | None) -> None:
        """A bold warning for each GPU under LOW_FREE_FRACTION free: the next allocation
        there may fail."""
        warning = Text()
        for d in snapshot.devices if snapshot is not None else ():
            if d.kind == "system" or d.total_bytes is None or not low_free(d):
                continue
            if warning:
                warning.append("\n")
            warning.append(
                f"⚠ LOW FREE MEMORY on {visible(d.id)}: {fmt_bytes(d.free_bytes or 0)} free "
                f"(under {LOW_FREE_FRACTION:.0%} of {fmt_bytes(d.total_bytes)}); "
                "the next allocation may fail with out-of-memory",
                style="bold",
            )
        warn = self.query_one("#monitor-warning", Static)
        warn.update(warning)
        warn.display = bool(warning)

    def _show_hint(self, snapshot: Snapshot | None, predicted: int | None) -> None:
        """Free memory per GPU, the one closest to running out, and what is compared."""
        gpus = [
            d
            for d in (snapshot.devices if snapshot is not None else ())
            if d.kind != "system" and d.total_bytes is not None
        ]
        free = [
            f"{visible(d.id)}: {fmt_bytes(d.free_bytes or 0)} free of {fmt_bytes(d.total_bytes)}"
            for d in gpus
            if d.total_bytes is not None
        ]
        hint = (
            "  ·  ".join(free)
            if free
            else "No GPU found: Python processes with torch loaded (or a large RSS) are "
            "compared by their resident memory."
        )
        closest = closest_to_full(snapshot.devices) if snapshot is not None else None
        if closest is not None and len(free) > 1:
            hint = (
                f"Closest to running out: {visible(closest.id)} "
                f"({fmt_bytes(closest.free_bytes or 0)} free of "
                f"{fmt_bytes(closest.total_bytes or 0)})\n" + hint
            )
        if predicted is not None:
            hint += (
                f"\nProcesses holding at least {RUN_FRACTION:.0%} of the prediction are "
                "compared with it (observed − predicted, as a share of observed); peaks are "
                "since start (r resets them)."
            )
        self.query_one("#monitor-free", Static).update(Text(hint))


def runs_text(runs: Sequence[RunSeen]) -> Text:
    """One block per probe log (a block per rank of a base path): observed peaks against the
    plan rebuilt from the run, with the figures and signs `run-report` prints. Text from the
    log is shown through core.text.visible, in Text objects (no markup is parsed)."""
    text = Text()
    for seen in runs:
        if text:
            text.append("\n")
        if not seen.reports:
            text.append(f"{visible(seen.path.name)}: ", style="bold")
            text.append(visible(seen.error or ""), style="dim")
            continue
        for r in seen.reports:
            _rank_block(text, r)
        if seen.error:  # a rank file not readable (yet) beside the others
            text.append(f"  {visible(seen.error)}\n", style="dim")
        if seen.warning:
            text.append(f"  ⚠ {visible(seen.warning)}\n", style="bold")
    return text


def _rank_block(text: Text, r: RankReport) -> None:
    p = r.estimate.plan
    text.append(f"{visible(r.log.path.name)}: ", style="bold")
    text.append(
        f"rank {r.log.rank}, {r.step_count:,} steps{' (ended)' if r.log.ended else ''}; "
        f"run's plan {visible(plan_line(p))}\n"
    )
    for peak in r.compared():
        text.append(f"  {peak.label} peak predicted {size(peak.predicted)}, observed ")
        d = peak.difference
        if d is None or peak.observed is None:
            text.append("—", style="dim")
        else:
            shown, pct = d.shown()
            text.append(f"{size(peak.observed)} ")
            text.append(f"({shown}, {pct})", style=OVER if d.over else "")
            text.append(f" at {peak.where()}")
        text.append("\n")
    for warning in r.warnings:
        text.append(f"  ⚠ {visible(warning)}\n", style="bold")
