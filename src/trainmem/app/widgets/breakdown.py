"""The estimate: a stacked bar of components, the peaks, the fit per device, what-if, advice.

The text builders are plain functions of a ``Report`` so the compare view and the Markdown
export say things the same way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widget import Widget
from textual.widgets import Static

from trainmem.app.widgets.bars import legend, stacked_bar, verdict_text
from trainmem.app.widgets.devices import AtWidth, short_device_name
from trainmem.core.estimator import Estimate
from trainmem.core.fit import FitResult
from trainmem.core.plan import Plan
from trainmem.core.units import fmt_bytes, fmt_count
from trainmem.planner.report import Report, WhatIf, download_size, host_matters

if TYPE_CHECKING:
    from trainmem.core.whatif import Advice


def short_model(name: str) -> str:
    return name.rstrip("/").rpartition("/")[2] or name


def summary_text(est: Estimate) -> Text:
    spec, plan = est.model, est.plan
    params = spec.params
    out = Text(no_wrap=False)
    out.append(short_model(spec.name), style="bold")
    out.append(f"  {fmt_count(params)} params · {fmt_count(est.trainable_params)} trainable")
    if params:
        out.append(f" ({100 * est.trainable_params / params:.3g}%)")
    method = plan.method.upper() if plan.method != "full" else "full fine-tune"
    if plan.trains_adapter:
        method += f" r{plan.lora_rank} {plan.lora_targets}"
    out.append(f"\n{method} · {plan.precision} · {plan.optimizer} · {plan.seq_len:,} tok × ")
    out.append(f"{plan.batch} · ckpt {'on' if plan.grad_ckpt else 'off'}")
    if est.layout.strategy != "single":
        out.append(f" · {sharding_label(plan)}")
    if plan.stack != "trainer" or plan.loss_kind != "standard":
        out.append(f" · {plan.stack} stack, {plan.loss_kind} loss")
    return out


def sharding_label(plan: Plan) -> str:
    """8 GPUs x 2 nodes, FSDP2 full-shard / ZeRO-3 offload optimizer / DDP."""
    where = f"{plan.gpus} GPU{'s' * (plan.gpus != 1)}"
    if plan.nodes > 1:
        where += f" × {plan.nodes} nodes"
    if plan.sharding == "fsdp":
        how = f"FSDP{plan.fsdp_version} {plan.fsdp}"
    elif plan.sharding == "zero":
        how = f"ZeRO-{plan.zero}" + (f" offload {plan.offload}" if plan.offload != "none" else "")
    else:
        how = "DDP"
    return f"{where}, {how}"


def sharding_text(report: Report) -> Text:
    """Per GPU: which parts are divided over the GPUs and which every GPU holds whole, and the
    node's host RAM (offloaded states, loading the model) against its RAM."""
    est = report.estimate
    out = Text()
    lay = est.layout
    if lay.strategy != "single":
        sharded = [
            name
            for name, on in (
                ("weights", lay.weights),
                ("gradients", lay.gradients),
                ("optimizer state", lay.optimizer),
            )
            if on
        ]
        out.append(f"Per GPU of {lay.world}: ", style="dim")
        out.append(f"sharded over {lay.shard}: " if sharded else "nothing sharded")
        if sharded:
            out.append(", ".join(sharded), style="bold")
        out.append(" · whole on every GPU: ", style="dim")
        whole = [n for n in ("weights", "gradients", "optimizer state") if n not in sharded]
        out.append(", ".join([*whole, "activations", "logits"]))
        extra = []
        if est.gathered_bytes:
            extra.append(f"gathered layers {fmt_bytes(est.gathered_bytes)} (in weights)")
        if est.bucket_bytes:
            extra.append(f"communication buckets {fmt_bytes(est.bucket_bytes)} (in gradients)")
        if extra:
            out.append("\n" + " · ".join(extra), style="dim")
    host = report.host_fit
    # one GPU loading through ample RAM needs no line; one whose RAM falls short does, as the
    # verdict counts it (Report.host_fit)
    if est.host_bytes_per_node and (out or est.host_offloaded_bytes or host_matters(report)):
        if out:
            out.append("\n")
        out.append("Node RAM needs ", style="dim")
        out.append(fmt_bytes(est.host_bytes_per_node), style="bold")
        parts = []
        if est.host_offloaded_bytes:
            parts.append(f"offloaded {fmt_bytes(est.host_offloaded_bytes)}")
        if est.host_loading_bytes:
            parts.append(f"loading the model {fmt_bytes(est.host_loading_bytes)}")
        if parts:
            out.append(f" ({', '.join(parts)})", style="dim")
        if host is not None:
            out.append(f" of {fmt_bytes(host.usable_bytes)}: ")
            out.append(verdict_text(host.verdict))
    return out


