"""20,000 plans: how long they take to open and compare. (Run on an idle machine.)

    .venv/bin/python bench/plans_bench.py [--plans 20000] [--out bench/results/plans_bench.txt]

Writes a plans file of N distinct plans, then measures: reading it (sources.plan_files),
the dashboard's first frame with it as the session (read in the background, so it should
not wait), the time until all plans are open, the first compare page, and paging.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

from app_bench import describe_machine  # the same machine line as the app bench

from trainmem.app import make_app
from trainmem.app.fixture import demo_sampler_factory
from trainmem.app.screens.compare import PAGE, CompareScreen
from trainmem.core.plan import Plan
from trainmem.sources.plan_files import NamedPlan, PlanSet, load_plans, save_plans


async def dashboard(path: Path, count: int) -> dict[str, float]:
    app = make_app(
        plans_path=path,
        load_in_background=path,
        sampler_factory=demo_sampler_factory(),
        scan_hf_cache=False,
    )
    out: dict[str, float] = {}
    start = time.perf_counter()
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        out["first frame (plans still loading)"] = time.perf_counter() - start
        while len(app.state.workspace.plans) < count:
            await asyncio.sleep(0.05)
        out["all plans open"] = time.perf_counter() - start
        t = time.perf_counter()
        await pilot.press("f3")
        await pilot.pause()
        assert isinstance(app.screen, CompareScreen)
        out[f"compare, first page of {PAGE}"] = time.perf_counter() - t
        t = time.perf_counter()
        await pilot.press("]")
        await pilot.pause()
        out["compare, next page"] = time.perf_counter() - t
        t = time.perf_counter()
        await pilot.press("down")
        await pilot.pause()
        out["compare, cursor down"] = time.perf_counter() - t
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--plans", type=int, default=20_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TRAINMEM_STATE_DIR"] = tmp
        path = Path(tmp) / "plans.toml"
        plans = tuple(
            NamedPlan("", Plan(seq_len=256 + i, batch=1 + i % 4), auto=True)
            for i in range(args.plans)
        )
        save_plans(path, PlanSet(plans))
        size = path.stat().st_size
        t = time.perf_counter()
        load_plans(path)
        read_s = time.perf_counter() - t
        timings = asyncio.run(dashboard(path, args.plans))
    lines = [
        f"{args.plans:,} plans ({size / 1e6:.1f} MB of TOML)",
        f"machine: {describe_machine()}",
        "reproduce: .venv/bin/python bench/plans_bench.py --out bench/results/plans_bench.txt",
        "",
        f"{'read and check the file (no UI)':<40}{read_s:8.2f} s",
        *(f"{name:<40}{seconds:8.2f} s" for name, seconds in timings.items()),
    ]
    report = "\n".join(lines) + "\n"
    print(report, end="")
    if args.out:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
