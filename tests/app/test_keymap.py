"""keymap.toml in the state directory rebinds keys by binding id; a bad file is one warning."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from app_helpers import screen_lines, settle

from trainmem.app import TrainmemApp
from trainmem.app.keymap import binding_ids, keymap_path, read_keymap
from trainmem.app.screens.help import HelpScreen
from trainmem.app.screens.prompt import PromptScreen
from trainmem.cli.dashboard_cmd import startup


def write(text: str | bytes) -> Path:
    path = keymap_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def test_every_binding_has_an_id():
    from trainmem.app.app import TrainmemApp
    from trainmem.app.screens.compare import CompareScreen
    from trainmem.app.screens.monitor import MonitorScreen
    from trainmem.app.screens.plan import PlanScreen

    nodes = (TrainmemApp, PlanScreen, CompareScreen, MonitorScreen, HelpScreen, PromptScreen)
    for node in nodes:
        assert all(b.id for b in node.BINDINGS), node  # type: ignore[union-attr]
    assert {"app.save", "app.quit", "plan.copy", "compare.add", "monitor.run_log"} <= binding_ids()


def test_no_file_is_no_keymap():
    assert read_keymap() == ({}, None)


def test_dotted_names_and_tables_alike():
    write('"app.save" = "ctrl+w"\nplan.copy = "ctrl+d, f8"\n[compare]\nadd = "n"\n')
    assert read_keymap() == (
        {"app.save": "ctrl+w", "plan.copy": "ctrl+d,f8", "compare.add": "n"},
        None,
    )


@pytest.mark.parametrize(
    "text",
    [
        "app.save = ",  # not TOML
        b"\xff\xfe = 1",  # not UTF-8
        "x" * (70 * 1024),  # not a keymap
        "a = " + "[" * 2000 + "]" * 2000,  # nested past tomllib's recursion
        "a = " + "1" * 5000,  # an integer past Python's 4,300 digits
    ],
)
def test_a_broken_file_is_one_warning_and_no_keymap(text: str | bytes):
    path = write(text)
    keymap, warning = read_keymap()
    assert keymap == {}
    assert warning is not None and "\n" not in warning and str(path) in warning


def test_what_cannot_be_used_is_named_and_the_rest_applies():
    write('"app.save" = "ctrl+w"\n"app.sav" = "f9"\n"app.open" = "ctrl w"\n"app.quit" = 3\n')
    keymap, warning = read_keymap()
    assert keymap == {"app.save": "ctrl+w"}
    assert warning is not None and "\n" not in warning
    assert "no binding 'app.sav'" in warning and "app.open" in warning and "app.quit" in warning


def test_a_broken_keymap_never_stops_the_dashboard():
    write("[app\nsave = 'ctrl+w'")
    _ns, _plans, messages, _broken = startup([])
    warnings = [text for severity, text in messages if "keymap.toml" in text]
    assert len(warnings) == 1 and _ns.keymap == {}


async def test_a_rebound_key_works_everywhere_it_is_shown(demo_app: Callable[..., TrainmemApp]):
    write('"app.save" = "ctrl+w"\n')
    ns, _plans, messages, _broken = startup([])
    assert not any("keymap" in text for _severity, text in messages)
    app = demo_app(keymap=ns.keymap)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        assert " ^w Save " in screen_lines(app)[-1]  # the key bar
        assert app.focused is app.screen.query_one("#f-model")  # even in a text field
        await pilot.press("ctrl+s")  # the old key does nothing now
        await settle(app, pilot)
        assert not isinstance(app.screen, PromptScreen)
        await pilot.press("ctrl+w")
        await settle(app, pilot)
        assert isinstance(app.screen, PromptScreen)
        await pilot.press("escape")
        await pilot.press("f1")
        await settle(app, pilot)
        assert isinstance(app.screen, HelpScreen)
        assert any("^w" in line and "Save the plans" in line for line in screen_lines(app))
