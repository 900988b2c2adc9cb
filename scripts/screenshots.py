"""Regenerate the README's screenshots from the deterministic demo machine.

    .venv/bin/python scripts/screenshots.py [OUT_DIR]   # default: screenshots/

Writes main-120x40.svg, main-80x24.svg, compare.svg and monitor.svg. The devices are the
fixture in ``trainmem.app.fixture`` (two RTX 4090s, one running a training job), state files
go to a temporary folder, and the cursor does not blink, so the output is the same each run.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MiB = 2**20


async def shoot(out: Path, name: str, size: tuple[int, int], keys: tuple[str, ...] = ()) -> None:
    from trainmem.app import make_app
    from trainmem.app.fixture import (
        ReplaySampler,
        demo_plan_set,
        demo_sampler_factory,
        demo_snapshot,
    )

    app = make_app(
        plan_set=demo_plan_set(),
        sampler_factory=demo_sampler_factory(),
        scan_hf_cache=False,
        cursor_blink=False,
    )
    async with app.run_test(size=size) as pilot:
        for key in ("_", *keys):
            if key == "low-memory":  # the run grows until GPU 1 is nearly full
                assert isinstance(app.state.sampler, ReplaySampler)
                app.state.sampler.push(demo_snapshot(train_used=23_600 * MiB, seq=2))
            elif key != "_":
                await pilot.press(key)
            await pilot.pause()
            await app.workers.wait_for_complete()
            await pilot.pause()
        app.save_screenshot(filename=f"{name}.svg", path=str(out))
    print(out / f"{name}.svg")


async def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    await shoot(out, "main-120x40", (120, 40))
    await shoot(out, "main-80x24", (80, 24))
    await shoot(out, "compare", (120, 40), ("f3",))
    await shoot(out, "monitor", (120, 40), ("f4", "low-memory"))


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "screenshots"
    with tempfile.TemporaryDirectory() as state:
        # Never read or write the developer's own session or Hugging Face cache.
        os.environ["TRAINMEM_STATE_DIR"] = state
        os.environ["HF_HUB_CACHE"] = state
        asyncio.run(main(target))
