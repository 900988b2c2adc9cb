"""The main view: the plan form, the device panes and the estimate of the selected plan."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.command import CommandPalette, Provider
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Input, Static
from textual.worker import get_current_worker

from trainmem.app import planning
from trainmem.app.messages import ModelResolved, Refused, Simulated, Solved
from trainmem.app.screens.base import AppScreen
from trainmem.app.targets import snapshot_targets
from trainmem.app.widgets.breakdown import Breakdown, headline_text
from trainmem.app.widgets.devices import DevicesPanel, PlanMark
from trainmem.app.widgets.keybar import KeyBar
from trainmem.app.widgets.lengths import LengthHistogram
from trainmem.app.widgets.plan_form import PlanForm
from trainmem.core.architecture import ModelSpec
from trainmem.core.errors import PlanError
from trainmem.core.plan import Plan
from trainmem.planner.naming import fit_name
from trainmem.planner.report import Report, Stale

if TYPE_CHECKING:
    from trainmem.core.calibration import Calibration
    from trainmem.devices.snapshot import Snapshot


NARROW_WIDTH = 110
FORM_WIDTH = {True: 36, False: 40}  # narrow terminal or not


def _model_commands() -> type[Provider]:
    """The model palette's provider, imported when a palette first opens."""
    from trainmem.app.commands import ModelCommands

    return ModelCommands


