"""One plan, estimated and judged: the data behind `plan --json`, its table and the dashboard."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainmem.core import whatif
from trainmem.core.architecture import ModelSpec
from trainmem.core.estimator import Estimate, estimate
from trainmem.core.fit import FitResult, judge_fit
from trainmem.core.plan import Plan
from trainmem.core.target import DeviceTarget
from trainmem.devices.target import parse_device_spec
from trainmem.sources import catalog
from trainmem.sources.resolve import resolve_model


@dataclass(frozen=True)
class Report:
    estimate: Estimate
    targets: tuple[DeviceTarget, ...]
    fit: tuple[FitResult, ...]
    advice: tuple[whatif.Advice, ...] = ()
    what_if: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        est, spec = self.estimate, self.estimate.model
        judged_on = "rule of thumb" if est.plan.rule_of_thumb else "device peak"
        return {
            "model": {
                "name": spec.name,
                "source": spec.source,
                "hf_id": spec.hf_id,
                "params": spec.params,
                "trainable_params": est.trainable_params,
                "active_params": spec.active_params,
                "assumed_dimensions": spec.assumed,
                "architecture": _architecture(spec),
                "catalogue": _catalogue(spec),
            },
            "plan": est.plan.to_dict(),
            "components": [
                {"name": c.name, "bytes": c.bytes, "kind": c.kind} for c in est.components
            ],
            "peak": {
                "allocated_bytes": est.allocated_bytes,
                "device_bytes": est.device_bytes,
                "phase": est.peak_phase,
                "phases": est.phases,
            },
            "rule_of_thumb_bytes": est.rule_of_thumb_bytes,
            "fit": [
                {
                    "device": f.device,
                    "kind": t.kind,
                    "total_bytes": t.total_bytes,
                    "usable_bytes": f.usable_bytes,
                    "verdict": f.verdict,
                    "headroom_bytes": f.headroom_bytes,
                    "judged_on": judged_on,
                }
                for f, t in zip(self.fit, self.targets, strict=True)
            ],
            "advice": [
                {
                    "action": a.action,
                    "saves_bytes": a.saves_bytes,
                    "fits_after": a.fits_after,
                    "warning": a.warning,
                    "changes": dict(a.changes),
                }
                for a in self.advice
            ],
            "what_if": self.what_if,
            "notes": list(est.notes),
        }


def _catalogue(spec: ModelSpec) -> dict[str, Any] | None:
    """The published figure and why it differs from the count, for catalogue models."""
    entry = catalog.find(spec.hf_id) if spec.source == "catalogue" and spec.hf_id else None
    if entry is None:
        return None
    return {"published": entry.published_text, "notes": list(entry.notes)}


def _architecture(spec: ModelSpec) -> dict[str, Any]:
    return {
        "model_type": spec.model_type,
        "hidden_size": spec.hidden,
        "num_hidden_layers": spec.layers,
        "num_attention_heads": spec.heads,
        "num_key_value_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "intermediate_size": spec.intermediate,
        "vocab_size": spec.vocab,
        "tie_word_embeddings": spec.tied_embeddings,
        "num_experts": spec.experts,
        "num_experts_per_tok": spec.experts_per_token,
    }


def build_report(
    plan: Plan,
    spec: ModelSpec | None = None,
    targets: list[DeviceTarget] | None = None,
    *,
    solve: bool = True,
) -> Report:
    """Estimate ``plan`` and judge it on ``targets`` (default: its ``device`` field).

    Advice and what-if answers are for the first device.
    """
    plan = plan.validated()
    spec = spec or resolve_model(plan.model)
    if targets is None:
        targets = parse_device_spec(plan.device)
    est = estimate(plan, spec)
    fits = tuple(judge_fit(est.judged_bytes, t.name, t.usable_bytes) for t in targets)
    if not solve or not targets:
        return Report(est, tuple(targets), fits)
    first = targets[0]
    usable = first.usable_bytes
    answers: dict[str, Any] = {
        "device": first.name,
        "max_seq_len": whatif.max_seq_len(plan, spec, usable),
        "max_batch": whatif.max_batch(plan, spec, usable),
        "largest_catalogue_model": whatif.largest_model(plan, usable, catalog.specs()),
    }
    advice = whatif.advice(plan, spec, usable, catalog.specs())
    return Report(est, tuple(targets), fits, tuple(advice), answers)
