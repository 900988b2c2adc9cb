"""The readable `plan` output: a component table with bars, peaks, fit, what-if and advice."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from trainmem.core.units import fmt_bytes, fmt_count
from trainmem.planner.report import Report

BAR_WIDTH = 30
VERDICT_STYLE = {"fits": "bold green", "tight": "bold yellow", "too big": "bold red"}


def _bar(part: int, whole: int) -> str:
    filled = round(BAR_WIDTH * part / whole) if whole else 0
    return "█" * filled + "·" * (BAR_WIDTH - filled)


def render_report(report: Report, console: Console | None = None) -> None:
    console = console or Console()
    est, spec = report.estimate, report.estimate.model
    plan = est.plan
    title = (
        f"{spec.name}: {fmt_count(spec.params)} params, {plan.method}, {plan.precision}, "
        f"seq {plan.seq_len:,} x batch {plan.batch}, "
        f"checkpointing {'on' if plan.grad_ckpt else 'off'}, {plan.optimizer}, "
        f"{plan.stack} stack, {plan.loss_kind} loss"
    )
    table = Table(title=title, title_justify="left", show_edge=False)
    table.add_column("component")
    table.add_column("size", justify="right")
    table.add_column(f"share of the device peak ({fmt_bytes(est.device_bytes)})")
    for c in est.components:
        if c.bytes:
            label = c.name + (" (runtime)" if c.kind == "runtime" else "")
            table.add_row(label, fmt_bytes(c.bytes, digits=2), _bar(c.bytes, est.device_bytes))
    console.print(table)
    console.print(
        f"peak allocated {fmt_bytes(est.allocated_bytes)} ({est.peak_phase}), "
        f"device {fmt_bytes(est.device_bytes)}, "
        f"rule of thumb {fmt_bytes(est.rule_of_thumb_bytes)}, "
        f"trainable {fmt_count(est.trainable_params)}"
    )
    download = report.download
    console.print(
        f"download {fmt_bytes(download.bytes)} ({download.how}); "
        f"training needs {download.ratio:.1f}x that"
    )
    judged = "the rule of thumb" if plan.rule_of_thumb else "the device peak"
    if report.cpu_only:
        console.print(
            "[bold]no GPU found:[/bold] the verdict below is for training on this CPU; "
            "give --device for the machine that will train (rtx-4090, h100-80gb, mac-36gb, 24GiB)"
        )
    for fit, target in zip(report.fit, report.targets, strict=True):
        verdict = Text(fit.verdict.upper(), style=VERDICT_STYLE[fit.verdict])
        room = "headroom" if fit.headroom_bytes >= 0 else "over by"
        prefix = "if trained on this CPU: " if report.cpu_only else ""
        console.print(
            Text.assemble(
                f"{prefix}{target.name} ({target.kind}, usable {fmt_bytes(fit.usable_bytes)}): ",
                verdict,
                f", {room} {fmt_bytes(abs(fit.headroom_bytes))} (judged on {judged})",
            )
        )
    host = report.host_fit
    if host is not None and (plan.world > 1 or est.host_offloaded_bytes):
        verdict = Text(host.verdict.upper(), style=VERDICT_STYLE[host.verdict])
        console.print(
            Text.assemble(
                f"node RAM (usable {fmt_bytes(host.usable_bytes)}) for "
                f"{fmt_bytes(est.host_bytes_per_node)} (offloaded "
                f"{fmt_bytes(est.host_offloaded_bytes)}, loading "
                f"{fmt_bytes(est.host_loading_bytes)}): ",
                verdict,
            )
        )
    w = report.what_if
    if w is not None:
        seq, batch = w.max_seq_len, w.max_batch
        console.print(
            f"on {w.device}: longest sequence that fits "
            f"{f'{seq:,}' if seq else 'none'}, largest batch {batch or 'none'}"
        )
        largest = w.largest_model
        if largest:
            best = ", ".join(f"{m} {largest[m] or 'none'}" for m in largest)
            console.print(f"largest catalogue model that fits there: {best}")
        if w.fewest_gpus:
            fewest = ", ".join(f"{name} {n or 'none'}" for name, n in w.fewest_gpus.items())
            console.print(f"fewest GPUs per node that fit there: {fewest}")
    if report.advice:
        console.print("[bold]To make it fit, in the guide's order:[/bold]")
        for i, a in enumerate(report.advice, 1):
            after = "fits" if a.fits_after else "still too big"
            console.print(f"  {i}. {a.action}: saves {fmt_bytes(a.saves_bytes)}, {after}")
            if a.warning:
                console.print(f"     [dim]{a.warning}[/dim]")
    for note in est.notes:
        console.print(f"[dim]note: {note}[/dim]")
