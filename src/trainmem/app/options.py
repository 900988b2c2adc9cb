"""What the dashboard is opened with, declared once: `trainmem-tui` (cli/dashboard_cmd.py)
builds it from its flags, ``make_app`` passes it on, and ``TrainmemApp`` reads it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from trainmem.app.config_watch import WatchedConfig
    from trainmem.core.calibration import Calibration
    from trainmem.sources.plan_files import PlanSet


@dataclass(frozen=True)
class DashboardOptions:
    plan_set: PlanSet | None = None  # the plans to open (None: the last session's)
    plans_path: Path | None = None  # where Ctrl+S saves (--compare FILE)
    interval: float = 1.0  # seconds between device samples
    startup_messages: Iterable[tuple[str, str]] = ()  # (severity, text) shown at start
    broken_paths: Iterable[Path] = ()  # files that failed to load: never written over
    scan_hf_cache: bool = True  # list the local Hugging Face cache's models when asked
    # Off by default: a blinking cursor repaints twice a second, which over SSH for a
    # dashboard left open all day is traffic and CPU for nothing (and a clock in snapshots).
    cursor_blink: bool = False
    load_in_background: Path | None = None  # a large plans file, read after the first frame
    config_watch: WatchedConfig | None = None  # the --from files, re-read when saved
    data: str | None = None  # --data: a dataset whose lengths are shown
    tokenizer: str | None = None  # --tokenizer for --data
    run_logs: Iterable[str | Path] = ()  # --run-log: probe logs the monitor tails
    find_processes: bool = False  # look for training processes by RSS (no GPU sampled)
    calibrations: Mapping[str, Calibration] | None = None  # this machine's, read before start
    keymap: Mapping[str, str] | None = None  # the user's keys by binding id
