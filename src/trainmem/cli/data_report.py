"""`plan --data FILE`: the dataset's lengths against the plan, as text and as JSON.

Wired into `plan` by cli/plan_cmd.py: :func:`add_data_arguments` adds the flags,
:func:`data_report` scans the dataset (None without ``--data``), :func:`render_lengths` and
:func:`lengths_json` show the result.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from trainmem.core.text import visible
from trainmem.core.units import fmt_bytes, shown
from trainmem.planner import KEEP_SHARE

if TYPE_CHECKING:  # the dataset readers load when --data is given, not with the parser
    from trainmem.planner.lengths import LengthReport
    from trainmem.planner.report import Report


def _share(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is not a share such as 0.95 or 95%"
        ) from None
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a share in (0, 1]")
    return value


def add_data_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("dataset")
    group.add_argument(
        "--data",
        metavar="FILE",
        help="a dataset (JSON Lines, JSON, CSV/TSV, Parquet, Arrow, a save_to_disk folder, or "
        "org/name[/config][:split] in the datasets cache): its token lengths against the plan",
    )
    group.add_argument(
        "--keep-share",
        type=_share,
        default=None,
        metavar="SHARE",
        help="with --data: the share of examples the suggested maximum length keeps whole "
        f"(default {KEEP_SHARE:g})",
    )
    group.add_argument(
        "--tokenizer",
        metavar="PATH",
        help="with --data: a tokenizer.json or a folder holding one (default: the model's own, "
        "from its folder or the Hugging Face cache; else an approximation)",
    )


def data_report(ns: argparse.Namespace, report: Report) -> LengthReport | None:
    """The ``--data`` report for the plan of ``report``, on its figures (None without
    ``--data``); ValueError, one line, for a dataset or tokenizer that cannot be read."""
    text = getattr(ns, "data", None)
    keep, tokenizer = getattr(ns, "keep_share", None), getattr(ns, "tokenizer", None)
    if text is None:
        given = [f for f, v in (("--keep-share", keep), ("--tokenizer", tokenizer)) if v]
        if given:  # a flag that would change nothing is a mistake to say, not to ignore
            verb = "need" if len(given) > 1 else "needs"
            raise ValueError(f"{' and '.join(given)} {verb} --data (a dataset to measure)")
        return None
    from trainmem.planner.lengths import length_report, scan_data

    scanned = scan_data(text, report.estimate.plan.model, tokenizer)
    return length_report(report, scanned, keep_share=KEEP_SHARE if keep is None else keep)


def lengths_json(report: LengthReport) -> dict[str, Any]:
    return report.to_json()


def render_lengths(r: LengthReport) -> str:
    """The report as plain lines, for `plan` without --json."""
    s, p = r.scan, r.percentiles
    lines = [
        f"dataset: {s.dataset}, {s.lengths.examples:,} examples ({s.shape})"
        + (f", {s.malformed:,} malformed skipped" if s.malformed else ""),
        f"tokens: {s.counting}",
        *(f"  note: {n}" for n in s.notes),
        "lengths: "
        + ", ".join(f"{k} {v:,}" for k, v in p.items())
        + f", mean {r.mean:,.0f} tokens",
        f"seq_len {r.seq_len:,}: {r.over:,} examples longer ({r.over_share:.1%}), "
        f"{r.answer_cut:,} answer tokens cut ({r.answer_cut_share:.1%} of answer tokens)",
    ]
    if r.packing:
        lines.append(
            f"packing: {r.real_tokens_per_micro_batch:,.0f} real tokens per micro-batch "
            f"(batch {r.batch} x {r.seq_len:,}), {r.micro_batches_per_epoch:,} micro-batches "
            "per epoch"
        )
    else:
        lines.append(
            f"no packing: {r.real_tokens_per_micro_batch:,.0f} real tokens per micro-batch, "
            f"padded to {r.padded_tokens_per_micro_batch:,.0f} on average (batch {r.batch}); "
            f"{r.micro_batches_per_epoch:,} micro-batches per epoch"
        )
    on = f" on {r.device}" if r.device else ""
    lines.append(f"memory{on}:")
    for m in r.memory:
        verdict = f"  {m.verdict}" if m.verdict else ""
        lines.append(
            f"  at {m.label:<13} {m.seq_len:>9,} tokens  {fmt_bytes(m.judged_bytes)}{verdict}"
        )
    k = r.keep
    if k.fits is False:
        fitting = (
            f"; the longest that fits is {k.longest_fitting:,}, keeping "
            f"{k.share_at_longest:.1%} whole"
            if k.longest_fitting is not None
            else "; no length fits"
        )
        lines.append(
            f"to keep {k.share:.0%} of examples whole: seq_len {k.seq_len:,} "
            f"({fmt_bytes(k.judged_bytes)}), which does not fit{fitting}"
        )
    else:
        fits = " and fits" if k.fits else ""
        lines.append(
            f"to keep {k.share:.0%} of examples whole: seq_len {k.seq_len:,} "
            f"({fmt_bytes(k.judged_bytes)}){fits}"
        )
    lines += [f"warning: {w}" for w in r.warnings]
    # file names, notes and warnings may quote the data: shown, never obeyed by the terminal
    return "\n".join(visible(line) for line in lines)
