"""A dataset's lengths against a plan: what its maximum length cuts and what it costs.

:func:`scan` reads a dataset once (streamed, counted in batches) into a :class:`Lengths`
distribution held as counters of distinct values, so its memory is bounded by the longest
example, not by the number of examples. :func:`length_report` then judges it for a plan, and
can be called again for another ``seq_len`` without reading the dataset again (the dashboard
does as the field is edited).

The report answers the guide's fifth mistake, cutting the maximum length below the typical
example so that the model never sees the end of its answers: the share of examples the
plan's length cuts, the answer tokens that truncation removes, the memory at that length and
at p95 / p99, and the smallest length that keeps a chosen share of examples whole, with
whether it fits the device.

Padding (docs/research/training-stacks.md, TRL 1.16 ``sft_trainer.py``): without packing the
collator pads each micro-batch to its longest example, capped at the maximum length, so the
step's memory peaks on a batch that holds one long example; with packing every row is filled
to the maximum length with real tokens.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from trainmem.core.architecture import ModelSpec
from trainmem.core.fit import Budget, judge_fit
from trainmem.core.plan import FIELDS_BY_NAME, Plan
from trainmem.core.target import DeviceTarget
from trainmem.core.whatif import Need, max_seq_len, need_on
from trainmem.planner import KEEP_SHARE
from trainmem.planner.report import Report
from trainmem.sources.chat_template import TemplateError
from trainmem.sources.datasets import Dataset, DatasetError, Example, Malformed, open_dataset
from trainmem.sources.tokens import Tokens, load_tokens

PERCENTILES = (50, 90, 95, 99)
SHOWN_LINES = 5  # malformed lines listed by number; all are counted
BATCH = 256  # examples counted per tokenizer call
BATCH_CHARS = 32 * 2**20  # and at most this much of their text held for one


@dataclass
class Lengths:
    """Token lengths of a dataset's examples and where their answers lie, as counters of
    distinct values (exact percentiles, memory bounded by the longest example)."""

    lengths: Counter[int] = field(default_factory=Counter)  # total tokens -> examples
    starts: Counter[int] = field(default_factory=Counter)  # answer span starts
    ends: Counter[int] = field(default_factory=Counter)  # answer span ends

    def add(self, total: int, answers: tuple[tuple[int, int], ...]) -> None:
        self.lengths[total] += 1
        for a, b in answers:
            if b > a:
                self.starts[a] += 1
                self.ends[b] += 1

    @property
    def examples(self) -> int:
        return self.lengths.total()

    @property
    def tokens(self) -> int:
        return sum(n * c for n, c in self.lengths.items())

    @property
    def answer_tokens(self) -> int:
        return sum(b * c for b, c in self.ends.items()) - sum(a * c for a, c in self.starts.items())

    @property
    def longest(self) -> int:
        return max(self.lengths, default=0)

    def percentile(self, q: float) -> int:
        """The nearest-rank percentile: the shortest length that ``q`` percent of the
        examples do not exceed."""
        rank = max(1, math.ceil(round(q * self.examples / 100, 9)))  # 95% of 20 is 19
        seen = 0
        for n in sorted(self.lengths):
            seen += self.lengths[n]
            if seen >= rank:
                return n
        return 0

    def longer_than(self, limit: int) -> int:
        return sum(c for n, c in self.lengths.items() if n > limit)

    def kept_tokens(self, limit: int) -> int:
        return sum(min(n, limit) * c for n, c in self.lengths.items())

    def answer_cut(self, limit: int) -> int:
        """Answer tokens at positions ``limit`` and beyond, which truncation removes:
        the sum over spans of ``|[max(a, limit), b)|`` is ``sum (b-limit)+ - sum (a-limit)+``,
        so the spans need not be kept in pairs."""
        over_ends = sum((b - limit) * c for b, c in self.ends.items() if b > limit)
        over_starts = sum((a - limit) * c for a, c in self.starts.items() if a > limit)
        return over_ends - over_starts

    def padded_row(self, batch: int, limit: int) -> float:
        """The expected longest example of a micro-batch of ``batch`` drawn at random, capped
        at ``limit``: what each row is padded to without packing. With F the share of
        examples of length <= n, the longest of ``batch`` is <= n with probability F^batch."""
        total, seen, expected, below = self.examples, 0, 0.0, 0.0
        for n in sorted(self.lengths):
            seen += self.lengths[n]
            at_most = (seen / total) ** batch
            expected += min(n, limit) * (at_most - below)
            below = at_most
        return expected


@dataclass(frozen=True)
class Scan:
    """One pass over a dataset: what was read and how it was counted."""

    dataset: str  # where it came from, for the report
    shape: str
    counting: str  # the tokenizer, or the approximation and its measured error
    exact: bool
    lengths: Lengths
    malformed: int
    malformed_lines: tuple[int, ...]  # the first SHOWN_LINES
    first_malformed: str | None  # why the first one is malformed
    notes: tuple[str, ...] = ()


def scan(dataset: Dataset, tokens: Tokens, *, batch: int = BATCH) -> Scan:
    """Count every example of ``dataset`` with ``tokens``; malformed records are counted
    with their lines, never fatal. DatasetError when not one example could be read."""
    shape, examples = dataset.examples()
    lengths = Lengths()
    bad: list[tuple[int, str]] = []
    bad_count = 0

    def flush(pending: list[tuple[int, Example]]) -> None:
        nonlocal bad_count
        for (where, _), measured in zip(
            pending, tokens.measure([ex for _, ex in pending]), strict=True
        ):
            if isinstance(measured, TemplateError):
                bad_count += 1
                if len(bad) < SHOWN_LINES:
                    bad.append((where, str(measured)))
            else:
                lengths.add(measured.total, measured.answers)
        pending.clear()

    pending: list[tuple[int, Example]] = []
    held = 0
    for where, ex in examples:
        if isinstance(ex, Malformed):
            bad_count += 1
            if len(bad) < SHOWN_LINES:
                bad.append((where, ex.why))
            continue
        pending.append((where, ex))
        held += ex.chars
        if len(pending) >= batch or held >= BATCH_CHARS:  # 256 records of 64 MiB: 16 GiB
            flush(pending)
            held = 0
    flush(pending)
    bad.sort()
    if lengths.examples == 0:
        shown = ", ".join(str(w) for w, _ in bad)
        first = f"; the first: {bad[0][1]}" if bad else ""
        raise DatasetError(
            f"{dataset.where}: no example could be read ({bad_count} malformed, at {shown}"
            f"{', ...' if bad_count > len(bad) else ''}{first})"
        )
    return Scan(
        dataset=dataset.where,
        shape=shape.name,
        counting=tokens.label,
        exact=tokens.exact,
        lengths=lengths,
        malformed=bad_count,
        malformed_lines=tuple(w for w, _ in bad),
        first_malformed=bad[0][1] if bad else None,
        notes=tokens.notes,
    )


def scan_data(text: str, model: str, tokenizer: str | None = None) -> Scan:
    """``--data TEXT`` counted with ``model``'s tokenizer (or ``--tokenizer``)."""
    return scan(open_dataset(text), load_tokens(model, tokenizer))


