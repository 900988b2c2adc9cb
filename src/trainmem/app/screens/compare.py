"""Compare: every open plan with its stacked bar on one common scale, totals and verdicts,
and below, their components side by side."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Static

from trainmem.app import planning
from trainmem.app.messages import ModelResolved, RowsSimulated
from trainmem.app.screens.base import AppScreen
from trainmem.app.screens.prompt import PromptScreen
from trainmem.app.widgets.bars import stacked_bar, verdict_text
from trainmem.app.widgets.breakdown import short_model
from trainmem.app.widgets.devices import short_device_name
from trainmem.app.widgets.keybar import KeyBar
from trainmem.core.errors import PlanError
from trainmem.core.plan import FIELDS_BY_NAME
from trainmem.core.units import fmt_bytes
from trainmem.planner.export import Row, differs, field_rows, to_json, to_markdown
from trainmem.planner.naming import fit_name
from trainmem.sources.files import show
from trainmem.sources.plan_files import atomic_write

FIXED_COLUMNS = 50  # every column but the bar and the name: widths, padding, border, scrollbar
NAME_WIDTH = 16  # the name column at its narrowest
# Plans estimated and drawn at a time: thousands of plans stay responsive (an estimate is
# ~0.1 ms, a table row more), and no one reads more than a page side by side.
PAGE = 100
SIDE_BY_SIDE = 12  # plans in the components table: wider is unreadable


class CompareScreen(AppScreen):
    BINDINGS: ClassVar[list[BindingType]] = [
        # Enter works too (the table's row selection); "e" is what the key bar can show.
        Binding(
            "e",
            "edit",
            "Edit",
            tooltip="Edit the highlighted plan in the plan view",
            id="compare.edit",
        ),
        Binding(
            "a", "add", "Add", tooltip="Add a plan with the default settings", id="compare.add"
        ),
        Binding(
            "d",
            "duplicate",
            "Duplicate",
            tooltip="Duplicate the highlighted plan",
            id="compare.duplicate",
        ),
        Binding(
            "r", "rename", "Rename", tooltip="Rename the highlighted plan", id="compare.rename"
        ),
        Binding(
            "delete,x",
            "delete",
            "Delete",
            tooltip="Delete the highlighted plan",
            id="compare.delete",
        ),
        Binding(
            "m",
            "export('md')",
            "Markdown",
            tooltip="Export the comparison as Markdown",
            id="compare.markdown",
        ),
        Binding(
            "j",
            "export('json')",
            "JSON",
            tooltip="Export the comparison as JSON",
            id="compare.json",
        ),
        Binding(
            "[",
            "page(-1)",
            "Prev page",
            tooltip=f"The previous {PAGE} plans",
            id="compare.prev_page",
        ),
        Binding(
            "]", "page(1)", "Next page", tooltip=f"The next {PAGE} plans", id="compare.next_page"
        ),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[Row] = []  # the page on screen
        self.page_start = 0  # workspace index of the first row

    def compose(self) -> ComposeResult:
        yield DataTable(id="compare-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="compare-scale", classes="hint", markup=False)  # names a device
        yield DataTable(id="components-table", cursor_type="none", zebra_stripes=True)
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#compare-table").border_title = "Plans"
        self.query_one("#components-table").border_title = "Components side by side"
        self.watch(self.app, "plans_version", lambda _v: self.refresh_rows())

    def on_screen_resume(self) -> None:
        self.refresh_rows()

    def on_resize(self) -> None:
        self.refresh_rows()

    # -- building the tables -----------------------------------------------------------------

    def refresh_rows(self) -> None:
        """Re-estimate every plan (about 1 ms each) and redraw both tables."""
        rows, pending = [], []
        plans = self.app.state.workspace.plans
        self.page_start = min(self.page_start, max(0, len(plans) - 1) // PAGE * PAGE)
        for named in plans[self.page_start : self.page_start + PAGE]:
            try:
                spec = self.app.state.specs.get(named.plan.model, known_errors=True)
            except PlanError as exc:
                rows.append(Row(named.name, None, exc.message))
                continue
            if spec is None:
                pending.append(named.plan.model)
                rows.append(Row(named.name, None, "reading model config…"))
                continue
            try:
                report = planning.evaluate(
                    named.plan, spec, self.app.state.snapshot, self.app.state.calibrations
                )
            except ValueError as exc:  # PlanError is one too
                rows.append(Row(named.name, None, str(exc)))
                continue
            rows.append(Row(named.name, report))
        self.rows = rows
        self._draw()
        if pending:
            self._resolve(pending)
        if any(r.report is not None and not r.report.simulated for r in rows):
            self._simulate(rows)

    @work(thread=True, exclusive=True, group="compare-simulate", exit_on_error=False)
    def _simulate(self, rows: list[Row]) -> None:
        """The quick rows again with the caching allocator simulated (what `plan` prints)."""
        state = self.app.state
        done = [
            Row(
                r.name,
                planning.simulated(
                    r.report.estimate.plan,
                    r.report.estimate.model,
                    state.snapshot,
                    state.calibrations,
                ),
            )
            if r.report is not None and not r.report.simulated
            else r
            for r in rows
        ]
        self.post_message(RowsSimulated(rows, done))

    def on_rows_simulated(self, message: RowsSimulated) -> None:
        if message.before == self.rows:  # nothing re-estimated meanwhile
            self.rows = message.after
            self._draw()

    @work(thread=True, exclusive=True, group="compare-models", exit_on_error=False)
    def _resolve(self, models: list[str]) -> None:
        for text in models:
            self.post_message(ModelResolved(text, *planning.read_model(text)))

    def on_model_resolved(self, message: ModelResolved) -> None:
        """Remembered (a failure too, shown in its row), then every row redrawn."""
        self.app.state.specs.remember(message.text, message.spec, message.error)
        self.refresh_rows()

    def _draw(self) -> None:
        table = self.query_one("#compare-table", DataTable)
        cursor = table.cursor_row
        # Names say what sets each plan apart: give them room, the bar keeps at least 20 cells.
        longest = max((len(r.name) for r in self.rows), default=4)
        name_width = min(longest, max(NAME_WIDTH, self.size.width - FIXED_COLUMNS - 20))
        name_width = max(NAME_WIDTH, name_width)
        bar_width = max(10, self.size.width - FIXED_COLUMNS - name_width)
        ok = [r.report for r in self.rows if r.report is not None]
        scale = max((r.estimate.device_bytes for r in ok), default=1)
        table.clear(columns=True)
        count = len(self.app.state.workspace.plans)
        table.add_column("#", width=max(2, len(str(count))))
        table.add_column("Plan", width=name_width)
        table.add_column(f"Components (0 to {fmt_bytes(scale)})", width=bar_width)
        table.add_column("Device", width=8)
        table.add_column("Rule", width=8)
        table.add_column("Verdict", width=16)
        selected = self.app.state.workspace.selected
        # Words every name on the page says are left out first when a name is too long.
        words = [set(r.name.split(" ")) for r in self.rows]
        shared = set.intersection(*words) if len(words) > 1 else set()
        for i, row in enumerate(self.rows, self.page_start):
            mark = "▶" if i == selected else str(i + 1)
            name = Text(fit_name(row.name, name_width, shared))  # cut between words; no markup
            if row.report is None:
                table.add_row(mark, name, Text(row.error or "", style="italic"), "", "", "")
                continue
            est = row.report.estimate
            verdict = Text("no device", style="dim")
            if row.report.fit:
                fit = row.report.deciding_fit[0]
                verdict = verdict_text(fit.verdict)
                sign = "+" if fit.headroom_bytes >= 0 else "−"
                verdict.append(f" {sign}{abs(fit.headroom_bytes) / 1e9:.1f}")
            table.add_row(
                mark,
                name,
                stacked_bar(est.components, bar_width, scale),
                Text(fmt_bytes(est.device_bytes), justify="right"),
                Text(fmt_bytes(est.rule_of_thumb_bytes), justify="right"),
                verdict,
            )
        if self.rows:
            table.move_cursor(row=min(max(cursor, 0), len(self.rows) - 1))
        first = ok[0] if ok else None
        device = short_device_name(first.fit[0].device) if first and first.fit else "no device"
        paging = ""
        if count > PAGE:
            last = self.page_start + len(self.rows)
            paging = f"Plans {self.page_start + 1:,}-{last:,} of {count:,} ([ and ] page). "
        self.query_one("#compare-scale", Static).update(
            f"{paging}Bars share one scale. Verdicts on {device}. "
            "Rule: the guide's rule of thumb. ▶ marks the plan the form edits."
        )
        self._draw_components()

    def _draw_components(self) -> None:
        table = self.query_one("#components-table", DataTable)
        table.clear(columns=True)
        numbered = [
            (i, r) for i, r in enumerate(self.rows, self.page_start + 1) if r.report is not None
        ][:SIDE_BY_SIDE]
        rows = [r for _, r in numbered]
        table.add_column("", width=20)
        for i, _row in numbered:  # numbered as in the plans table above: names are long
            table.add_column(Text(f"#{i}", justify="right"), width=14)
        if not rows:
            return
        reports = [r.report for r in rows if r.report is not None]
        plans = [rep.estimate.plan for rep in reports]
        lines: list[tuple[str, list[str]]] = [
            ("model", [short_model(p.model)[:14] for p in plans]),
            ("method", [p.method for p in plans]),
            ("seq × batch", [f"{p.seq_len}×{p.batch}" for p in plans]),
        ]
        # The other plan fields, where the plans differ (the rest are the same in all).
        shown = {FIELDS_BY_NAME[n].label for n in ("model", "method", "seq_len", "batch")}
        lines += [
            (label.lower(), [c[:14] for c in cells])
            for label, cells in field_rows(plans, differing_only=True)
            if label not in shown
        ]
        for i, comp in enumerate(reports[0].estimate.components):
            lines.append(
                (comp.name, [fmt_bytes(rep.estimate.components[i].bytes) for rep in reports])
            )
        lines.append(
            ("allocated peak", [fmt_bytes(rep.estimate.allocated_bytes) for rep in reports])
        )
        lines.append(("device peak", [fmt_bytes(rep.estimate.device_bytes) for rep in reports]))
        lines.append(
            ("rule of thumb", [fmt_bytes(rep.estimate.rule_of_thumb_bytes) for rep in reports])
        )
        for label, cells in lines:
            # "≠" and bold mark the rows that differ, readable without colour too.
            mark = differs(cells)
            style = "bold" if mark else ""
            table.add_row(
                Text(("≠ " if mark else "  ") + label, style=style),
                *(Text(c, justify="right", style=style) for c in cells),
            )

    # -- actions -----------------------------------------------------------------------------

    def _index(self) -> int:
        table = self.query_one("#compare-table", DataTable)
        index = self.page_start + max(table.cursor_row, 0)
        return min(index, len(self.app.state.workspace.plans) - 1)

    def action_edit(self) -> None:
        self.app.state.workspace.select(self._index())
        self.app.switch_mode("plan")

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_edit()

    def action_add(self) -> None:
        self.app.state.workspace.add()
        self._focus_row(self.app.state.workspace.selected)

    def action_duplicate(self) -> None:
        self.app.state.workspace.duplicate(self._index())
        self._focus_row(self.app.state.workspace.selected)

    def _focus_row(self, index: int) -> None:
        start = index // PAGE * PAGE
        if start != self.page_start:
            self.page_start = start
            self.refresh_rows()
        self.query_one("#compare-table", DataTable).move_cursor(row=index - start)

    def action_page(self, step: int) -> None:
        count = len(self.app.state.workspace.plans)
        start = min(max(0, self.page_start + step * PAGE), max(0, count - 1) // PAGE * PAGE)
        if start != self.page_start:
            self.page_start = start
            self.refresh_rows()
            self.query_one("#compare-table", DataTable).move_cursor(row=0)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "page":  # only when there is more than one page
            return len(self.app.state.workspace.plans) > PAGE
        return True

    def action_rename(self) -> None:
        index = self._index()
        current = self.app.state.workspace.plans[index].name

        def done(name: str | None) -> None:
            if name:
                self.app.state.workspace.rename(index, name)

        self.app.push_screen(PromptScreen("Rename plan", current), done)

    def action_delete(self) -> None:
        index = self._index()
        name = self.app.state.workspace.plans[index].name
        if self.app.state.workspace.delete(index):
            self.notify(f"Deleted {name}", timeout=3)
        else:
            self.notify("The last plan cannot be deleted", severity="warning", timeout=3)

    def action_export(self, kind: str) -> None:
        default = Path.cwd() / f"trainmem-comparison.{kind}"

        def chosen(text: str | None) -> None:
            path = self.app.typed_path(text)
            if path is not None:
                self._export(kind, path)

        what = "Markdown" if kind == "md" else "JSON"
        self.app.push_screen(
            PromptScreen(f"Export the comparison as {what} to", str(default)), chosen
        )

    @work(thread=True, exclusive=True, group="export", exit_on_error=False)
    def _export(self, kind: str, path: Path) -> None:
        rows = self.rows
        if kind == "json":  # the full plan --json object per plan, what-if and advice included
            rows = [
                Row(
                    r.name,
                    planning.solve(
                        r.report.estimate.plan,
                        r.report.estimate.model,
                        self.app.state.snapshot,
                        self.app.state.calibrations,
                    ),
                )
                if r.report
                else r
                for r in rows
            ]
        text = to_json(rows) if kind == "json" else to_markdown(rows)
        try:
            atomic_write(path, text)
        except OSError as exc:
            self.app.call_from_thread(
                self.notify, f"{show(path)}: cannot write: {exc.strerror or exc}", severity="error"
            )
            return
        self.app.call_from_thread(
            self.notify, f"Exported {len(rows)} plans to {show(path)}", timeout=4
        )
