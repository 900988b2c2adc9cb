"""One plan, estimated and judged: the data behind `plan --json`, its table, the dashboard's
plan, compare and monitor views, the exporter and the dataset report.

``build_report`` is the one path: it takes every input (the plan, the model, the devices, this
machine's calibrations, the node's RAM) and returns a finished ``Report``; nothing re-costs a
report after it is built, so every front end shows the same figures for the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainmem.core.architecture import ModelSpec
from trainmem.core.calibration import Calibration
from trainmem.core.estimator import Estimate, OnDevice, device_peak_on, estimate
from trainmem.core.fit import Budget, FitResult, judge_fit
from trainmem.core.plan import Plan
from trainmem.core.target import DeviceTarget
from trainmem.devices.target import parse_device_spec
from trainmem.planner.calibration import figures_for
from trainmem.sources import catalog
from trainmem.sources.resolve import resolve_model

if TYPE_CHECKING:
    from trainmem.core.whatif import Advice

DTYPE_BYTES = {"fp32": 4, "fp16": 2, "bf16": 2}


class Stale(Exception):
    """build_report's ``stop`` said the report is no longer wanted (the plan was edited)."""


@dataclass(frozen=True)
class WhatIf:
    """What fits the first device: the longest sequence, the largest batch (None: none fits)
    and, per method, the largest catalogue model."""

    device: str
    max_seq_len: int | None
    max_batch: int | None
    largest_model: dict[str, str | None]
    # Per strategy and stage, the fewest GPUs per node whose per-GPU peak fits (None: none up
    # to the search's limit); empty for a plan on one GPU that fits it.
    fewest_gpus: dict[str, int | None] = field(default_factory=dict)
    # The same in nodes of the plan's GPUs per node (when a node has more than one GPU).
    fewest_nodes: dict[str, int | None] = field(default_factory=dict)
    gpus_per_node: int = 1
    nodes: int = 1  # the plan's
    # The searches' bounds: an answer equal to one means "at least this" (the model's context,
    # or the largest micro-batch searched), not a limit the memory sets.
    seq_len_limit: int = 0
    batch_limit: int = 0

    def seq_len_text(self) -> str:
        """The longest sequence for people: "none", or saying when it is the model's context
        (the search's bound) rather than a limit the memory sets."""
        seq = self.max_seq_len
        if not seq:
            return "none"
        return f"{seq:,} (the model's context)" if seq == self.seq_len_limit else f"{seq:,}"

    def batch_text(self) -> str:
        """The largest micro-batch for people: "none", or "N or more" at the search's bound."""
        batch = self.max_batch
        if not batch:
            return "none"
        return f"{batch:,} or more" if batch == self.batch_limit else f"{batch:,}"

    def fewest_text(self) -> str:
        """Per strategy, the fewest that fit, in the units a cluster is booked in: for a
        plan on one node, GPUs when that node is enough, else nodes of its GPUs; for a plan
        on several nodes, nodes."""

        def one(name: str, gpus: int | None) -> str:
            nodes = self.fewest_nodes.get(name)
            if self.nodes == 1 and gpus is not None and gpus <= self.gpus_per_node:
                return f"{name} {gpus} GPU{'s' if gpus > 1 else ''}"
            if self.gpus_per_node > 1:
                return (
                    f"{name} {nodes} node{'s' if nodes != 1 else ''}" if nodes else f"{name} none"
                )
            return f"{name} {f'{gpus} GPUs' if gpus else 'none'}"

        return ", ".join(one(name, n) for name, n in self.fewest_gpus.items())

    def to_json(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "max_seq_len": self.max_seq_len,
            "max_seq_len_bound": self.seq_len_limit,
            "max_batch": self.max_batch,
            "max_batch_bound": self.batch_limit,
            "largest_catalogue_model": dict(self.largest_model),
            "fewest_gpus": dict(self.fewest_gpus),
            "fewest_nodes": dict(self.fewest_nodes),
            "gpus_per_node": self.gpus_per_node,
        }


