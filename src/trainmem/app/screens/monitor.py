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
    ]

    app: TrainmemApp

    def compose(self) -> ComposeResult:
        yield Static(id="monitor-plan")
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
                        gb, pct = difference(used, predicted)
                        style = "bold #e85f5f" if used > predicted else ""
                        cells_gpu[5:] = [Text(gb, style=style), Text(pct, style=style)]
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
                    if looks_like_the_run(peak, predicted):
                        assert peak is not None and predicted is not None
                        gb, pct = difference(peak, predicted)
                        style = "bold #e85f5f" if peak > predicted else ""
                        cells += [Text(gb, style=style), Text(pct, style=style)]
                    else:
                        cells += [Text("not the run", style="dim"), ""]
                    table.add_row(*cells)
        if table.row_count == 0:
            table.add_row("", "", Text("no process holds GPU memory", style="dim"), *[""] * 4)
        warn = self.query_one("#monitor-warning", Static)
        warn.update(warning)
        warn.display = bool(warning)
        hint = "  ·  ".join(free_lines) if free_lines else "No GPU found: nothing to monitor."
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
