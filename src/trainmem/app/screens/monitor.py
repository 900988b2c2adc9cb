"""Monitor: processes holding GPU memory, their observed memory and peak against the selected
plan's predicted device peak, and a warning when a device runs low on free memory."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Static

from trainmem.app.widgets.devices import (
    LOW_FREE_FRACTION,
    DevicesPanel,
    low_free,
    process_label,
)
from trainmem.app.widgets.keybar import KeyBar
from trainmem.core.units import fmt_bytes
from trainmem.devices.snapshot import DeviceReading, Snapshot
from trainmem.planner.report import Report

if TYPE_CHECKING:
    from trainmem.app.app import TrainmemApp
    from trainmem.app.runs import RunSeen


COLUMNS = (  # width 0: the process column takes what the others leave
    ("Device", 12),  # node-12/gpu7 on a cluster
    ("PID", 7),
    ("Process", 0),
    ("Used", 8),
    ("Peak", 8),
    ("Peak − plan", 11),
    ("%", 5),
)
FIXED_COLUMNS = sum(w for _, w in COLUMNS) + 2 * len(COLUMNS) + 3  # cell padding, border, bar
RUN_FRACTION = 0.5  # a process holding at least half the prediction is taken for the run


def looks_like_the_run(peak: int | None, predicted: int | None) -> bool:
    """A notebook kernel or the desktop is not the training run the plan describes: compare
    only processes that reach a good part of the predicted peak."""
    return peak is not None and predicted is not None and peak >= RUN_FRACTION * predicted


def difference(observed: int, predicted: int) -> tuple[str, str]:
    """Observed minus predicted, in GB and in % of the prediction, signed."""
    diff = observed - predicted
    sign = "+" if diff >= 0 else "−"
    pct = 100 * abs(diff) / predicted if predicted else 0.0
    return f"{sign}{abs(diff) / 1e9:.1f} GB", f"{sign}{pct:.0f}%"


def compared(observed: int, predicted: int) -> list[str | Text]:
    """The table's "Peak − plan" and "%" cells, red when the run holds more than predicted."""
    gb, pct = difference(observed, predicted)
    style = "bold #e85f5f" if observed > predicted else ""
    return [Text(gb, style=style), Text(pct, style=style)]


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