@dataclass(frozen=True)
class Download:
    """The guide's first two mistakes side by side: what the weights take to download, and
    what training needs (the judged figure), as a ratio."""

    bytes: int
    how: str  # where the figure comes from
    need_bytes: int

    @property
    def ratio(self) -> float:
        return self.need_bytes / self.bytes if self.bytes else 0.0


def download_size(est: Estimate) -> Download:
    """The weights as stored: safetensors headers give the exact count and dtype; otherwise
    the parameter count in the config's dtype."""
    spec = est.model
    if spec.assumed:
        how = f"{spec.params / 1e9:.3g}B parameters x {spec.dtype}"
    elif spec.exact_params is not None:
        how = "safetensors headers"
    else:
        how = f"config's parameters x {spec.dtype}"
    return Download(spec.params * DTYPE_BYTES.get(spec.dtype, 2), how, est.judged_bytes)


def _allocator_json(est: Estimate) -> dict[str, Any] | None:
    """The simulated caching allocator at its peak (None off a GPU)."""
    peak = est.device_peak
    if peak is None:
        return None
    return {
        "reserved_bytes": peak.reserved,
        "allocated_bytes": peak.allocated,
        "fragmentation_bytes": peak.fragmentation,
        "workspace_bytes": peak.workspaces,
        "moment": peak.moment,
        "events": peak.events,
        "alloc_conf": est.plan.alloc_conf,
        "reserve_calibrated": est.runtime_figures.calibrated,
    }


