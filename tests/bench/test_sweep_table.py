"""docs/accuracy.md's sweep table (bench/accuracy/compare.py sweep_table) from the recorded
bench/results/trace-cpu-sweep.json: each traced sequence simulated again, and the batches whose
reserve falls below the one before found in the figures, not written in."""

from __future__ import annotations

import json
from pathlib import Path

from accuracy import compare

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "trace-cpu-sweep.json"


def rows() -> list[dict]:
    data = json.loads(RESULTS.read_text())
    assert data["kind"] == "sweep"
    return [compare.compare_trace(r) for r in data["records"]]


def test_the_sweep_names_the_batches_that_reserve_less_than_the_one_before():
    sweep = rows()
    traced = {r["plan"].batch: r["traced"].peak_reserved for r in sweep}
    falls = [b for b in sorted(traced) if b - 1 in traced and traced[b] < traced[b - 1]]
    text = "\n".join(compare.sweep_table(sweep))
    assert len([line for line in text.splitlines() if line.startswith("| ")]) == len(sweep) + 1
    named = text.split("before: traced ", 1)[1].split(";", 1)[0]
    assert [int(part.split(" ", 1)[0]) for part in named.split(", ")] == falls


def test_a_sweep_that_never_falls_says_none():
    sweep = sorted(rows(), key=lambda r: r["plan"].batch)[:3]  # batches 1-3 rise
    text = "\n".join(compare.sweep_table(sweep))
    assert "traced none; synthetic none" in text
    assert compare.sweep_table([]) == []
