"""The comparison as Markdown (for a PR or a lab notebook) and JSON (for scripts).

The JSON reuses ``Report.to_json()``, the stable object of ``trainmem-tui plan --json``, one
per plan, so scripts read one schema whichever way they got the numbers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainmem.core.plan import PLAN_FIELDS, Plan
from trainmem.core.units import fmt_bytes
from trainmem.planner.report import Report

EXPORT_VERSION = 1


@dataclass(frozen=True)
class Row:
    """One plan in the comparison: its report, or why there is none."""

    name: str
    report: Report | None
    error: str | None = None


def field_rows(
    plans: Sequence[Plan], *, differing_only: bool = False
) -> list[tuple[str, list[str]]]:
    """(label, one cell per plan) for every plan field, as the form labels and shows it; with
    ``differing_only`` just the fields on which the plans differ."""
    rows = []
    for spec in PLAN_FIELDS:
        # "—" where a field does not apply (LoRA rank of a full fine-tune)
        cells = [
            spec.format(getattr(p, spec.name)) if spec.applies is None or spec.applies(p) else "—"
            for p in plans
        ]
        if not differing_only or differs(cells):
            rows.append((spec.label, cells))
    return rows


def differs(cells: Sequence[str]) -> bool:
    """Whether the plans differ here ("—", a field that does not apply, is no difference)."""
    return len(set(cells) - {"—"}) > 1


def verdict_cell(report: Report) -> str:
    if not report.fit:
        return "no device"
    parts = []
    for f in report.deciding_fit:
        sign = "+" if f.headroom_bytes >= 0 else "−"
        parts.append(f"{f.verdict} ({sign}{fmt_bytes(abs(f.headroom_bytes))}) on {f.device}")
    return "; ".join(parts)


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def to_markdown(rows: Sequence[Row]) -> str:
    lines = [
        "| Plan | Model | Method | Seq × batch | Allocated peak | Device peak | Rule of thumb "
        "| Verdict |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]
    for row in rows:
        if row.report is None:
            lines.append(f"| {_md_escape(row.name)} | | | | | | | error: {row.error} |")
            continue
        est = row.report.estimate
        p = est.plan
        lines.append(
            f"| {_md_escape(row.name)} | {_md_escape(p.model)} | {p.method} | "
            f"{p.seq_len:,} × {p.batch} | {fmt_bytes(est.allocated_bytes)} | "
            f"{fmt_bytes(est.device_bytes)} | {fmt_bytes(est.rule_of_thumb_bytes)} | "
            f"{_md_escape(verdict_cell(row.report))} |"
        )
    reports = [r.report for r in rows if r.report is not None]
    names = [r.name for r in rows if r.report is not None]
    if reports:
        # Every plan field, then every component; ≠ marks the rows where the plans differ.
        lines += ["", "| | " + " | ".join(_md_escape(n) for n in names) + " |"]
        lines.append("|---|" + "---:|" * len(reports))
        table = field_rows([r.estimate.plan for r in reports])
        for i, comp in enumerate(reports[0].estimate.components):
            table.append((comp.name, [fmt_bytes(r.estimate.components[i].bytes) for r in reports]))
        for label, cells in table:
            mark = "≠ " if differs(cells) else ""
            lines.append(
                f"| {mark}{_md_escape(label)} | " + " | ".join(map(_md_escape, cells)) + " |"
            )
    return "\n".join(lines) + "\n"


def to_json(rows: Sequence[Row]) -> str:
    doc: dict[str, Any] = {
        "version": EXPORT_VERSION,
        "plans": [
            {"name": r.name, "report": r.report.to_json() if r.report else None, "error": r.error}
            for r in rows
        ],
    }
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"
