"""The length report: distribution figures against brute force, the memory it quotes against
the estimator, the suggested length against the device, and the CLI's text and JSON."""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parents[1] / "sources" / "dataset_files"))
from dataset_helpers import chat, tokenizer_folder, write_jsonl

from trainmem.cli.data_report import (
    add_data_arguments,
    data_report,
    lengths_json,
    render_lengths,
)
from trainmem.core.estimator import estimate
from trainmem.core.fit import Budget
from trainmem.core.plan import Plan
from trainmem.core.target import DeviceTarget
from trainmem.core.whatif import max_seq_len
from trainmem.planner.lengths import Lengths, length_report, scan_data
from trainmem.planner.report import build_report
from trainmem.sources.datasets import DatasetError
from trainmem.sources.resolve import resolve_model

spans = st.lists(
    st.tuples(st.integers(0, 60), st.integers(0, 60)).map(lambda t: (min(t), max(t))),
    max_size=4,
)


@given(st.lists(st.tuples(st.integers(1, 80), spans), min_size=1, max_size=30), st.integers(1, 90))
def test_distribution_matches_brute_force(examples, limit):
    d = Lengths()
    for total, answers in examples:
        d.add(total, tuple(answers))
    totals = sorted(t for t, _ in examples)
    assert d.examples == len(totals) and d.longest == totals[-1]
    for q in (50, 90, 95, 99, 100):
        assert d.percentile(q) == totals[max(1, math.ceil(q * len(totals) / 100)) - 1]
    assert d.longer_than(limit) == sum(t > limit for t in totals)
    assert d.kept_tokens(limit) == sum(min(t, limit) for t in totals)
    cut = sum(max(0, b - max(a, limit)) for _, ans in examples for a, b in ans)
    assert d.answer_cut(limit) == cut
    assert d.answer_tokens == sum(b - a for _, ans in examples for a, b in ans)


def test_padded_row_is_the_expected_longest_of_a_batch():
    d = Lengths()
    for n in (10, 20, 20, 40):
        d.add(n, ())
    values = [10, 20, 20, 40]
    for batch in (1, 2, 3):
        draws = list(itertools.product(values, repeat=batch))
        brute = sum(min(max(x), 30) for x in draws) / len(draws)
        assert d.padded_row(batch, 30) == pytest.approx(brute)


def _dataset(tmp_path: Path, lengths: list[int]) -> tuple[str, str]:
    """A chat dataset whose examples are ``n`` tokens long with the tiny tokenizer: a user
    turn of n - 6 words and an assistant turn of 1 (BOS, four markers and the answer)."""
    folder = tokenizer_folder(tmp_path / "tok")
    records = [chat(("user", n - 6), ("assistant", 1)) for n in lengths]
    return str(write_jsonl(tmp_path / "d.jsonl", records)), str(folder)


GPU = [DeviceTarget.gpu("GPU 24GB", 24 * 10**9)]


def test_report_figures_with_a_real_template(tmp_path: Path):
    lengths = [20] * 10 + [40] * 8 + [100, 200]
    data, tok = _dataset(tmp_path, lengths)
    scanned = scan_data(data, "7B", tok)
    assert scanned.exact and scanned.lengths.examples == 20
    plan = Plan(model="0.5B", seq_len=64, batch=2)
    r = length_report(build_report(plan, targets=GPU, solve=False), scanned)
    assert r.percentiles == {"p50": 20, "p90": 40, "p95": 100, "p99": 200, "max": 200}
    assert r.over == 2 and r.over_share == 0.1
    assert r.answer_cut == 2 * 2  # each long example loses its answer and the <|end|>
    spec = resolve_model("0.5B")
    by_label = {m.label: m for m in r.memory}
    for label, n in (("plan", 64), ("p95", 100), ("p99", 200)):
        expected = estimate(replace(plan.validated(), seq_len=n), spec, runtime="gpu")
        assert by_label[label].judged_bytes == expected.judged_bytes
        assert by_label[label].seq_len == n
    assert r.keep.seq_len == 100 and r.keep.fits
    assert not r.packing and r.real_tokens_per_micro_batch == pytest.approx(
        2 * sum(min(n, 64) for n in lengths) / 20
    )
    assert any("cuts 10.0% of examples" in w for w in r.warnings)
    packed = length_report(build_report(plan, targets=GPU, solve=False), scanned, packing=True)
    assert packed.real_tokens_per_micro_batch == 128
    assert packed.micro_batches_per_epoch == math.ceil(sum(min(n, 64) for n in lengths) / 128)


def test_below_the_typical_example_is_the_guides_fifth_mistake(tmp_path: Path):
    data, tok = _dataset(tmp_path, [100] * 5)
    report = build_report(Plan(model="0.5B", seq_len=50), targets=GPU, solve=False)
    r = length_report(report, scan_data(data, "7B", tok))
    assert r.over_share == 1.0
    assert "below the typical example (100 tokens, the median)" in r.warnings[0]
    assert r.answer_cut == 5 * 2


def test_a_length_that_does_not_fit_names_the_longest_that_does(tmp_path: Path):
    data, tok = _dataset(tmp_path, [1000] * 4 + [60_000])
    scanned = scan_data(data, "7B", tok)
    plan = Plan(model="0.5B", seq_len=1024, grad_ckpt=False).validated()
    spec = resolve_model("0.5B")
    usable = estimate(replace(plan, seq_len=4000), spec).judged_bytes  # fits 4,000 tokens
    small = [DeviceTarget.gpu("small", usable)]
    r = length_report(build_report(plan, targets=small, solve=False), scanned, keep_share=1.0)
    assert r.keep.seq_len == 60_000 and r.keep.fits is False
    longest = max_seq_len(plan, spec, Budget(usable))
    assert r.keep.longest_fitting == longest
    assert longest is not None and 1000 <= longest < 60_000
    assert r.keep.share_at_longest == pytest.approx(0.8)
    assert any("does not fit small" in w for w in r.warnings)


def test_every_line_malformed_is_one_error(tmp_path: Path):
    path = tmp_path / "d.jsonl"
    path.write_text('{"text": "a"}\n')
    ok = scan_data(str(path), "7B")
    assert ok.lengths.examples == 1
    path.write_text('{"text": 1}\n{"text": 2}\n')
    with pytest.raises(DatasetError, match=r"no example could be read \(2 malformed, at 1, 2"):
        scan_data(str(path), "7B")


def test_the_cli_flags_text_and_json(tmp_path: Path):
    data, tok = _dataset(tmp_path, [20, 30, 40])
    parser = argparse.ArgumentParser()
    add_data_arguments(parser)
    ns = parser.parse_args(["--data", data, "--tokenizer", tok, "--keep-share", "90%"])
    assert ns.keep_share == 0.9
    assert data_report(parser.parse_args([]), build_report(Plan(), targets=GPU)) is None
    plan = Plan(model="0.5B", seq_len=32).validated()
    r = data_report(ns, build_report(plan, targets=GPU, solve=False))
    assert r is not None
    text = render_lengths(r)
    assert "3 examples (messages)" in text and "p50 30" in text and "to keep 90%" in text
    out = lengths_json(r)
    json.dumps(out, allow_nan=False)
    assert out["lengths"]["max"] == 40 and out["longer_than_seq_len"]["examples"] == 1
    with pytest.raises(SystemExit):
        parser.parse_args(["--keep-share", "1.5"])
