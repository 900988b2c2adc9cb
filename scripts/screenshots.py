"""Regenerate the README's screenshots: they are the snapshot tests' own pictures.

    .venv/bin/python scripts/screenshots.py   # `make screenshots`

Runs tests/app/test_snapshots.py with --snapshot-update (the deterministic demo machine of
``trainmem.app.fixture``: two RTX 4090s, one running a training job; state files in a
temporary folder; no blinking cursor), then copies four of its SVGs to screenshots/. Look
at them before committing: tests/app/test_screenshots.py fails while the two differ, so the
README never shows an older screen than the tests do.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SNAPSHOTS = ROOT / "tests" / "app" / "__snapshots__" / "test_snapshots"
SCREENSHOTS = ROOT / "screenshots"
# screenshots/<name> <- the snapshot test's picture
PICTURES = {
    "main-120x40.svg": "test_plan_view[120x40].svg",
    "main-80x24.svg": "test_plan_view[80x24].svg",
    "compare.svg": "test_compare_view[120x40].svg",
    "monitor.svg": "test_monitor_view[120x40].svg",
}


def main() -> int:
    test = ROOT / "tests" / "app" / "test_snapshots.py"
    args = [sys.executable, "-m", "pytest", str(test), "-q", "-p", "no:cacheprovider"]
    done = subprocess.run([*args, "--snapshot-update"], cwd=ROOT, check=False)
    if done.returncode != 0:
        return done.returncode
    SCREENSHOTS.mkdir(exist_ok=True)
    for name, snapshot in PICTURES.items():
        shutil.copyfile(SNAPSHOTS / snapshot, SCREENSHOTS / name)
        print(SCREENSHOTS / name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
