"""The --data histogram in the plan view: bins of the dataset's lengths with the maximum
length marked, redrawn when the Seq length field changes."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from app_helpers import plain, settle
from textual.widgets import Input

from trainmem.app import TrainmemApp
from trainmem.app.widgets.lengths import LengthHistogram, histogram
from trainmem.planner.lengths import Lengths


def _lengths(values: list[int]) -> Lengths:
    lengths = Lengths()
    for n in values:
        lengths.add(n, ((n // 2, n),))  # the second half of each example is its answer
    return lengths


def test_bins_up_to_p99_and_the_marked_bin():
    text = histogram(_lengths([100] * 50 + [900] * 50), seq_len=500).plain
    rows = text.splitlines()
    assert len(rows) == 11  # ten bins and the summary
    assert rows[0].startswith("      0-99") and rows[0].rstrip().endswith("0")
    assert "◀ max length" in rows[5] and rows[5].startswith("    500-599")
    assert rows[9].split()[-1] == "50"  # the 900s fold into the last bin
    assert "50 of 100 examples (50.0%) longer than 500" in rows[-1]
    # answers are 50..100 and 450..900 (25,000 tokens): truncation at 500 cuts 400 of each
    # 900-token example's 450, 20,000 in all
    assert "80.0% of answer tokens cut" in rows[-1]


def test_an_empty_dataset_draws_nothing():
    assert histogram(Lengths(), 2048).plain == ""


async def test_the_plan_view_shows_the_dataset_against_the_seq_length(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    path = tmp_path / "train.jsonl"
    rows = [json.dumps({"text": "abcd" * n}) for n in [200] * 30 + [3000] * 10]
    path.write_text("\n".join(rows) + "\n")
    app = demo_app(data=str(path))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        widget = app.screen.query_one(LengthHistogram)
        assert app.state.scan is not None and widget.display
        shown = plain(widget)
        assert "longer than 2,048" in shown and "10 of 40 examples" in shown
        app.screen.query_one("#f-seq_len", Input).value = "4096"
        await settle(app, pilot)
        assert "0 of 40 examples (0.0%) longer than 4,096" in plain(widget)


async def test_a_missing_dataset_is_an_inline_error(
    demo_app: Callable[..., TrainmemApp], tmp_path: Path
) -> None:
    app = demo_app(data=str(tmp_path / "none.jsonl"))
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(app, pilot)
        assert app.state.scan is None
        assert any("none.jsonl" in n.message for n in app._notifications)
        assert not app.screen.query_one(LengthHistogram).display
