"""A step too big on its device peak, run again within the GPU's memory: PyTorch's allocator
frees its wholly free cached segments and retries before it raises an out-of-memory error
(CUDACachingAllocator.cpp malloc), so the reports say where that retry would save the step,
and where it fails first when it would not. Verdicts stay on the peak with memory to spare."""

from __future__ import annotations

import io

from rich.console import Console

from trainmem.cli.render import render_report
from trainmem.core.estimator import device_peak_on, estimate
from trainmem.core.plan import Plan
from trainmem.core.target import DeviceTarget
from trainmem.planner.report import build_report
from trainmem.sources import catalog

MODEL = "HuggingFaceTB/SmolLM2-360M"
SPEC = catalog.find(MODEL).spec()  # type: ignore[union-attr]
PLAN = Plan(model=MODEL, method="full").validated()
EST = estimate(PLAN, SPEC)
CONTEXT = EST.component("CUDA context")


def _report(usable: int):
    target = DeviceTarget(name="GPU", kind="gpu", total_bytes=usable, usable_bytes=usable)
    return build_report(PLAN, SPEC, [target], solve=False)


def test_one_byte_short_of_the_peak_the_retry_runs_the_step_within_the_gpu():
    on = device_peak_on(EST, EST.device_bytes - 1, "gpu")
    assert on.retried and on.failure is None
    assert on.bytes <= EST.device_bytes - 1 < on.unlimited == EST.device_bytes
    report = _report(EST.device_bytes - 1)
    assert report.fit[0].verdict == "too big"  # judged on the peak with memory to spare
    assert report.first_failure is None
    assert report.to_json()["fit"][0]["device_peak"]["allocator_retries"] is True
    out = io.StringIO()
    render_report(report, Console(file=out, width=400))
    assert "frees its cached segments and retries" in out.getvalue()


def test_with_room_only_for_the_tensors_the_step_fails_and_says_where():
    usable = EST.allocated_bytes + CONTEXT
    on = device_peak_on(EST, usable, "gpu")
    assert not on.retried and on.failure is not None
    report = _report(usable)
    assert report.first_failure is not None and "tried to allocate" in report.first_failure
    assert report.to_json()["fit"][0]["device_peak"]["allocator_retries"] is False


def test_a_plan_that_fits_is_not_simulated_again():
    on = device_peak_on(EST, EST.device_bytes, "gpu")
    assert on == device_peak_on(EST, EST.device_bytes + 10**9, "gpu")
    assert on.bytes == EST.device_bytes and not on.retried and on.failure is None


def test_the_dashboard_marks_a_verdict_the_retry_would_change():
    from trainmem.app.widgets.breakdown import fit_text

    saved = fit_text(_report(EST.device_bytes - 1)).plain
    assert "TOO BIG" in saved.upper() and "cache retry" in saved
    assert "cache retry" not in fit_text(_report(EST.allocated_bytes + CONTEXT)).plain
