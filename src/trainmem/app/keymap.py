"""The user's keymap: ``keymap.toml`` in the state directory rebinds keys by binding id.

    # ~/.local/state/trainmem/keymap.toml
    "app.save" = "ctrl+w"        # or, as a table: [app] save = "ctrl+w"
    "plan.copy" = "ctrl+d,f8"    # several keys, comma-separated

Every binding of the app has an id (``TrainmemApp.BINDINGS`` and the screens'); Textual's
``App.set_keymap`` applies the file (textual 8.2, app.py ``App.set_keymap``). The file is
read before the app starts, never on the UI thread; a broken file, an unknown id or a key
that is not a key is one warning in the app, and the default keys stay.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from trainmem.core.text import visible
from trainmem.sources.paths import state_dir

if sys.version_info >= (3, 11):
    import tomllib
else:  # as trainmem.sources.plan_files
    import tomli as tomllib  # type: ignore[import-not-found,no-redef,unused-ignore]

MAX_BYTES = 64 * 1024  # a keymap is a few lines: anything larger is not one
# One key as Textual names it: "ctrl+w", "f5", "shift+tab", "question_mark", or one character.
_KEY = re.compile(r"^(?:[a-z]+\+)*(?:[a-z0-9_]+|[!-~])$")

Keymap = dict[str, str]


def keymap_path() -> Path:
    return state_dir() / "keymap.toml"


def binding_ids() -> set[str]:
    """Every binding id the dashboard has (imports the screens: only when a keymap exists)."""
    from trainmem.app.app import TrainmemApp
    from trainmem.app.screens.compare import CompareScreen
    from trainmem.app.screens.help import HelpScreen
    from trainmem.app.screens.monitor import MonitorScreen
    from trainmem.app.screens.plan import PlanScreen
    from trainmem.app.screens.prompt import PromptScreen

    nodes = (TrainmemApp, PlanScreen, CompareScreen, MonitorScreen, HelpScreen, PromptScreen)
    return {b.id for n in nodes for b in n.BINDINGS if getattr(b, "id", None)}  # type: ignore[union-attr]


def read_keymap(path: Path | None = None) -> tuple[Keymap, str | None]:
    """The keymap in ``path`` (the state directory's by default) and a one-line warning for
    what could not be used; no file is no keymap and no warning."""
    path = path or keymap_path()
    try:
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except FileNotFoundError:
        return {}, None
    except OSError as exc:
        return {}, f"{path}: cannot read: {exc.strerror or exc}; the default keys are used"
    if len(data) > MAX_BYTES:
        return {}, f"{path}: larger than {MAX_BYTES // 1024} KiB; the default keys are used"
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        return {}, f"{path}: not a TOML file ({visible(str(exc))}); the default keys are used"
    except (ValueError, RecursionError):  # an integer too long, or nested too deeply
        return {}, f"{path}: not a TOML file we can read; the default keys are used"
    known = binding_ids()
    keymap: Keymap = {}
    bad: list[str] = []
    for binding_id, keys in _flatten(table):
        parts = [k.strip() for k in keys.split(",")] if isinstance(keys, str) else []
        if binding_id not in known:
            bad.append(f"no binding {visible(binding_id)!r}")
        elif not parts or not all(_KEY.match(k) for k in parts):
            bad.append(f"{binding_id} = {visible(repr(keys))[:40]} is not a key")
        else:
            keymap[binding_id] = ",".join(parts)
    if not bad:
        return keymap, None
    shown = "; ".join(bad[:3]) + (f" (and {len(bad) - 3} more)" if len(bad) > 3 else "")
    return keymap, f"{path}: {shown}; those keep their default keys (F1 lists the keys)"


def _flatten(table: dict[str, object], prefix: str = "") -> list[tuple[str, object]]:
    """``[app] save = ...`` and ``"app.save" = ...`` (or ``app.save = ...``) alike."""
    out: list[tuple[str, object]] = []
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _flatten(value, f"{name}.")
        else:
            out.append((name, value))
    return out