@dataclass(frozen=True)
class MemoryAt:
    """The judged memory of the plan at one maximum length, and its verdict on the device."""

    label: str  # "plan", "p95", "p99", "longest batch"
    seq_len: int
    judged_bytes: int
    verdict: str | None  # fits | tight | too big; None without a device


@dataclass(frozen=True)
class Keep:
    """The smallest maximum length that keeps ``share`` of the examples whole, and whether
    it fits; when it does not, the longest that does and the share that one keeps."""

    share: float
    seq_len: int
    judged_bytes: int
    fits: bool | None  # None without a device
    longest_fitting: int | None = None
    share_at_longest: float | None = None


@dataclass(frozen=True)
class LengthReport:
    scan: Scan
    seq_len: int
    batch: int
    packing: bool
    percentiles: dict[str, int]  # p50, p90, p95, p99, max
    mean: float
    over: int  # examples longer than seq_len
    answer_cut: int  # answer tokens truncation at seq_len removes
    real_tokens_per_micro_batch: float
    padded_tokens_per_micro_batch: float
    micro_batches_per_epoch: int
    memory: tuple[MemoryAt, ...]
    keep: Keep
    device: str | None
    warnings: tuple[str, ...]

    @property
    def over_share(self) -> float:
        return self.over / self.scan.lengths.examples

    @property
    def answer_cut_share(self) -> float:
        total = self.scan.lengths.answer_tokens
        return self.answer_cut / total if total else 0.0

    def to_json(self) -> dict[str, Any]:
        s, lengths = self.scan, self.scan.lengths
        return {
            "dataset": s.dataset,
            "shape": s.shape,
            "counting": s.counting,
            "exact_tokens": s.exact,
            "examples": lengths.examples,
            "tokens": lengths.tokens,
            "answer_tokens": lengths.answer_tokens,
            "malformed": {
                "count": s.malformed,
                "first_lines": list(s.malformed_lines),
                "first_reason": s.first_malformed,
            },
            "lengths": {**self.percentiles, "mean": round(self.mean, 1)},
            "seq_len": self.seq_len,
            "longer_than_seq_len": {"examples": self.over, "share": round(self.over_share, 4)},
            "answer_tokens_cut": {
                "tokens": self.answer_cut,
                "share": round(self.answer_cut_share, 4),
            },
            "packing": self.packing,
            "micro_batch": {
                "batch": self.batch,
                "real_tokens": round(self.real_tokens_per_micro_batch, 1),
                "padded_tokens": round(self.padded_tokens_per_micro_batch, 1),
                "per_epoch": self.micro_batches_per_epoch,
            },
            "memory": [
                {
                    "at": m.label,
                    "seq_len": m.seq_len,
                    "judged_bytes": m.judged_bytes,
                    "verdict": m.verdict,
                }
                for m in self.memory
            ],
            "keep": {
                "share": self.keep.share,
                "seq_len": self.keep.seq_len,
                "judged_bytes": self.keep.judged_bytes,
                "fits": self.keep.fits,
                "longest_fitting_seq_len": self.keep.longest_fitting,
                "share_whole_at_longest_fitting": self.keep.share_at_longest,
            },
            "device": self.device,
            "warnings": list(self.warnings),
            "notes": list(s.notes),
        }


