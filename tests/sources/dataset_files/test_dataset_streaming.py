"""A dataset many times larger than the memory its scan may use: peak Python allocations
(tracemalloc) stay bounded while every record is read. Counted, not timed."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from dataset_helpers import words

from trainmem.core.plan import Plan
from trainmem.planner.lengths import length_report, scan
from trainmem.planner.report import build_report
from trainmem.sources.datasets import open_dataset, records
from trainmem.sources.tokens import load_tokens

RECORDS = 40_000
BOUND = 3 * 2**20  # bytes of Python allocations the whole read may peak at


def _big(path: Path, as_array: bool) -> Path:
    """~16 MB: records of 25..49 words, one per line (or one per line inside an array)."""
    with open(path, "w") as f:
        f.write("[\n" if as_array else "")
        for i in range(RECORDS):
            rec = {
                "messages": [
                    {"role": "user", "content": words(25 + i % 25, i)},
                    {"role": "assistant", "content": words(40, i) * 2},
                ]
            }
            sep = ",\n" if as_array and i < RECORDS - 1 else "\n"
            f.write(json.dumps(rec) + sep)
        f.write("]\n" if as_array else "")
    return path


@pytest.mark.parametrize("as_array", [False, True], ids=["jsonl", "json-array"])
def test_a_large_file_is_scanned_in_bounded_memory(tmp_path: Path, monkeypatch, as_array: bool):
    monkeypatch.setattr(records, "CHUNK", 1 << 16)  # the JSON array's read size
    path = _big(tmp_path / ("big.json" if as_array else "big.jsonl"), as_array)
    assert path.stat().st_size > 5 * BOUND
    dataset, tokens = open_dataset(str(path)), load_tokens("7B")
    tracemalloc.start()
    try:
        result = scan(dataset, tokens, batch=64)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.lengths.examples == RECORDS
    assert result.malformed == 0
    assert peak < BOUND, f"peak {peak:,} bytes for a {path.stat().st_size:,}-byte file"
    report = length_report(build_report(Plan(model="7B", seq_len=512, device="24GB")), result)
    assert report.percentiles["max"] == max(report.percentiles.values())