def peaks_text(est: Estimate, refused: bool = False) -> Text:
    """The peaks; ``refused``: the simulation refused the plan (a field says why), so no
    simulated figure is coming."""
    judged_rule = est.plan.rule_of_thumb
    out = Text()
    out.append("Allocated peak ", style="dim")
    out.append(fmt_bytes(est.allocated_bytes), style="bold")
    out.append(f" at {est.peak_phase}\n", style="dim")
    out.append("Device peak    ", style="dim")
    out.append(fmt_bytes(est.device_bytes), style="bold")
    out.append("  ◀ judged" if not judged_rule else "", style="dim")
    peak = est.device_peak
    if peak is not None:  # what the simulated caching allocator holds beyond the tensors
        out.append(
            f"\n  allocator     reserved {fmt_bytes(peak.reserved)}, "
            f"{fmt_bytes(peak.fragmentation)} of it free in segments, at {peak.moment}",
            style="dim",
        )
    elif refused:
        out.append("\n  allocator     not simulated: the highlighted field says why", style="dim")
    elif est.runtime_kind == "gpu" and not est.runtime_figures.calibrated:
        out.append("\n  allocator     simulating… (quick figure until then)", style="dim")
    out.append("\nRule of thumb  ", style="dim")
    out.append(fmt_bytes(est.rule_of_thumb_bytes), style="bold")
    out.append("  ◀ judged" if judged_rule else "  (the guide's figure)", style="dim")
    download = download_size(est)
    out.append("\nDownload       ", style="dim")
    out.append(fmt_bytes(download.bytes), style="bold")
    out.append(f"  training needs {download.ratio:.1f}x that", style="dim")
    return out


def fit_line(fit: FitResult, basis: str = "", retried: bool = False) -> Text:
    """The verdict on one device; ``basis``: why its usable figure is what it is (an MLX
    plan on a Mac: macOS's GPU working set), where the target says; ``retried``: it fits
    only by the allocator freeing its cache mid-step."""
    out = Text(no_wrap=True, overflow="ellipsis")
    out.append_text(verdict_text(fit.verdict))
    out.append(" " * max(1, 10 - len(fit.verdict)))
    if fit.verdict == "too big":
        out.append(f"over by {fmt_bytes(-fit.headroom_bytes)}")
    else:
        pct = 100 * fit.headroom_bytes / fit.usable_bytes if fit.usable_bytes else 0
        out.append(f"{fmt_bytes(fit.headroom_bytes)} headroom ({pct:.0f}%)")
    out.append(f"  {short_device_name(fit.device)} ", style="bold")
    out.append(f"({fmt_bytes(fit.usable_bytes)} usable)", style="dim")
    if basis:
        out.append(f" {basis}", style="dim")
    if retried:
        out.append("  (only by the allocator's cache retry)", style="dim")
    return out


def headline_text(report: Report) -> Text:
    """One line for the top of a narrow screen: the judged figure and the first verdict."""
    est = report.estimate
    out = Text(no_wrap=True, overflow="ellipsis")
    # the figure judged on the first device: the step as it runs there (the cache retry's)
    needed = report.deciding_fit[0].required_bytes if report.fit else est.judged_bytes
    out.append("needs ", style="dim")
    out.append(fmt_bytes(needed), style="bold")
    if report.cpu_only:
        out.append(" · no GPU here: set Device to the machine that will train", style="bold")
    elif report.fit:
        fit = report.deciding_fit[0]
        out.append(" · ")
        out.append_text(verdict_text(fit.verdict))
        out.append(f" on {short_device_name(fit.device)}")
    return out


CPU_ONLY_PROMPT = (
    "No GPU here. Which machine will train? Set Device (Advanced) to a preset "
    "(rtx-4090, h100-80gb, mac-36gb) or a size (24GiB, unified:36GB)."
)


def fit_text(report: Report) -> Text:
    if not report.fit:
        return Text("Waiting for devices…", style="dim")
    retried = [o.retried for o in report.on_device]
    lines = [
        fit_line(f, t.basis, r) for f, t, r in zip(report.fit, report.targets, retried, strict=True)
    ]
    if report.estimate.plan.rule_of_thumb:  # the rule alone could pass a peak that does not fit
        lines = [fit_line(f) + Text("  rule of thumb", style="dim") for f in report.fit] + [
            fit_line(f, retried=r) + Text("  device peak", style="dim")
            for f, r in zip(report.peak_fit, retried, strict=True)
        ]
    if report.cpu_only:
        # The guide's third mistake: a PC's RAM is not the GPU the run will use.
        lines = [
            Text(CPU_ONLY_PROMPT, style="bold"),
            *(Text("if trained on this CPU: ", style="dim") + line for line in lines),
        ]
    return Text("\n").join(lines)


