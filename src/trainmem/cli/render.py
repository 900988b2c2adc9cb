"""The readable `plan` output: a component table with bars, peaks, fit, what-if and advice."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trainmem.cli.output import console, safe
from trainmem.core.estimator import Estimate
from trainmem.core.fit import FitResult
from trainmem.core.units import fmt_bytes, fmt_count
from trainmem.planner.report import Report, WhatIf, host_matters
from trainmem.planner.summary import plan_details

BAR_WIDTH = 30
VERDICT_STYLE = {"fits": "bold green", "tight": "bold yellow", "too big": "bold red"}


def _bar(part: int, whole: int) -> str:
    filled = round(BAR_WIDTH * part / whole) if whole else 0
    return "█" * filled + "·" * (BAR_WIDTH - filled)


def render_report(report: Report, out: Console | None = None) -> None:
    out = out or console()
    est, spec = report.estimate, report.estimate.model
    plan = est.plan
    title = f"{spec.name}: {fmt_count(spec.params)} params, {', '.join(plan_details(plan))}"
    table = Table(title=safe(title), title_justify="left", show_edge=False)
    table.add_column("component")
    table.add_column("size", justify="right")
    table.add_column(f"share of the device peak ({fmt_bytes(est.device_bytes)})")
    for c in est.components:
        if c.bytes:
            label = c.name + (" (runtime)" if c.kind == "runtime" else "")
            table.add_row(label, fmt_bytes(c.bytes, digits=2), _bar(c.bytes, est.device_bytes))
    out.print(table)
    out.print(
        f"peak allocated {fmt_bytes(est.allocated_bytes)} ({est.peak_phase}), "
        f"device {fmt_bytes(est.device_bytes)}, "
        f"rule of thumb {fmt_bytes(est.rule_of_thumb_bytes)}, "
        f"trainable {fmt_count(est.trainable_params)}"
    )
    if est.device_peak is not None:
        out.print(device_peak_line(est))
    download = report.download
    out.print(
        safe(
            f"download {fmt_bytes(download.bytes)} ({download.how}); "
            f"training needs {download.ratio:.1f}x that"
        )
    )
    if report.cpu_only:
        out.print(
            Text.assemble(
                ("no GPU found:", "bold"),
                " the verdict below is for training on this CPU; give --device for the "
                "machine that will train (rtx-4090, h100-80gb, mac-36gb, 24GiB)",
            )
        )
    for fit, peak, target in zip(report.fit, report.peak_fit, report.targets, strict=True):
        prefix = "if trained on this CPU: " if report.cpu_only else ""
        line = Text.assemble(
            safe(f"{prefix}{target.name}"),
            f" ({target.kind}, usable {fmt_bytes(fit.usable_bytes)}"
            f"{f': {target.basis}' if target.basis else ''}): ",
            *_verdict(fit, "the rule of thumb" if plan.rule_of_thumb else "the device peak"),
        )
        if plan.rule_of_thumb:  # the rule alone could pass a peak that does not fit
            line.append("; ")
            line.append_text(Text.assemble(*_verdict(peak, "the device peak")))
        out.print(line)
    if report.first_failure:
        out.print(safe(f"on {report.targets[0].name} the step fails first {report.first_failure}"))
    for target, on in zip(report.targets, report.on_device, strict=True):
        if on.retried:
            out.print(safe(retry_line(target.name, on.bytes, on.unlimited)))
    host = report.host_fit
    if host is None and (plan.world > 1 or est.host_offloaded_bytes):
        out.print(
            f"node RAM needed {fmt_bytes(est.host_bytes_per_node)} (offloaded "
            f"{fmt_bytes(est.host_offloaded_bytes)}, loading {fmt_bytes(est.host_loading_bytes)}"
            f"); state the node's RAM to judge it (--device {_with_ram(report)})"
        )
    if host is not None and (plan.world > 1 or est.host_offloaded_bytes or host_matters(report)):
        out.print(
            Text.assemble(
                f"node RAM (usable {fmt_bytes(host.usable_bytes)}) for "
                f"{fmt_bytes(est.host_bytes_per_node)} (offloaded "
                f"{fmt_bytes(est.host_offloaded_bytes)}, loading "
                f"{fmt_bytes(est.host_loading_bytes)}): ",
                (host.verdict.upper(), VERDICT_STYLE[host.verdict]),
            )
        )
    w = report.what_if
    if w is not None:
        out.print(safe(f"on {w.device}: {what_if_line(w)}"))
        largest = w.largest_model
        if largest:
            best = ", ".join(f"{m} {largest[m] or 'none'}" for m in largest)
            out.print(safe(f"largest catalogue model that fits there: {best}"))
        if w.fewest_gpus:
            nodes = f" (nodes of {w.gpus_per_node} GPUs)" if w.gpus_per_node > 1 else ""
            out.print(f"fewest that fit there{nodes}: {w.fewest_text()}")
    if report.advice:
        aim = "For more headroom" if report.deciding_fit[0].fits else "To make it fit"
        out.print(Text(f"{aim}, in the guide's order:", style="bold"))
        for i, a in enumerate(report.advice, 1):
            after = "fits" if a.fits_after else "still too big"
            out.print(safe(f"  {i}. {a.action}: saves {fmt_bytes(a.saves_bytes)}, {after}"))
            if a.warning:
                out.print(safe(f"     {a.warning}", style="dim"))
    for note in est.notes:
        out.print(safe(f"note: {note}", style="dim"))


def device_peak_line(est: Estimate) -> str:
    """What the device peak is made of, from the allocator's simulation."""
    peak = est.device_peak
    assert peak is not None
    reserve = "measured reserve (calibrated)" if est.runtime_figures.calibrated else "reserved"
    context, nccl = est.component("CUDA context"), est.component("NCCL buffers")
    return (
        f"device peak = {reserve} {fmt_bytes(est.device_bytes - context - nccl)}"
        f" + CUDA context {fmt_bytes(context)}"
        + (f" + NCCL buffers {fmt_bytes(nccl)} (derived)" if nccl else "")
        + "; the simulated allocator "
        f"reserves {fmt_bytes(peak.reserved)} at {peak.moment}: blocks "
        f"{fmt_bytes(peak.allocated)} (cuBLAS workspaces {fmt_bytes(peak.workspaces)}), free in "
        f"its segments {fmt_bytes(peak.fragmentation)}"
        + (f", PYTORCH_CUDA_ALLOC_CONF={est.plan.alloc_conf}" if est.plan.alloc_conf else "")
    )


