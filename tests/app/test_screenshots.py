"""The README's screenshots are the snapshot tests' pictures, byte for byte, so they cannot
show an older screen: after a snapshot update, `make screenshots` copies them again."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("screenshots", ROOT / "scripts" / "screenshots.py")
assert spec is not None and spec.loader is not None
screenshots = importlib.util.module_from_spec(spec)
spec.loader.exec_module(screenshots)


@pytest.mark.parametrize("name", sorted(screenshots.PICTURES))
def test_screenshot_is_the_snapshot(name: str):
    snapshot = screenshots.SNAPSHOTS / screenshots.PICTURES[name]
    assert snapshot.exists(), f"no snapshot {snapshot.name}: is PICTURES up to date?"
    assert (screenshots.SCREENSHOTS / name).read_bytes() == snapshot.read_bytes(), (
        f"screenshots/{name} is not what the snapshot tests render: run `make screenshots`"
    )


def test_every_screenshot_comes_from_a_snapshot():
    assert {p.name for p in screenshots.SCREENSHOTS.glob("*.svg")} == set(screenshots.PICTURES)