class MonitorScreen(Screen[None]):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("r", "reset_peaks", "Reset peaks", tooltip="Forget observed peaks (a new run)"),
        Binding("l", "watch_log", "Run log", tooltip="Tail a trainmem probe log (JSON Lines)"),
        Binding("p", "plan_from_run", "Run's plan", tooltip="Open the plan a run log describes"),
    ]

    app: TrainmemApp

    def compose(self) -> ComposeResult:
        yield Static(id="monitor-plan")
        yield Static(id="monitor-runs")
        yield Static(id="monitor-warning")
        yield DataTable(id="monitor-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="monitor-free", classes="hint")
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
        process = max(12, self.size.width - FIXED_COLUMNS)
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
            if text:
                self.app.watch_run_log(text)
                self.notify(f"Tailing {text}", timeout=3)

        self.app.push_screen(PromptScreen("Tail the run log", "trainmem-run.rank0.jsonl"), chosen)

    def action_plan_from_run(self) -> None:
        """Open the plan rebuilt from the first readable run log, editable like any plan."""
        seen = next((r for r in self.app.state.runs.values() if r.report is not None), None)
        if seen is None:
            self.notify("No run log read yet (l tails one)", severity="warning", timeout=4)
            return
        self.app.state.workspace.add(seen.report.estimate.plan)
        self.app.plans_changed()
        self.notify(f"Opened the plan of {seen.path.name} (F2 to edit it)", timeout=4)

    def _update(self, _value: object = None) -> None:
        if not self.is_current:
            return  # redrawn on resume; no work for a hidden screen
        snapshot: Snapshot | None = self.app.state.snapshot
        report: Report | None = self.app.state.report
        predicted = report.estimate.device_bytes if report else None
        plan_line = Text()
        if report is not None:
            p = report.estimate.plan
            plan_line.append(f"{self.app.state.workspace.current.name}", style="bold")
            plan_line.append(f"  {p.model} · {p.method} · {p.seq_len:,} × {p.batch}  predicted ")
            plan_line.append(f"device peak {fmt_bytes(report.estimate.device_bytes)}", style="bold")
            plan_line.append(f" (allocated {fmt_bytes(report.estimate.allocated_bytes)})")
        else:
            plan_line.append("No valid plan yet: fill in the plan form (F2).", style="dim")
        self.query_one("#monitor-plan", Static).update(plan_line)
        runs = self.query_one("#monitor-runs", Static)
        runs.update(runs_text(list(self.app.state.runs.values())))
        runs.display = bool(self.app.state.runs)

        table = self.query_one("#monitor-table", DataTable)
        table.clear()
        if not table.columns:
            self._add_columns(table)
        warning = Text()
        free_lines = []
        if snapshot is not None:
            for d in snapshot.devices:
                if d.kind == "system" or d.total_bytes is None:
                    continue
                free_lines.append(
                    f"{d.id}: {fmt_bytes(d.free_bytes or 0)} free of {fmt_bytes(d.total_bytes)}"
                )
                if low_free(d):
                    if warning:
                        warning.append("\n")
                    warning.append(
                        f"⚠ LOW FREE MEMORY on {d.id}: {fmt_bytes(d.free_bytes or 0)} free "
                        f"(under {LOW_FREE_FRACTION:.0%} of {fmt_bytes(d.total_bytes)}); "
                        "the next allocation may fail with out-of-memory",
                        style="bold",
                    )
                if "/" in d.id and not d.processes and d.used_bytes is not None:
                    # A cluster GPU (Prometheus): one rank per GPU, its memory is the run's.
                    used = d.used_bytes
                    cells_gpu: list[str | Text] = [
                        d.id,
                        "",
                        "GPU memory (from the cluster)",
                        fmt_bytes(used),
                        "",
                        "",
                        "",
                    ]
                    if predicted is not None:
                        cells_gpu[5:] = compared(used, predicted)
                    table.add_row(*cells_gpu)
                for proc in sorted(d.processes, key=lambda p: -(p.used_bytes or 0)):
                    used, peak = proc.used_bytes, proc.peak_used_bytes or proc.used_bytes
                    cells: list[str | Text] = [
                        d.id,
                        str(proc.pid),
                        process_label(proc),
                        fmt_bytes(used) if used is not None else "?",
                        fmt_bytes(peak) if peak is not None else "?",
                    ]
                    table.add_row(*cells, *run_cells(peak, predicted))
        has_gpus = snapshot is not None and any(d.kind == "gpu" for d in snapshot.devices)
        if not has_gpus:
            for proc in self.app.state.processes:
                cells = [
                    "RAM",
                    str(proc.pid),
                    f"{proc.name} ({proc.why})",
                    fmt_bytes(proc.rss_bytes),
                    "",
                ]
                table.add_row(*cells, *run_cells(proc.rss_bytes, predicted))
        if table.row_count == 0:
            table.add_row("", "", Text("no training process found", style="dim"), *[""] * 4)
        warn = self.query_one("#monitor-warning", Static)
        warn.update(warning)
        warn.display = bool(warning)
        hint = (
            "  ·  ".join(free_lines)
            if free_lines
            else "No GPU found: Python processes with torch loaded (or a large RSS) are "
            "compared by their resident memory."
        )
        closest = closest_to_full(snapshot.devices) if snapshot is not None else None
        if closest is not None and len(free_lines) > 1:
            hint = (
                f"Closest to running out: {closest.id} "
                f"({fmt_bytes(closest.free_bytes or 0)} free of "
                f"{fmt_bytes(closest.total_bytes or 0)})\n" + hint
            )
        if predicted is not None:
            hint += (
                f"\nProcesses holding at least {RUN_FRACTION:.0%} of the prediction are "
                "compared with it; peaks are since start (r resets them)."
            )
        self.query_one("#monitor-free", Static).update(hint)
        if snapshot is not None:
            # No plan marker here: the run is already part of what is in use.
            self.query_one(DevicesPanel).show_snapshot(snapshot, self.app.state.sampler, None)


def runs_text(runs: Sequence[RunSeen]) -> Text:
    """One block per probe log: observed peaks against the plan rebuilt from the run."""
    text = Text()
    for seen in runs:
        if text:
            text.append("\n")
        text.append(f"{seen.path.name}: ", style="bold")
        if seen.report is None:
            text.append(seen.error or "", style="dim")
            continue
        r = seen.report
        est, alloc, device = r.estimate, r.allocated_peak, r.device_peak
        p = est.plan
        text.append(
            f"rank {r.log.rank}, {len(r.steps):,} steps{' (ended)' if r.log.ended else ''}; "
            f"run's plan {p.model} · {p.method} · {p.seq_len:,} × {p.batch}\n"
        )
        for label, seen_peak, observed, predicted in (
            ("allocated", alloc, alloc.allocated_peak if alloc else None, est.allocated_bytes),
            ("device", device, device.device_peak if device else None, est.device_bytes),
        ):
            text.append(f"  {label} peak predicted {fmt_bytes(predicted)}, observed ")
            if observed is None or seen_peak is None:
                text.append("—", style="dim")
            else:
                gb, pct = difference(observed, predicted)
                text.append(f"{fmt_bytes(observed)} ")
                style = "bold #e85f5f" if observed > predicted else ""
                text.append(f"({gb}, {pct})", style=style)
                where = f" at step {seen_peak.step}"
                if seen_peak.peak_phase:
                    where += f", {seen_peak.peak_phase}"
                text.append(where)
            text.append("\n")
        for warning in r.warnings:
            text.append(f"  ⚠ {warning}\n", style="bold")
    return text