def retry_line(device: str, within: int, unlimited: int) -> str:
    """A plan over its device on the peak with memory to spare that the allocator's retry
    still runs: tight, and why."""
    return (
        f"on {device} the step fits only by the allocator's cache retry: with memory to spare "
        f"it would reserve {fmt_bytes(unlimited)}; short of new memory the simulated "
        "allocator frees its cached segments and retries (as PyTorch does before an "
        f"out-of-memory error) and runs it within {fmt_bytes(within)}. Tight: each retry "
        "waits for the GPU to finish (cudaFree), which slows the steps that hit it"
    )


def _verdict(fit: FitResult, judged: str) -> tuple[tuple[str, str], str]:
    room = "headroom" if fit.headroom_bytes >= 0 else "over by"
    return (
        (fit.verdict.upper(), VERDICT_STYLE[fit.verdict]),
        f", {room} {fmt_bytes(abs(fit.headroom_bytes))} (judged on {judged})",
    )


def what_if_line(w: WhatIf) -> str:
    return f"longest sequence that fits {w.seq_len_text()}, largest batch {w.batch_text()}"


def _with_ram(report: Report) -> str:
    """The plan's devices with a node RAM beside them, as --device takes it."""
    names = dict.fromkeys(t.name for t in report.targets)
    return ",".join([*names, "ram:SIZE"])