@dataclass(frozen=True)
class Report:
    estimate: Estimate  # on the first device's kind and runtime figures
    targets: tuple[DeviceTarget, ...]
    fit: tuple[FitResult, ...]  # per target, on the figure the plan is judged on
    advice: tuple[Advice, ...] = ()
    what_if: WhatIf | None = None
    host_fit: FitResult | None = None  # the node's RAM against host_bytes_per_node
    # Per target, on the detailed device peak: the same as ``fit`` unless the plan is judged
    # on the rule of thumb, whose verdict alone could pass a plan whose peak does not fit.
    peak_fit: tuple[FitResult, ...] = ()
    budgets: tuple[Budget, ...] = ()  # per target: usable bytes, kind, runtime figures
    # A GPU plan too big for the first target: where the simulated allocator fails first
    # ("at backward (last layer), step 2: tried to allocate ..."), as PyTorch would say it.
    first_failure: str | None = None
    simulated: bool = True  # False: the quick device peak, the allocator not yet simulated
    # Per target: the step run within its memory (trainmem.core.estimator.device_peak_on):
    # where it fails, or that it would fit only by the allocator freeing its cache mid-step.
    on_device: tuple[OnDevice, ...] = ()

    @property
    def deciding_fit(self) -> tuple[FitResult, ...]:
        """Per target, the verdict that decides: the device peak's or, for a plan judged on
        the rule of thumb, whichever of the two leaves less headroom. What a view with one
        verdict per device shows (compare, the export, the headline)."""
        if not self.peak_fit:
            return self.fit
        return tuple(
            min(f, p, key=lambda r: r.headroom_bytes)
            for f, p in zip(self.fit, self.peak_fit, strict=True)
        )

    @property
    def fits_everywhere(self) -> bool:
        """Each GPU on both figures, and the node's RAM where it is known."""
        return (
            all(f.fits for f in self.fit)
            and all(f.fits for f in self.peak_fit)
            and (self.host_fit is None or self.host_fit.fits)
        )

    @property
    def download(self) -> Download:
        return download_size(self.estimate)

    @property
    def cpu_only(self) -> bool:
        """Judged only on this computer's RAM: no GPU or unified memory was given or found."""
        return bool(self.targets) and all(t.kind == "system" for t in self.targets)

    def to_json(self) -> dict[str, Any]:
        est, spec = self.estimate, self.estimate.model
        judged_on = "rule of thumb" if est.plan.rule_of_thumb else "device peak"
        download = self.download
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
                "download_bytes": download.bytes,
                "download_from": download.how,
            },
            "plan": est.plan.to_dict(),
            "components": [
                {"name": c.name, "bytes": c.bytes, "kind": c.kind} for c in est.components
            ],
            "peak": {
                "allocated_bytes": est.allocated_bytes,
                "device_bytes": est.device_bytes,
                "device_kind": est.runtime_kind,
                "phase": est.peak_phase,
                "phases": est.phases,
                "allocator": _allocator_json(est),
                "first_failure": self.first_failure,
            },
            "rule_of_thumb_bytes": est.rule_of_thumb_bytes,
            "need_to_download_ratio": round(download.ratio, 3),
            "fit": [
                {
                    "device": f.device,
                    "kind": t.kind,
                    "total_bytes": t.total_bytes,
                    "usable_bytes": f.usable_bytes,
                    **({"usable_basis": t.basis} if t.basis else {}),
                    **({"wired_bytes": t.wired_bytes} if t.wired_bytes else {}),
                    "required_bytes": f.required_bytes,
                    "verdict": f.verdict,
                    "headroom_bytes": f.headroom_bytes,
                    "judged_on": judged_on,
                    "device_peak": {
                        "required_bytes": p.required_bytes,
                        "verdict": p.verdict,
                        "headroom_bytes": p.headroom_bytes,
                        "allocator_retries": o.retried,
                        "with_memory_to_spare_bytes": o.unlimited,
                    },
                    "runtime_figures": b.figures.source if t.kind == "gpu" else None,
                }
                for f, p, t, b, o in zip(
                    self.fit, self.peak_fit, self.targets, self.budgets, self.on_device, strict=True
                )
            ],
            "fits_everywhere": self.fits_everywhere,
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
            "host": {
                "bytes_per_node": est.host_bytes_per_node,
                "offloaded_bytes": est.host_offloaded_bytes,
                "loading_bytes": est.host_loading_bytes,
                "fit": None
                if self.host_fit is None
                else {
                    "usable_bytes": self.host_fit.usable_bytes,
                    "verdict": self.host_fit.verdict,
                    "headroom_bytes": self.host_fit.headroom_bytes,
                },
            },
            "what_if": self.what_if.to_json() if self.what_if else {},
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
        **spec.hf_dimensions(),
        "num_experts": spec.experts,
        "num_experts_per_tok": spec.experts_per_token,
    }


def host_matters(report: Report) -> bool:
    """Whether the node's RAM decides anything for a plan that offloads nothing to it: its
    verdict is not a plain fit (loading the model through too little RAM), which every
    front end then shows, since the plan's verdict counts it."""
    return report.host_fit is not None and report.host_fit.verdict != "fits"


