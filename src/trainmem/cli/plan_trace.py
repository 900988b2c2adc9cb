"""`plan --trace`: the plan's real step traced by trainmem.probe.trace in a child process (the
probe is a leaf the CLI does not import; torch's time and memory stay out of this one), beside
the analytic device peak."""

from __future__ import annotations

import dataclasses
import json
import subprocess
from typing import Any

from trainmem.core.errors import PlanError
from trainmem.core.estimator import outside_allocator
from trainmem.core.units import fmt_bytes
from trainmem.sources.children import module_command

TIMEOUT_S = 900  # a 70B plan's two fake steps take minutes on a laptop; beyond this, stop
INTEGERS = (
    "reserved_bytes",
    "allocated_bytes",
    "allocated_peak_bytes",
    "workspace_bytes",
    "events",
)


def traced(report: Any) -> dict[str, Any]:
    """Trace the report's plan and set it beside the analytic device peak of its first device
    (the GPU's runtime figures: context, the family's cuBLAS workspaces)."""
    estimate = report.estimate
    figures = estimate.runtime_figures
    request = {
        "plan": estimate.plan.to_dict(),
        "spec": dataclasses.asdict(estimate.model),
        "family": figures.gpu_family,
    }
    try:
        done = subprocess.run(
            module_command("trainmem.probe.trace"),
            input=json.dumps(request),
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise PlanError("trace", f"the traced step took over {TIMEOUT_S} s; stopped") from None
    result = _result(done.stdout)
    if "error" in result:
        raise PlanError("trace", str(result["error"]).removeprefix("trace: ")[:300])
    outside = outside_allocator(estimate)  # the context and NCCL's buffers
    device = result["reserved_bytes"] + outside
    analytic = estimate.device_bytes_on("gpu")
    return {
        "device_peak_bytes": device,
        "reserved_bytes": result["reserved_bytes"],
        "allocated_bytes": result["allocated_bytes"],
        "allocated_peak_bytes": result["allocated_peak_bytes"],
        "fragmentation_bytes": result["reserved_bytes"] - result["allocated_bytes"],
        "workspace_bytes": result["workspace_bytes"],
        "context_bytes": figures.context_bytes,
        "nccl_bytes": outside - figures.context_bytes,
        "analytic_device_peak_bytes": analytic,
        "analytic_error_pct": round(100.0 * (analytic - device) / device, 2) if device else 0.0,
        "events": result["events"],
        "seconds": result["seconds"],
        "versions": result["versions"],
    }


def _result(stdout: str) -> dict[str, Any]:
    """The child's last line, checked: integers where integers belong, versions as text."""
    lines = stdout.strip().splitlines()
    try:
        result = json.loads(lines[-1]) if lines else None
    except ValueError:
        result = None
    if not isinstance(result, dict):
        raise PlanError("trace", "the tracing process gave no answer (is torch installed?)")
    if "error" in result:
        return {"error": str(result["error"])}
    ok = all(
        isinstance(result.get(k), int) and not isinstance(result.get(k), bool) and result[k] >= 0
        for k in INTEGERS
    )
    versions = result.get("versions")
    if not ok or not isinstance(versions, dict) or not isinstance(result.get("seconds"), float):
        raise PlanError("trace", "the tracing process answered something else than a trace")
    result["versions"] = {str(k)[:40]: str(v)[:40] for k, v in versions.items()}
    return result


def render(traced: dict[str, Any]) -> str:
    def gb(n: int) -> str:
        return fmt_bytes(n, "GB", 2)

    versions = ", ".join(f"{name} {version}" for name, version in traced["versions"].items())
    return (
        f"traced device peak: {gb(traced['device_peak_bytes'])} (reserved "
        f"{gb(traced['reserved_bytes'])}, of which {gb(traced['allocated_bytes'])} allocated "
        f"then and {gb(traced['fragmentation_bytes'])} cached free; tensors at most "
        f"{gb(traced['allocated_peak_bytes'])}; context {gb(traced['context_bytes'])}"
        + (f"; NCCL buffers {gb(traced['nccl_bytes'])} (derived)" if traced["nccl_bytes"] else "")
        + "); analytic "
        f"{gb(traced['analytic_device_peak_bytes'])} ({traced['analytic_error_pct']:+.1f}% from "
        f"the trace); {traced['events']} allocations and frees traced in "
        f"{traced['seconds']:.1f} s with {versions}"
    )