LONGEST_PLAN = int(FIELDS_BY_NAME["seq_len"].high or 0)  # the seq_len field's upper bound


def length_report(
    report: Report,
    data: Scan,
    *,
    keep_share: float = KEEP_SHARE,
    packing: bool | None = None,
) -> LengthReport:
    """Judge ``data`` for the plan of ``report`` on its first device, on the same figures
    as the report (its budget: usable bytes, kind, runtime figures). ``packing`` defaults to
    the plan's own field."""
    if not 0 < keep_share <= 1:
        raise ValueError(f"--keep-share: {keep_share} is not a share in (0, 1]")
    plan, spec = report.estimate.plan, report.estimate.model
    target = report.targets[0] if report.targets else None
    budget = report.budgets[0] if report.budgets else Budget(0)
    packed = bool(getattr(plan, "packing", False)) if packing is None else packing
    lengths, limit = data.lengths, plan.seq_len
    n = lengths.examples

    def judged_on(seq_len: int) -> Need:
        # An example longer than any plan may be (one 40 MB text) is judged at that longest
        # plan: a lower bound of its need, which _warnings says.
        return need_on(replace(plan, seq_len=min(seq_len, LONGEST_PLAN)), spec, budget)

    def judged(seq_len: int) -> int:
        return judged_on(seq_len).bytes

    def memory_at(label: str, seq_len: int) -> MemoryAt:
        required, retried = judged_on(seq_len)
        verdict = (
            judge_fit(required, target.name, target.usable_bytes, retried).verdict
            if target
            else None
        )
        return MemoryAt(label, seq_len, required, verdict)

    pct = {f"p{q}": lengths.percentile(q) for q in PERCENTILES}
    memory = [memory_at("plan", limit)]
    longest_row = min(lengths.longest, limit)
    if not packed and longest_row < limit:  # no batch ever reaches the plan's length
        memory.append(memory_at("longest batch", longest_row))
    memory += [memory_at("p95", pct["p95"]), memory_at("p99", pct["p99"])]
    keep = _keep(plan, spec, target, budget, lengths, keep_share, judged)
    if packed:
        real = padded = float(plan.batch * limit)
        per_epoch = math.ceil(lengths.kept_tokens(limit) / (plan.batch * limit))
    else:
        real = plan.batch * lengths.kept_tokens(limit) / n
        padded = plan.batch * lengths.padded_row(plan.batch, limit)
        per_epoch = math.ceil(n / plan.batch)
    judged_data = LengthReport(
        scan=data,
        seq_len=limit,
        batch=plan.batch,
        packing=packed,
        percentiles={**pct, "max": lengths.longest},
        mean=lengths.tokens / n,
        over=lengths.longer_than(limit),
        answer_cut=lengths.answer_cut(limit),
        real_tokens_per_micro_batch=real,
        padded_tokens_per_micro_batch=padded,
        micro_batches_per_epoch=per_epoch,
        memory=tuple(memory),
        keep=keep,
        device=target.name if target else None,
        warnings=(),
    )
    return replace(judged_data, warnings=_warnings(judged_data))