def build_report(
    plan: Plan,
    spec: ModelSpec | None = None,
    targets: list[DeviceTarget] | None = None,
    *,
    calibrations: Mapping[str, Calibration] | None = None,
    solve: bool = True,
    node_ram_bytes: int | None = None,
    simulate: bool = True,
    stop: Callable[[], bool] | None = None,
) -> Report:
    """Estimate ``plan`` and judge it on ``targets`` (default: its ``device`` field), each
    with its own kind's runtime and, for a GPU this machine calibrated (``calibrations``, from
    `trainmem-tui calibrate`), that GPU's measured figures. The estimate shown is the first
    device's.

    Advice and what-if answers are for the first device, on the same figures. The node's
    host RAM is judged against ``node_ram_bytes``, else a system-RAM target given beside GPUs
    (which is then the node's RAM, not a device the step is judged on).

    ``simulate=False`` (the dashboard's per-keystroke figure while its worker simulates) gives
    the quick device peak without the allocator's simulation; such a report says so
    (``Report.simulated``) and is replaced by the simulated one when that is ready.

    ``stop`` is asked before each search (each tens of simulations for a large model); when
    it answers True, Stale is raised: a dashboard worker whose plan was edited meanwhile
    stops there instead of finishing every search for a plan nobody will see.
    """
    plan = plan.validated()
    spec = spec or resolve_model(plan.model)
    if targets is None:
        targets = parse_device_spec(plan.device)
    targets = [t.for_engine(plan.tooling.engine) for t in targets]  # MLX: macOS's working set
    # Beside GPUs, system RAM is the node's (``ram:2TB``, or this machine's under ``auto``):
    # the host RAM the run needs is judged on it, not the step, which runs on the GPUs.
    ram_targets = [t for t in targets if t.kind == "system"]
    if len(ram_targets) < len(targets) and any(t.kind == "gpu" for t in targets):
        targets = [t for t in targets if t.kind != "system"]
    else:
        ram_targets = []
    budgets = tuple(
        Budget(t.usable_bytes, t.kind, figures_for(t, calibrations or {})) for t in targets
    )
    first = budgets[0] if budgets else Budget(0)
    est = estimate(plan, spec, runtime=first.kind, figures=first.figures, simulate=simulate)
    on = tuple(device_peak_on(est, b.usable_bytes, b.kind, b.figures) for b in budgets)
    peaks = tuple(  # on the step as it runs there: a run the cache retry saves is tight
        judge_fit(o.bytes, t.name, b.usable_bytes, retried=o.retried)
        for o, t, b in zip(on, targets, budgets, strict=True)
    )
    fits = (  # the rule of thumb alone, or the device peak (Estimate.judged_bytes_on)
        tuple(
            judge_fit(est.rule_of_thumb_bytes, t.name, b.usable_bytes)
            for t, b in zip(targets, budgets, strict=True)
        )
        if plan.rule_of_thumb
        else peaks
    )
    ram = node_ram_bytes
    if ram is None and ram_targets:
        ram = ram_targets[0].usable_bytes
    host = None if ram is None else judge_fit(est.host_bytes_per_node, "node RAM", ram)
    failed = on[0].failure if on else None
    failure = f"at {failed[0]}: {failed[1].summary()}" if failed else None
    if not solve or not targets:
        return Report(
            est,
            tuple(targets),
            fits,
            host_fit=host,
            peak_fit=peaks,
            budgets=budgets,
            first_failure=failure,
            simulated=simulate or first.kind != "gpu",
            on_device=on,
        )
    from trainmem.core import whatif  # the searches: only when solving, not per keystroke

    models = catalog.specs()
    # the mlx stack plans one Mac (trainmem.core.plan _mlx_rules): no strategy to search
    torch = plan.tooling.engine == "torch"
    sharding_wanted = torch and (plan.world > 1 or not (fits[0].fits and peaks[0].fits))

    def search(answer: Callable[..., Any], *args: Any) -> Any:  # one search, if still wanted
        if stop is not None and stop():
            raise Stale
        return answer(*args)

    answers = WhatIf(
        device=targets[0].name,
        max_seq_len=search(whatif.max_seq_len, plan, spec, first),
        max_batch=search(whatif.max_batch, plan, spec, first),
        largest_model=search(whatif.largest_model, plan, first, models),
        fewest_gpus=search(whatif.fewest_gpus, plan, spec, first) if sharding_wanted else {},
        fewest_nodes=(
            search(whatif.fewest_nodes, plan, spec, first)
            if sharding_wanted and plan.gpus > 1
            else {}
        ),
        gpus_per_node=plan.gpus,
        nodes=plan.nodes,
        seq_len_limit=whatif.seq_len_limit(spec),
        batch_limit=whatif.BATCH_LIMIT,
    )
    advice = tuple(search(whatif.advice, plan, spec, first, models))
    return Report(
        est, tuple(targets), fits, advice, answers, host, peaks, budgets, failure, on_device=on
    )
