"""The comparison as Markdown (for a PR or a lab notebook) and JSON (for scripts).

The JSON reuses ``Report.to_json()``, the stable object of ``trainmem-tui plan --json``, one
per plan, so scripts read one schema whichever way they got the numbers.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from trainmem.core.units import fmt_bytes
from trainmem.planner.report import Report

EXPORT_VERSION = 1


@dataclass(frozen=True)
class Row:
    """One plan in the comparison: its report, or why there is none."""

    name: str
    report: Report | None
    error: str | None = None


def verdict_cell(report: Report) -> str:
    if not report.fit:
        return "no device"
    parts = []
    for f in report.fit:
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
    ok = [r for r in rows if r.report is not None]
    if ok:
        lines += ["", "| Component | " + " | ".join(_md_escape(r.name) for r in ok) + " |"]
        lines.append("|---|" + "---:|" * len(ok))
        first = ok[0].report
        assert first is not None
        for i, comp in enumerate(first.estimate.components):
            cells = [fmt_bytes(r.report.estimate.components[i].bytes) for r in ok if r.report]
            lines.append(f"| {comp.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def to_json(rows: Sequence[Row]) -> str:
    doc: dict[str, Any] = {
        "version": EXPORT_VERSION,
        "plans": [
            {"name": r.name, "report": r.report.to_json() if r.report else None, "error": r.error}
            for r in rows
        ],
    }
    return json.dumps(doc, indent=2) + "\n"