def whatif_text(answers: WhatIf) -> Text:
    out = Text()
    out.append(f"On {short_device_name(answers.device)}: ", style="dim")
    out.append("longest sequence ")
    out.append(answers.seq_len_text(), style="bold")
    out.append(" · largest batch ")
    out.append(answers.batch_text(), style="bold")
    if answers.fewest_gpus:
        nodes = f" (nodes of {answers.gpus_per_node} GPUs)" if answers.gpus_per_node > 1 else ""
        out.append(f"\nfewest that fit{nodes}: ", style="dim")
        out.append(answers.fewest_text().replace(", ", " · "))
    largest = answers.largest_model
    if largest:
        out.append("\nlargest catalogue model: ", style="dim")
        out.append(
            " · ".join(f"{m} {short_model(name) if name else '—'}" for m, name in largest.items())
        )
    return out


def advice_text(advice: tuple[Advice, ...], device: str) -> Group:
    """Numbered remedies; a grid so wrapped lines stay indented under their number."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(ratio=1)
    for i, a in enumerate(advice, 1):
        line = Text(a.action)
        line.append(f"  −{fmt_bytes(a.saves_bytes)}", style="bold")
        line.append("  → fits" if a.fits_after else "  → still too big", style="dim")
        if a.warning:
            line.append(f"\n{a.warning}", style="dim italic")
        grid.add_row(f"{i}.", line)
    return Group(Text(f"To fit {short_device_name(device)}:", style="bold"), grid)


class EstimateBar(Widget):
    """The stacked bar and its legend, drawn to the widget's width."""

    DEFAULT_CSS = "EstimateBar { height: auto; }"

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.estimate: Estimate | None = None

    def show(self, est: Estimate) -> None:
        self.estimate = est
        self.refresh(layout=True)

    def render(self) -> RenderableType:
        return AtWidth(self._lines)

    def _lines(self, width: int) -> list[Text]:
        if self.estimate is None:
            return [Text("")]
        comps = self.estimate.components
        return [stacked_bar(comps, max(10, width)), legend(comps, max(10, width))]


class Breakdown(Vertical):
    """Everything about the selected plan's estimate; holds the last valid one on errors."""

    estimate: Estimate | None = None  # the one shown

    def compose(self) -> ComposeResult:
        yield Static(id="summary", markup=False)
        yield EstimateBar(id="estimate-bar")
        yield Static(id="peaks", markup=False)
        yield Static(id="fit", markup=False)
        yield Static(id="sharding", markup=False)
        yield Static(id="whatif", markup=False)
        yield Static(id="advice", markup=False)
        yield Static(id="notes", markup=False)

    def show(self, report: Report) -> None:
        est = self.estimate = report.estimate
        self.query_one("#summary", Static).update(summary_text(est))
        self.query_one(EstimateBar).show(est)
        self.query_one("#peaks", Static).update(peaks_text(est))
        self.query_one("#fit", Static).update(fit_text(report))
        shards = sharding_text(report)
        self.query_one("#sharding", Static).update(shards)
        self.query_one("#sharding", Static).display = bool(shards)
        solving = bool(report.fit)
        self.query_one("#whatif", Static).update(
            Text("Working out what fits…", style="dim") if solving else ""
        )
        self.query_one("#whatif", Static).display = solving
        self.query_one("#advice", Static).display = False
        notes = self.query_one("#notes", Static)
        notes.update(Text("\n".join(f"* {n}" for n in est.notes), style="dim"))
        notes.display = bool(est.notes)

    def stop_solving(self) -> None:
        """No answers are coming (the simulation refused the plan): no "Working out..." and
        no "simulating..."."""
        self.query_one("#whatif", Static).display = False
        if self.estimate is not None:  # the refused plan's own quick figures, not the last valid
            self.query_one("#peaks", Static).update(peaks_text(self.estimate, refused=True))
            self.border_subtitle = "this plan's quick figures — fix the highlighted field"

    def show_solution(self, report: Report) -> None:
        """The what-if answers and advice for the first device (computed off the UI thread)."""
        whatif = self.query_one("#whatif", Static)
        if report.what_if is not None:
            whatif.update(whatif_text(report.what_if))
        whatif.display = report.what_if is not None
        advice = self.query_one("#advice", Static)
        if report.advice and report.fit and report.deciding_fit[0].verdict != "fits":
            advice.update(advice_text(report.advice, report.fit[0].device))
            advice.display = True
        else:
            advice.display = False

    def set_stale(self, stale: bool) -> None:
        """Dim the figures while the form holds an invalid entry: they are the last valid ones."""
        self.set_class(stale, "-stale")
        self.border_subtitle = "last valid estimate — fix the highlighted field" if stale else ""
