"""A step too big on its device peak, run again within the GPU's memory: PyTorch's allocator
frees its wholly free cached segments and retries before it raises an out-of-memory error
(CUDACachingAllocator.cpp malloc), so a step that runs by that retry fits (tight: at the
device's limit), and one that fails says where first. The searches count it the same way."""

from __future__ import annotations

import io

from rich.console import Console

from trainmem.cli.render import render_report
from trainmem.core.estimator import device_peak_on, estimate, fits_within, step_sizes
from trainmem.core.fit import Budget
from trainmem.core.plan import Plan
from trainmem.core.runtime import TYPICAL
from trainmem.core.target import DeviceTarget
from trainmem.core.whatif import max_batch, max_seq_len, need_on
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
    fit = report.fit[0]
    # judged on the step as it runs there: within the GPU, but at its limit
    assert fit.verdict == "tight" and fit.required_bytes == on.bytes
    assert report.first_failure is None
    device_peak = report.to_json()["fit"][0]["device_peak"]
    assert device_peak["allocator_retries"] is True
    assert device_peak["with_memory_to_spare_bytes"] == EST.device_bytes
    out = io.StringIO()
    render_report(report, Console(file=out, width=400))
    assert (
        "TIGHT" in out.getvalue() and "fits only by the allocator's cache retry" in out.getvalue()
    )


def test_the_searches_count_a_step_the_retry_runs_as_fitting():
    budget = Budget(EST.device_bytes - 1)
    assert need_on(PLAN, SPEC, budget) == (
        device_peak_on(EST, budget.usable_bytes, "gpu").bytes,
        True,
    )
    assert max_seq_len(PLAN, SPEC, budget) >= PLAN.seq_len
    assert max_batch(PLAN, SPEC, budget) >= PLAN.batch


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
    assert "TIGHT" in saved.upper() and "cache retry" in saved
    assert "cache retry" not in fit_text(_report(EST.allocated_bytes + CONTEXT)).plain


def test_one_simulation_within_the_gpu_gives_what_two_do():
    """fits_within (the searches' one run within the GPU) against device_peak_on (the peak
    with memory to spare, then the run within the GPU): the same figure and flag wherever
    the step runs there, and nothing where it fails."""
    quick = estimate(PLAN, SPEC, simulate=False)
    for usable in (EST.device_bytes + 10**9, EST.device_bytes, EST.device_bytes - 1):
        within = fits_within(quick, usable, TYPICAL)
        on = device_peak_on(EST, usable, "gpu")
        assert within is not None and (within.bytes, within.retried) == (on.bytes, on.retried)
    assert fits_within(quick, EST.allocated_bytes + CONTEXT, TYPICAL) is None  # it fails


def test_a_run_that_never_met_its_capacity_answers_for_any_it_fits():
    from trainmem.core import device_peak as dp

    step = step_sizes(PLAN, SPEC, lay=EST.layout)
    peak = EST.device_peak
    assert peak is not None and not peak.retried
    dp.clear_cache()
    roomy = dp.device_peak(PLAN, SPEC, step, EST.allocated_bytes, capacity=peak.reserved)
    assert roomy == peak and dp._device_peak.cache_info().misses == 1
    assert dp.device_peak(PLAN, SPEC, step, EST.allocated_bytes) is roomy  # no second run
    short = dp.device_peak(PLAN, SPEC, step, EST.allocated_bytes, capacity=peak.reserved - 1)
    assert short.retried and short.reserved < peak.reserved  # simulated: it meets the limit
    assert dp._device_peak.cache_info().misses == 2


def test_the_device_panes_judge_a_retried_plan_as_the_report_does():
    from trainmem.app.screens.plan import plan_mark

    usable = EST.device_bytes - 1
    report = _report(usable)
    mark = plan_mark(report)
    assert mark is not None and mark.retry_bytes == report.on_device[0].bytes
    # a GPU with the target's memory free: tight, as the verdict, not short
    assert mark.fit("gpu0", usable).verdict == report.fit[0].verdict == "tight"
    assert mark.fit("gpu0", EST.device_bytes).verdict != "too big"  # room to spare there
    assert mark.fit("gpu0", mark.retry_bytes - 1).verdict == "too big"
    assert plan_mark(_report(EST.device_bytes + 10**9)).retry_bytes is None  # fits outright


def test_a_search_settles_a_failing_probe_on_its_run_within_the_gpu():
    """A probe that fails within the GPU does not fit, whatever it would need with memory to
    spare: the searches take that verdict from the one simulation and simulate the need only
    where a guess reads it, for the same answers in fewer simulations."""
    from dataclasses import replace

    from trainmem.core import device_peak, whatif

    budget = Budget(int(EST.device_bytes * 0.8))
    for seq_len in (512, 1024, 1536, 2048, 4096):
        plan = replace(PLAN, seq_len=seq_len)
        fits = whatif.need(plan, SPEC, budget) <= budget.usable_bytes
        assert whatif._verdict(plan, SPEC, budget) == fits

    def measure(s: int, exact: bool) -> int:
        return whatif._measure(replace(PLAN, seq_len=s), SPEC, budget, exact)

    def search(verdict: bool) -> tuple[int | None, int]:
        device_peak.clear_cache()
        before = device_peak._device_peak.cache_info().misses
        found = whatif._search(
            measure,
            budget.usable_bytes,
            1,
            whatif.seq_len_limit(SPEC),
            largest=True,
            first=PLAN.seq_len,
            verdict=(lambda s: whatif._verdict(replace(PLAN, seq_len=s), SPEC, budget))
            if verdict
            else None,
        )
        return found, device_peak._device_peak.cache_info().misses - before

    (shortcut, fewer), (plain, more) = search(True), search(False)
    assert shortcut == plain == max_seq_len(PLAN, SPEC, budget)
    assert fewer < more