class PlanScreen(AppScreen):
    # Priority bindings, with ids for the keymap file: see TrainmemApp.BINDINGS.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "ctrl+n",
            "copy_plan",
            "Copy",
            tooltip="Add a copy of this plan and edit it",
            id="plan.copy",
            priority=True,
        ),
        Binding(
            "f5",
            "cycle_plan(-1)",
            "Prev",
            tooltip="Edit the previous plan",
            id="plan.prev",
            priority=True,
        ),
        Binding(
            "f6",
            "cycle_plan(1)",
            "Next",
            tooltip="Edit the next plan",
            id="plan.next",
            priority=True,
        ),
        Binding(
            "ctrl+r",
            "reset_plan",
            "Reset",
            tooltip="Reset this plan to the defaults",
            id="plan.reset",
            priority=True,
        ),
        Binding(
            "ctrl+l",
            "pick_model",
            "Models",
            tooltip="Pick a model from the catalogue or cache",
            id="plan.models",
            priority=True,
        ),
        Binding(
            "f7",
            "jump_devices",
            "Devices",
            tooltip="Jump to the device panes, and back",
            id="plan.devices",
            priority=True,
        ),
    ]

    COMMANDS: ClassVar[set[type[Provider] | Callable[[], type[Provider]]]] = {_model_commands}

    def __init__(self) -> None:
        super().__init__()
        self._shown_version = -1
        self._narrow: bool | None = None
        self._report: Report | None = None
        self._resumed = False

    def compose(self) -> ComposeResult:
        # Keep the Horizontal: with the screen itself laying out the two columns, each
        # keystroke's repaint took ~4 ms longer (measured), for ~1 ms saved at start-up.
        with Horizontal(id="body"):
            yield PlanForm(self.app.state.workspace.current.plan, id="form")
            with VerticalScroll(id="right"):
                yield Static(id="headline", markup=False)
                yield DevicesPanel(id="devices")
                yield Breakdown(id="breakdown")
                yield LengthHistogram(id="lengths", markup=False)
        yield KeyBar()

    def on_mount(self) -> None:
        self.query_one("#devices").border_title = "Devices"
        self.query_one("#breakdown").border_title = "Estimate"
        lengths = self.query_one(LengthHistogram)
        lengths.border_title = "Dataset lengths"
        lengths.display = False
        form = self.query_one(PlanForm)
        form.model_suggester.words = self.app.state.model_names()
        # The device presets are only suggestions: read after the first frame.
        self.call_after_refresh(self._load_device_names)
        self.watch(
            self.app, "snapshot_version", lambda _v: self._on_snapshot(self.app.state.snapshot)
        )
        self.watch(self.app, "plans_version", self._on_plans_changed)
        self.watch(self.app, "model_list_version", self._on_model_list)
        self.watch(self.app, "loading_text", self._on_loading)
        self.watch(self.app, "data_version", lambda _v: self._show_lengths())

    @property
    def report(self) -> Report | None:
        """The estimate on screen: the last valid one."""
        return self._report

    # -- workspace ---------------------------------------------------------------------------

    def _on_plans_changed(self, version: int) -> None:
        if version == self._shown_version:
            return
        self._shown_version = version
        ws = self.app.state.workspace
        form = self.query_one(PlanForm)
        form.load(ws.current.plan)
        form.border_title = f"Plan {ws.selected + 1:,}/{len(ws.plans):,}"
        self._show_name()
        self.recalculate()

    def _show_name(self) -> None:
        """The plan's name under the form; a default name follows every edit (the workspace
        renames it), so this runs after each estimate too."""
        form = self.query_one(PlanForm)
        name = self.app.state.workspace.current.name
        self.sub_title = name
        if not self.app.loading_text:
            # Cut between words to fit the border (Textual would cut inside one).
            width = FORM_WIDTH[bool(self._narrow)] - 6  # the border's corners and padding
            form.border_subtitle = Text(fit_name(name, width))  # a str is parsed as markup

    def _show_lengths(self) -> None:
        """The dataset histogram against the plan's maximum length (after --data is read)."""
        scan = self.app.state.scan
        if scan is not None:
            plan = self.app.state.workspace.current.plan
            self.query_one(LengthHistogram).show(scan.lengths, plan.seq_len)

    def _on_loading(self, text: str) -> None:
        if text:
            self.query_one(PlanForm).border_subtitle = Text(text)  # it names a file
        else:
            self._show_name()

    def _load_device_names(self) -> None:
        self.query_one(PlanForm).device_suggester.words = self.app.state.device_names()

    def _on_model_list(self, _version: int) -> None:
        self.query_one(PlanForm).model_suggester.words = self.app.state.model_names()

    def action_copy_plan(self) -> None:
        ws = self.app.state.workspace
        ws.duplicate(ws.selected)
        self.notify(f"Editing a copy: {ws.current.name}", timeout=3)

    def action_cycle_plan(self, step: int) -> None:
        ws = self.app.state.workspace
        ws.select((ws.selected + step) % len(ws.plans))

    def action_pick_model(self) -> None:
        self.app.want_model_list()
        self.app.push_screen(
            CommandPalette(providers=[_model_commands()], placeholder="Pick a model…")
        )

    def set_model(self, model: str) -> None:
        """Put ``model`` in the form, as if typed (the estimate follows)."""
        field = self.query_one("#f-model", Input)
        field.value = model
        field.cursor_position = len(model)

    def action_jump_devices(self) -> None:
        """On a narrow terminal the panes are below the estimate: one key brings them up, the
        next goes back to the top."""
        right = self.query_one("#right", VerticalScroll)
        devices = self.query_one(DevicesPanel)
        at_devices = right.scroll_y > 0 and abs(right.scroll_y - devices.virtual_region.y) <= 1
        if at_devices:
            right.scroll_home(animate=False)
        else:
            right.scroll_to_widget(devices, top=True, animate=False)

    def action_reset_plan(self) -> None:
        self.app.state.workspace.update_current(Plan())

    # -- recalculation -----------------------------------------------------------------------

    @on(PlanForm.Edited)
    def edited(self, message: PlanForm.Edited) -> None:
        if message.name == "model":
            self.app.want_model_list()  # completions from the local cache, read once
        self.recalculate()

    def recalculate(self) -> None:
        """Estimate what the form holds now; on any error keep the last estimate and say why."""
        form = self.query_one(PlanForm)
        values, errors = form.read()
        if errors:
            self._invalid(errors)
            return
        try:
            plan = Plan(**values).validated()
        except PlanError as exc:
            self._invalid({exc.field: exc.message})
            return
        try:
            spec = self.app.state.specs.get(plan.model)
        except PlanError as exc:
            self._invalid({"model": exc.message})
            return
        if spec is None:
            self._resolve_model(plan.model)
            self.query_one(Breakdown).border_subtitle = "reading model config…"
            return
        self._estimate(plan, spec)

    def _estimate(self, plan: Plan, spec: ModelSpec) -> None:
        form = self.query_one(PlanForm)
        try:
            state = self.app.state
            report = planning.evaluate(plan, spec, state.snapshot, state.calibrations)
        except PlanError as exc:
            self._invalid({exc.field: exc.message})
            return
        except ValueError as exc:  # the device parser's one-line message
            self._invalid({"device": str(exc)})
            return
        form.show_errors({})
        form.mark_applicable(plan)
        self.app.state.workspace.edit_current(plan)
        self._show_name()
        self._show_report(report)
        if report.fit:  # after the repaint, so the worker never delays the figures
            state = self.app.state
            self.call_after_refresh(self._solve, plan, spec, state.snapshot, state.calibrations)

    def _show_report(self, report: Report) -> None:
        """Show and publish ``report``: the quick one as the user types, then the simulated
        one (the figures `plan` prints) from the worker."""
        self._report = report
        self.app.publish_report(report)
        breakdown = self.query_one(Breakdown)
        breakdown.set_stale(False)
        breakdown.show(report)
        self._show_lengths()
        self.query_one("#headline", Static).update(headline_text(report))
        self._refresh_devices()

    def _invalid(self, errors: dict[str, str]) -> None:
        self.query_one(PlanForm).show_errors(errors)
        self.query_one(Breakdown).set_stale(True)

    @work(thread=True, exclusive=True, group="model", exit_on_error=False)
    def _resolve_model(self, text: str) -> None:
        self.post_message(ModelResolved(text, *planning.read_model(text)))

    def on_model_resolved(self, message: ModelResolved) -> None:
        self.app.state.specs.remember(message.text, message.spec, message.error)
        values, _ = self.query_one(PlanForm).read()
        if values.get("model") != message.text:
            return  # typed on since; a newer lookup is on its way
        if message.error is not None:
            self.query_one(Breakdown).border_subtitle = ""
            self._invalid({"model": message.error.message})
        else:
            self.recalculate()

    @work(thread=True, exclusive=True, group="solve", exit_on_error=False)
    def _solve(
        self,
        plan: Plan,
        spec: ModelSpec,
        snapshot: Snapshot | None,
        calibrations: Mapping[str, Calibration],
    ) -> None:
        # the simulated device peak first (one simulation), then the searches (many), unless
        # the plan was edited meanwhile: a newer worker has replaced this one
        worker = get_current_worker()
        if worker.is_cancelled:  # typed on before this thread began
            return
        try:  # a worker cancelled by a newer edit stops at the next search
            self.post_message(
                Simulated(plan, planning.simulated(plan, spec, snapshot, calibrations))
            )
            solved = planning.solve(
                plan, spec, snapshot, calibrations, stop=lambda: worker.is_cancelled
            )
        except Stale:
            return
        except PlanError as exc:  # refused once simulated (a tensor PyTorch would not allocate)
            self.post_message(Refused(plan, exc.field, exc.message))
            return
        self.post_message(Solved(plan, solved))

    def on_refused(self, message: Refused) -> None:
        if self._report is not None and message.plan == self._report.estimate.plan:
            self._invalid({message.field: message.message})
            self.query_one(Breakdown).stop_solving()

    def on_simulated(self, message: Simulated) -> None:
        if self._report is not None and message.plan == self._report.estimate.plan:
            self._show_report(message.report)

    def on_solved(self, message: Solved) -> None:
        if self._report is not None and message.plan == self._report.estimate.plan:
            self.query_one(Breakdown).show_solution(message.report)

    # -- devices -----------------------------------------------------------------------------

    def _on_snapshot(self, snapshot: Snapshot | None) -> None:
        if snapshot is None:
            return
        report = self._report
        auto = report is not None and report.estimate.plan.device.lower() == "auto"
        if auto and [t.name for t in snapshot_targets(snapshot)] != [
            t.name
            for t in report.targets  # type: ignore[union-attr]
        ]:
            self.recalculate()  # the machine's devices changed (or arrived)
        if self.is_current:
            self._refresh_devices()

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        if not self._resumed:
            # The first activation follows the compose at once: every widget was styled as it
            # mounted, so restyling the whole tree again (Screen's default) is wasted work.
            self._resumed = True
            event.refresh_styles = False
        self._refresh_devices()

    def on_resize(self) -> None:
        """Narrow terminals: one scrolling column with a one-line verdict on top and the
        estimate before the devices; wide ones show the devices above the estimate.

        Set as inline styles on the few widgets concerned rather than a screen class, which
        would restyle every widget on each resize (and on the first frame)."""
        narrow = self.size.width < NARROW_WIDTH
        if narrow == self._narrow:
            return
        self._narrow = narrow
        self.query_one(PlanForm).styles.width = FORM_WIDTH[narrow]
        self._show_name()
        self.query_one("#headline").display = narrow
        devices, breakdown = self.query_one(DevicesPanel), self.query_one(Breakdown)
        devices.styles.grid_size_columns = 1 if narrow else 2
        right = self.query_one("#right")
        first = breakdown if narrow else devices
        if right.children.index(first) != 1:  # after the headline
            right.move_child(first, after=right.children[0])

    def _refresh_devices(self) -> None:
        snapshot = self.app.state.snapshot
        if snapshot is not None:
            self.query_one(DevicesPanel).show_snapshot(
                snapshot, self.app.state.sampler, plan_mark(self._report)
            )


def plan_mark(report: Report | None) -> PlanMark | None:
    """The plan on the device panes, with the run its first target makes by the allocator's
    cache retry where it needs one, so that the panes judge it as the report does."""
    if report is None:
        return None
    on = report.on_device[0] if report.on_device else None
    return PlanMark(report.estimate.device_bytes, on.bytes if on and on.retried else None)
