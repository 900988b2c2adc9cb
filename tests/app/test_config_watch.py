"""A training config watched by the dashboard: saving it re-reads the plan, a broken save keeps
the last plan, a plan edited in the dashboard is never overwritten, Ctrl+O opens configs."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from trainmem.app import TrainmemApp
from trainmem.app.config_watch import WatchedConfig
from trainmem.cli.dashboard_cmd import startup

AXOLOTL = (
    "base_model: Qwen/Qwen2.5-0.5B\nadapter: lora\nlora_target_linear: true\n"
    "sequence_len: {seq}\nmicro_batch_size: 2\n"
)


def _save(path: Path, text: str) -> None:
    """Write as an editor saves: a new file put in place, with a later mtime."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10_000_000))


async def _until(pilot, condition: Callable[[], bool], timeout: float = 10.0) -> None:
    for _ in range(int(timeout / 0.05)):
        if condition():
            return
        await asyncio.sleep(0.05)
        await pilot.pause()
    raise AssertionError("timed out")


def test_stamps_change_only_once_the_file_holds_still(tmp_path: Path) -> None:
    path = tmp_path / "a.yml"
    path.write_text(AXOLOTL.format(seq=1024))
    watch = WatchedConfig.of([path])
    assert not watch.changed()
    _save(path, AXOLOTL.format(seq=2048))
    assert not watch.changed()  # first sight of the new stamp: wait for one more poll
    assert watch.changed()
    assert not watch.changed()
    path.unlink()
    assert not watch.changed()  # missing: nothing to read yet


def test_the_dashboard_watches_its_from_files(tmp_path: Path) -> None:
    path = tmp_path / "a.yml"
    path.write_text(AXOLOTL.format(seq=1024))
    ns, plan_set, _messages, _broken = startup(["--from", str(path), "--batch", "4"])
    watch = ns.config_watch
    assert watch is not None and watch.files == (path,) and dict(watch.flags) == {"batch": 4}
    assert plan_set is not None and plan_set.plans[-1].plan == watch.plan
    _save(path, AXOLOTL.format(seq=512))
    plan, _unmodelled = watch.reread()
    assert (plan.seq_len, plan.batch) == (512, 4)  # the typed flag stays over the file


async def test_saving_the_config_re_estimates_and_a_broken_save_keeps_the_plan(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    path = tmp_path / "a.yml"
    path.write_text(AXOLOTL.format(seq=1024))
    ns, plan_set, _m, _b = startup(["--from", str(path)])
    app = demo_app(plan_set=plan_set, config_watch=ns.config_watch, interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        ws = app.state.workspace
        assert ws.current.plan.seq_len == 1024
        _save(path, AXOLOTL.format(seq=2048))
        await _until(pilot, lambda: ws.current.plan.seq_len == 2048)
        assert len(ws.plans) == 1
        _save(path, "base_model: [unclosed\n")
        await _until(pilot, lambda: any("a.yml" in n.message for n in app._notifications))
        assert ws.current.plan.seq_len == 2048  # the last good plan stays
        # edited in the dashboard: the next re-read opens beside it instead of over it
        ws.update_current(replace(ws.current.plan, batch=7))
        _save(path, AXOLOTL.format(seq=4096))
        await _until(pilot, lambda: len(ws.plans) == 2)
        assert ws.plans[0].plan.batch == 7 and ws.plans[1].plan.seq_len == 4096
        app._stop_watching.set()


async def test_ctrl_o_opens_a_training_config_as_a_new_watched_plan(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    path = tmp_path / "lf.yaml"
    path.write_text(
        "model_name_or_path: Qwen/Qwen2.5-0.5B\nstage: sft\nfinetuning_type: lora\n"
        "cutoff_len: 3000\n"
    )
    app = demo_app(interval=0.05)
    async with app.run_test(size=(120, 40)) as pilot:
        app._open_from(str(path))
        ws = app.state.workspace
        await _until(pilot, lambda: ws.current.plan.seq_len == 3000)
        assert ws.current.plan.stack == "llama-factory" and len(app.watches) == 1
        app._stop_watching.set()