def _keep(
    plan: Plan,
    spec: ModelSpec,
    target: DeviceTarget | None,
    budget: Budget,
    lengths: Lengths,
    share: float,
    judged: Any,
) -> Keep:
    length = lengths.percentile(share * 100)
    need = judged(length)
    if target is None:
        return Keep(share, length, need, None)
    if need <= target.usable_bytes:
        return Keep(share, length, need, True)
    longest = max_seq_len(plan, spec, budget)
    kept = None if longest is None else 1 - lengths.longer_than(longest) / lengths.examples
    return Keep(share, length, need, False, longest, kept)


def _warnings(r: LengthReport) -> tuple[str, ...]:
    out = []
    beyond = [m.label for m in r.memory if m.seq_len > LONGEST_PLAN]
    if r.keep.seq_len > LONGEST_PLAN:
        beyond.append(f"keeping {r.keep.share:.0%} whole")
    if beyond:
        out.append(
            f"{', '.join(beyond)}: longer than any plan ({LONGEST_PLAN:,} tokens); its memory "
            "is the need at that length, a lower bound"
        )
    typical = r.percentiles["p50"]
    if r.seq_len < typical:
        out.append(
            f"seq_len {r.seq_len:,} is below the typical example ({typical:,} tokens, the "
            f"median): {r.over_share:.0%} of examples are cut and the model never sees the end "
            "of their answers"
        )
    elif r.over_share > 1 - r.keep.share:
        out.append(
            f"seq_len {r.seq_len:,} cuts {r.over_share:.1%} of examples, more than the "
            f"{1 - r.keep.share:.0%} that --keep-share allows"
        )
    if r.answer_cut:
        out.append(
            f"truncation at {r.seq_len:,} removes {r.answer_cut:,} answer tokens "
            f"({r.answer_cut_share:.1%} of all answer tokens)"
        )
    if r.keep.fits is False:
        if r.keep.longest_fitting is None:
            out.append(f"no maximum length fits {r.device}")
        else:
            out.append(
                f"keeping {r.keep.share:.0%} of examples whole needs seq_len {r.keep.seq_len:,}, "
                f"which does not fit {r.device}; the longest that fits, "
                f"{r.keep.longest_fitting:,}, keeps {r.keep.share_at_longest:.1%} whole"
            )
    if r.scan.malformed:
        out.append(
            f"{r.scan.malformed:,} malformed records skipped (first at "
            f"{', '.join(map(str, r.scan.malformed_lines))}: {r.scan.first_malformed})"
        )
    return tuple(out)
