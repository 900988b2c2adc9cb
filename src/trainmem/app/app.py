"""The dashboard app. ``make_app`` builds it; tests, screenshots and the bench inject a
deterministic sampler through ``sampler_factory`` (see ``trainmem.app.fixture``)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.notifications import SeverityLevel
from textual.reactive import var
from textual.screen import ModalScreen, Screen
from textual.worker import Worker, WorkerState

from trainmem.app.config_watch import WatchedConfig, is_training_config
from trainmem.app.messages import (
    ConfigRead,
    DataScanned,
    DevicesSampled,
    ModelsListed,
    PlansOpened,
    PlansProgress,
    PlansSaved,
    ProcessesFound,
    RunLogRead,
)
from trainmem.app.options import DashboardOptions
from trainmem.app.runs import ProcessPoller, RunLogPoller
from trainmem.app.screens.plan import PlanScreen
from trainmem.app.session import SessionFile
from trainmem.app.state import DashboardState
from trainmem.core.errors import PlanError
from trainmem.planner.report import Report
from trainmem.sources.configs.common import FIELD
from trainmem.sources.files import FileReadError, show, typed_path
from trainmem.sources.paths import session_path
from trainmem.sources.plan_files import (
    PlanSet,
    PlansFileError,
    open_plans,
    save_plans,
)

if TYPE_CHECKING:  # the sampler module loads NVML bindings: imported when sampling starts
    from trainmem.devices.sampler import HistoryPoint
    from trainmem.devices.snapshot import Snapshot  # the sampler's too: the first frame has none


class SamplerLike(Protocol):
    """What the app needs of ``trainmem.devices.Sampler`` (the fixture's ReplaySampler too)."""

    def start(self) -> None: ...
    def stop(self, timeout: float | None = ...) -> None: ...
    def history(self, device_id: str) -> list[HistoryPoint]: ...


# (callback, interval) -> sampler; the callback takes each Snapshot, on the sampler's thread.
SamplerFactory = Callable[[Callable[["Snapshot"], None], float], SamplerLike]


def real_sampler(callback: Callable[[Snapshot], None], interval: float) -> SamplerLike:
    from trainmem.devices.sampler import Sampler

    return Sampler(callback, interval=interval)


def cluster_sampler(url: str, select: str = "") -> SamplerFactory:
    """A factory for a sampler that reads only the cluster's nodes from Prometheus. Its
    queries run on the sampler's thread for that source, never on the UI thread."""

    def factory(callback: Callable[[Snapshot], None], interval: float) -> SamplerLike:
        from trainmem.devices.prometheus import PrometheusSource
        from trainmem.devices.sampler import Sampler

        source = PrometheusSource(url, select=select)
        return Sampler(callback, interval=interval, extra_sources=(source,), local=False)

    return factory


class TrainmemApp(App[None]):
    TITLE = "trainmem"
    CSS_PATH = "app.tcss"
    # Compare and monitor are imported when first opened: start-up pays only for the plan view.
    # The plan view is the default screen rather than a MODES entry (see get_default_screen).
    MODES: ClassVar[dict[str, Any]] = {
        "compare": lambda: _screen("compare", "CompareScreen"),
        "monitor": lambda: _screen("monitor", "MonitorScreen"),
    }
    DEFAULT_MODE = "plan"
    # Every binding has an id, so a keymap file can rebind it (trainmem.app.keymap). These
    # are priority bindings: the App runs them as each key arrives, so a key typed after
    # Tab or F3 lands where Tab or F3 took it (see trainmem.app.widgets.keys).
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("f1", "help", "Help", tooltip="List every key", id="app.help", priority=True),
        Binding(
            "f2",
            "switch_mode('plan')",
            "Plan",
            tooltip="The plan form and its estimate",
            id="app.plan",
            priority=True,
        ),
        Binding(
            "f3",
            "switch_mode('compare')",
            "Compare",
            tooltip="Plans side by side",
            id="app.compare",
            priority=True,
        ),
        Binding(
            "f4",
            "switch_mode('monitor')",
            "Monitor",
            tooltip="Running processes vs plan",
            id="app.monitor",
            priority=True,
        ),
        Binding(
            "ctrl+s",
            "save",
            "Save",
            tooltip="Save the plans to a TOML file",
            id="app.save",
            priority=True,
        ),
        Binding(
            "ctrl+o",
            "open",
            "Open",
            tooltip="Load plans from a TOML file, or a plan from a training config (watched)",
            id="app.open",
            priority=True,
        ),
        Binding(
            "ctrl+q",
            "quit",
            "Quit",
            tooltip="Quit (the open plans are kept for next time)",
            id="app.quit",
            priority=True,
        ),
        Binding("tab", "focus_next", show=False, id="app.focus_next", priority=True),
        Binding("shift+tab", "focus_previous", show=False, id="app.focus_previous", priority=True),
    ]
    # The keys the key bar always shows, whatever else it has room for.
    MAIN_KEYS: ClassVar[tuple[str, ...]] = (
        "app.help",
        "app.plan",
        "app.compare",
        "app.monitor",
        "app.quit",
    )

    # Counters that tell the screens a part of ``state`` changed. ``var``, not ``reactive``:
    # a change notifies the watchers and repaints nothing by itself; a ``reactive`` on the
    # App would repaint the whole screen every sample.
    snapshot_version = var(0)
    report_version = var(0)
    plans_version = var(0)
    model_list_version = var(0)
    data_version = var(0)  # the --data dataset was read
    runs_version = var(0)  # a run log or the training processes changed
    loading_text = var("")  # progress of a plans file read in the background

    def __init__(
        self, options: DashboardOptions, sampler_factory: SamplerFactory = real_sampler
    ) -> None:
        o = options
        super().__init__()
        # The user's keys by binding id (trainmem.app.keymap, read before start-up).
        self.keymap = dict(o.keymap or {})
        if self.keymap:
            self.set_keymap(self.keymap)
        self.cursor_blink = o.cursor_blink  # off by default: see DashboardOptions
        self.state = DashboardState(
            o.plan_set,
            o.plans_path,
            {p.resolve() for p in o.broken_paths},
            o.calibrations,
            self.plans_changed,  # every change of the open plans is announced from there
        )
        self.state.sampler = _NoSampler()
        # The session file as found now: saving at exit merges what another dashboard on the
        # same state directory saved after this point.
        self.session = SessionFile(
            session_path(),
            o.plan_set.plans if o.plan_set else (),
            opened=o.plans_path is None,  # --compare FILE leaves the session unread
        )
        self.interval = o.interval
        self._sampler_factory = sampler_factory
        self._startup_messages = list(o.startup_messages)
        self._scan_hf_cache = o.scan_hf_cache
        self._cache_scanned = False
        # A large plans file (the session, or --compare) read after the first frame; plans
        # given by flags stay after the ones it holds.
        self._background = o.load_in_background
        self._flags_plans = o.plan_set is not None  # kept after a file read in the background
        # Training configs plans were opened from (--from, Ctrl+O), re-read when saved.
        self.watches: list[WatchedConfig] = [o.config_watch] if o.config_watch else []
        self._watching = False
        self._stop_watching = threading.Event()
        self._data = (o.data, o.tokenizer) if o.data else None  # counted after the first frame
        # Probe logs tailed, and training processes looked for, from the first frame on
        # (the pollers touch nothing until the polling worker first calls them).
        self.run_pollers = [RunLogPoller(p) for p in o.run_logs]
        self.process_poller = ProcessPoller(self._processes_wanted) if o.find_processes else None

    def notify(
        self,
        message: str,
        *,
        title: str = "",
        severity: SeverityLevel = "information",
        timeout: float | None = None,
        markup: bool = False,
    ) -> None:
        """Every toast as plain text, whoever calls it (a widget's notify passes markup=True):
        they quote plan names, file paths and config values, and a stranger's "[/x]" would
        otherwise be parsed as markup, styled or crash the dashboard."""
        super().notify(message, title=title, severity=severity, timeout=timeout, markup=False)

    # -- lifecycle ---------------------------------------------------------------------------

    def get_default_screen(self) -> Screen[Any]:
        """The plan view, as the first mode's default screen. A screen from MODES is composed
        inside the app's own start-up batch: Textual re-parses all CSS for it, lays it out and
        draws it there, throws that drawing away and then paints it in pieces. A default screen
        is composed after that batch and drawn once. ``on_mount`` then names the mode."""
        return PlanScreen()

    def on_mount(self) -> None:
        # F2 and the compare view switch back to "plan", whose stack already holds the screen.
        self.add_mode("plan", PlanScreen)
        for severity, text in self._startup_messages:
            self.notify(text, severity=severity, timeout=8)  # type: ignore[arg-type]
        # The first frame comes first; sampling and the cache scan start right after it.
        self.call_after_refresh(self._start_background)
        # SIGHUP and SIGTERM (a lost terminal) are handled by trainmem.cli.exit_guard, which
        # works before the loop exists and when the loop itself is stuck.

    def _start_background(self) -> None:
        gc.freeze()  # see trainmem.cli.dashboard_cmd.run
        gc.enable()
        self.state.sampler = self._sampler_factory(self._sampled, self.interval)
        self.state.sampler.start()
        if self.watches or self.run_pollers or self.process_poller is not None:
            self._start_watching()
        if self._data is not None:
            self._scan_data(*self._data, self.state.workspace.current.plan.model)
        if self._background is not None:
            self.notify(f"Reading the plans in {show(self._background)}…", timeout=4)
            session = self.state.plans_path != self._background
            self._open_plans(self._background, session=session, keep=self._flags_plans)

    def on_unmount(self) -> None:
        self._stop_watching.set()
        self.state.sampler.stop(timeout=1.0)

    def _sampled(self, snapshot: Snapshot) -> None:
        # On the sampler's thread: post_message is thread-safe, touching widgets is not.
        self.post_message(DevicesSampled(snapshot))

    def on_devices_sampled(self, message: DevicesSampled) -> None:
        self.state.snapshot = message.snapshot
        self.snapshot_version += 1

    def publish_report(self, report: Report) -> None:
        """The selected plan's estimate changed (the monitor compares the run with it)."""
        self.state.report = report
        self.report_version += 1

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place a worker's failure is shown: no worker's error goes unseen."""
        if event.state == WorkerState.ERROR:
            error = event.worker.error
            self.notify(
                f"{event.worker.name or 'background task'} failed: {type(error).__name__}: {error}",
                severity="error",
                timeout=10,
            )

    def want_model_list(self) -> None:
        """Read the local Hugging Face cache's model list once, when first needed (the model
        field is edited or a model palette opens): huggingface_hub's cache scanner costs
        ~20 MiB of resident memory, which a dashboard left open all day need not carry."""
        if self._scan_hf_cache and not self._cache_scanned:
            self._cache_scanned = True
            self._scan_cache()

    @work(thread=True, exclusive=True, group="hf-cache", exit_on_error=False)
    def _scan_cache(self) -> None:
        from trainmem.sources.resolve import cached_model_ids

        self.post_message(ModelsListed(cached_model_ids()))

    def on_models_listed(self, message: ModelsListed) -> None:
        self.state.cached_ids = message.ids
        self.model_list_version += 1

    def plans_changed(self) -> None:
        self.plans_version += 1

    def session_set(self) -> PlanSet:
        return self.state.workspace.to_plan_set()

    # -- saving and loading ------------------------------------------------------------------

    # The dialogs are imported when first opened, like the compare and monitor views.

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """In a dialog (a prompt, the palette, the key list) the keys that would leave it or
        open another (F2-F4, Save, Open) do nothing: they reach the dialog as before."""
        if action in ("switch_mode", "save", "open") and isinstance(self.screen, ModalScreen):
            return None  # disabled, still shown (dimmed) in the key bar behind the dialog
        return True

    def action_help(self) -> None:
        """F1 opens the list of keys, and closes it again."""
        from trainmem.app.screens.help import HelpScreen

        if isinstance(self.screen, HelpScreen):
            self.screen.dismiss()
        else:
            self.push_screen(HelpScreen())

    def action_save(self) -> None:
        from trainmem.app.screens.prompt import PromptScreen

        self.push_screen(PromptScreen("Save plans to", str(self.state.plans_path)), self._save_to)

    def typed_path(self, text: str | None) -> Path | None:
        """The path typed into a prompt (open, save, export, tail), or None: nothing typed,
        or a path no file can have (an unknown ~user, a NUL byte), said in a toast."""
        if not text or not text.strip():
            return None
        try:
            return typed_path(text)
        except FileReadError as exc:
            self.notify(str(exc), severity="error", timeout=8)
            return None

    def _save_to(self, text: str | None) -> None:
        path = self.typed_path(text)
        if path is None:
            return
        if path.resolve() in self.state.broken_paths:
            self.notify(
                f"{show(path)} could not be read when loaded, so it is not overwritten. "
                "Fix it or save under another name.",
                severity="error",
                timeout=8,
            )
            return
        self._write_plans(path, self.state.workspace.to_plan_set())

    @work(thread=True, exclusive=True, group="plans-file", exit_on_error=False)
    def _write_plans(self, path: Path, plan_set: PlanSet) -> None:
        try:
            save_plans(path, plan_set)
        except PlansFileError as exc:
            self.call_from_thread(self.notify, str(exc), severity="error", timeout=8)
            return
        self.post_message(PlansSaved(str(path), len(plan_set.plans)))

    @work(thread=True, exclusive=True, group="plans-file", exit_on_error=False)
    def _open_plans(self, path: Path, *, session: bool, keep: bool) -> None:
        """Read a plans file as the start-up does (trainmem.sources.plan_files.open_plans):
        the valid plans open, a file with invalid ones is never written over."""

        def progress(done: int, total: int) -> None:
            self.post_message(PlansProgress(done, total))

        opened = open_plans(path, session=session, progress=progress)
        self.post_message(PlansOpened(path, opened, session=session, keep=keep))

    def on_plans_progress(self, message: PlansProgress) -> None:
        self.loading_text = f"reading plans {100 * message.done // message.total}%"

    def on_plans_opened(self, message: PlansOpened) -> None:
        opened, path = message.opened, message.path
        self.loading_text = ""
        for severity, text in opened.messages:
            self.notify(text, severity=severity, timeout=10)  # type: ignore[arg-type]
        self.state.broken_paths.update(p.resolve() for p in opened.broken)
        if opened.plan_set is None:
            return
        if not opened.broken:  # read whole: saving over it loses nothing
            self.state.broken_paths.discard(path.resolve())
        ws = self.state.workspace
        kept = tuple(ws.plans) if message.keep else ()
        plans = opened.plan_set.plans + kept
        selected = len(opened.plan_set.plans) if kept else opened.plan_set.selected
        ws.replace_all(PlanSet(plans, selected))
        if message.session:
            self.session.read_too(opened.plan_set.plans)
        else:
            self.state.plans_path = path
        self.notify(f"Opened {len(opened.plan_set.plans):,} plans from {show(path)}", timeout=4)

    def on_plans_saved(self, message: PlansSaved) -> None:
        self.state.plans_path = Path(message.path)
        self.notify(f"Saved {message.count} plans to {show(message.path)}", timeout=4)

    def action_open(self) -> None:
        from trainmem.app.screens.prompt import PromptScreen

        self.push_screen(
            PromptScreen("Open plans (.toml) or a training config", str(self.state.plans_path)),
            self._open_from,
        )

    def _open_from(self, text: str | None) -> None:
        path = self.typed_path(text)
        if path is None:
            return
        if is_training_config(path):
            self._open_config(WatchedConfig.of([path]))
        else:
            self._open_plans(path, session=False, keep=False)

    def _processes_wanted(self) -> bool:
        """Read from the polling thread: two references, no widget."""
        if self.current_mode != "monitor":
            return False
        snapshot = self.state.snapshot
        return snapshot is None or not any(d.kind == "gpu" for d in snapshot.devices)

    def watch_run_log(self, path: Path) -> None:
        """Tail one more probe log (the monitor's action)."""
        self.run_pollers.append(RunLogPoller(path))
        self._start_watching()

    def on_run_log_read(self, message: RunLogRead) -> None:
        self.state.runs[message.seen.path] = message.seen
        self.runs_version += 1

    def on_processes_found(self, message: ProcessesFound) -> None:
        self.state.processes = message.processes
        self.runs_version += 1

    # -- the --data dataset ------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="data", exit_on_error=False)
    def _scan_data(self, data: str, tokenizer: str | None, model: str) -> None:
        """Count the dataset's tokens with the model's tokenizer (or the approximation)."""
        from trainmem.planner.lengths import scan_data

        try:
            self.post_message(DataScanned(scan_data(data, model, tokenizer)))
        except ValueError as exc:  # a missing or unreadable dataset: one line
            self.post_message(DataScanned(None, str(exc)))

    def on_data_scanned(self, message: DataScanned) -> None:
        if message.scan is None:
            self.notify(f"--data: {message.error}", severity="error", timeout=10)
            return
        self.state.scan = message.scan
        self.data_version += 1
        scan = message.scan
        self.notify(f"{scan.dataset}: {scan.lengths.examples:,} examples ({scan.counting})")

    # -- watched training configs ------------------------------------------------------------

    def _start_watching(self) -> None:
        if not self._watching:
            self._watching = True
            self._poll()

    @work(thread=True, exclusive=True, group="config-read", exit_on_error=False)
    def _open_config(self, watch: WatchedConfig) -> None:
        self.post_message(self._read(watch, opened=True))

    def _pollers(self) -> list[Callable[[], Message | None]]:
        """What the polling worker reads once per interval, off the UI thread."""
        polls: list[Callable[[], Message | None]] = [
            partial(self._poll_config, w) for w in list(self.watches)
        ]
        polls += [partial(self._poll_run, p) for p in list(self.run_pollers)]
        if self.process_poller is not None:
            polls.append(self._poll_processes)
        return polls

    def _poll_config(self, watch: WatchedConfig) -> Message | None:
        return self._read(watch) if watch.changed() else None

    def _poll_run(self, poller: Any) -> Message | None:
        seen = poller()
        return RunLogRead(seen) if seen is not None else None

    def _poll_processes(self) -> Message | None:
        found = self.process_poller()
        return ProcessesFound(found) if found is not None else None

    @work(thread=True, exclusive=True, group="poll", exit_on_error=False)
    def _poll(self) -> None:
        """Watched configs, run logs and (without GPUs) training processes, once per
        interval; one poller's failure is reported once and does not stop the others."""
        failed: set[int] = set()
        while not self._stop_watching.wait(self.interval):
            for i, poll in enumerate(self._pollers()):
                try:
                    message = poll()
                except Exception as exc:
                    if i not in failed:
                        failed.add(i)
                        self.call_from_thread(
                            self.notify, f"polling failed: {exc}", severity="error"
                        )
                    continue
                if message is not None:
                    self.post_message(message)

    @staticmethod
    def _read(watch: WatchedConfig, *, opened: bool = False) -> ConfigRead:
        try:
            plan, unmodelled = watch.reread()
        except ValueError as exc:  # PlanError, a file error: one line, the last plan stays
            # "--from: " names the command-line flag; here the file came from Ctrl+O too
            why = exc.message if isinstance(exc, PlanError) and exc.field == FIELD else str(exc)
            return ConfigRead(watch, None, error=why, opened=opened)
        return ConfigRead(watch, plan, unmodelled, opened=opened)

    def on_config_read(self, message: ConfigRead) -> None:
        watch, plan = message.watch, message.plan
        if plan is None:
            kept = "" if message.opened else " (the plan keeps its last values)"
            self.notify(f"{watch.names()}: {message.error}{kept}", severity="error", timeout=10)
            return
        ws = self.state.workspace
        index = next((i for i, p in enumerate(ws.plans) if p.plan == watch.plan), None)
        if message.opened or index is None:
            # Opened now, or the plan built from it was edited here: a new plan, so no edit
            # made in the dashboard is overwritten.
            ws.add(plan)
            what = "opened" if message.opened else "re-read: edited here, so opened as a new plan"
        else:
            ws.replace_at(index, plan)
            what = "re-read: plan updated"
        watch.plan = plan
        if message.opened:
            self.watches.append(watch)
            self._start_watching()
        self.notify(f"{watch.names()} {what}", timeout=4)
        if message.unmodelled:
            shown = "; ".join(message.unmodelled)
            self.notify(f"not in the estimate (not modelled): {shown}", severity="warning")

    def save_session(self) -> list[str]:
        """Keep the open plans for the next start, merged with what another dashboard on the
        same state directory saved meanwhile (trainmem.app.session); returns what to tell
        the user (nothing when all went well)."""
        path = self.session.path
        if path.resolve() in self.state.broken_paths:
            return [
                f"could not keep the open plans: {show(path)} was unreadable at start; "
                "left as it was"
            ]
        try:
            _written, note = self.session.save(self.state.workspace.to_plan_set())
        except PlansFileError as exc:
            return [f"could not keep the open plans: {exc}"]
        return [note] if note else []

    # -- command palette ---------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[Any]) -> Iterable[SystemCommand]:
        """Every binding of the current screen and the app, so each action is in the palette."""
        seen = set()
        for active in screen.active_bindings.values():
            binding = active.binding
            if not binding.description or binding.action in seen or not active.enabled:
                continue
            seen.add(binding.action)
            node = active.node
            yield SystemCommand(
                binding.description,
                binding.tooltip or binding.description,
                lambda node=node, action=binding.action: node.run_action(action),
            )
        for command in super().get_system_commands(screen):
            if command.title not in ("Quit the application", "Keys"):
                yield command


def _screen(module: str, name: str) -> Screen[Any]:
    import importlib

    screen_class = getattr(importlib.import_module(f"trainmem.app.screens.{module}"), name)
    return screen_class()  # type: ignore[no-any-return]


class _NoSampler:
    """Before mount: no samples, no history."""

    def start(self) -> None: ...
    def stop(self, timeout: float | None = None) -> None: ...
    def history(self, device_id: str) -> list[HistoryPoint]:
        return []


def make_app(
    *,
    sampler_factory: SamplerFactory | None = None,
    prometheus: str | None = None,
    select: str = "",
    **options: Any,
) -> TrainmemApp:
    """The dashboard opened with ``options`` (the fields of DashboardOptions). Without
    ``sampler_factory`` it samples this machine's real devices, or with ``prometheus`` (a
    server URL) the cluster's nodes, filtered by ``select``."""
    if sampler_factory is None and prometheus:
        sampler_factory = cluster_sampler(prometheus, select)
    return TrainmemApp(DashboardOptions(**options), sampler_factory or real_sampler)
