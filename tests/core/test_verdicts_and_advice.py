"""Verdicts that agree and advice that helps: a plan judged on the rule of thumb must also fit
on its device peak; the what-ifs stop at the model's context and a sane batch; advice only
offers changes that lower the need, each re-estimated, and smaller models that are smaller."""

from __future__ import annotations

import json
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from trainmem.cli.main import main
from trainmem.core.estimator import estimate
from trainmem.core.fit import Budget
from trainmem.core.plan import Plan
from trainmem.core.whatif import BATCH_LIMIT, MIN_SAVING_SHARE, advice, max_batch, max_seq_len, need
from trainmem.planner.report import build_report
from trainmem.sources import catalog
from trainmem.sources.resolve import resolve_model

GB = 10**9
# The README's example: the rule says 9 GB fits 16 GB, the device peak (18.8 GB) does not.
RULE_PASSES = ["plan", "--model", "8B", "--method", "qlora", "--device", "16GB"]


def test_the_rule_alone_never_passes_a_plan_whose_peak_does_not_fit(capsys):
    report = build_report(Plan(model="8B", method="qlora", device="16GB", rule_of_thumb=True))
    assert (
        report.fit[0].fits and report.fit[0].required_bytes == report.estimate.rule_of_thumb_bytes
    )
    assert not report.peak_fit[0].fits
    assert report.peak_fit[0].required_bytes == report.estimate.device_bytes
    assert not report.fits_everywhere
    assert main([*RULE_PASSES, "--rule-of-thumb", "--check"]) == 1
    out = capsys.readouterr().out
    assert "FITS" in out and "TOO BIG" in out and "(judged on the device peak)" in out
    assert main([*RULE_PASSES, "--rule-of-thumb", "--check", "--seq-len", "512"]) == 0


def test_a_rule_of_thumb_plan_needs_the_larger_of_its_two_figures():
    plan = Plan(model="8B", method="qlora", rule_of_thumb=True).validated()
    spec = resolve_model("8B")
    est = estimate(plan, spec)
    budget = Budget(16 * GB)
    assert need(plan, spec, budget) == max(est.rule_of_thumb_bytes, est.device_bytes)
    # Without the peak the rule (which ignores the length) would let any length "fit".
    longest = max_seq_len(plan, spec, budget)
    assert longest is not None and longest < 4096
    assert estimate(replace(plan, seq_len=longest), spec).device_bytes <= 16 * GB


def test_what_ifs_stop_at_the_models_context_and_a_sane_batch():
    spec = resolve_model("Qwen/Qwen2.5-0.5B")
    assert spec.context == 32768
    plan = Plan(model="Qwen/Qwen2.5-0.5B", method="qlora", seq_len=256, batch=1).validated()
    huge = Budget(10_000 * GB)
    assert max_seq_len(plan, spec, huge) == 32768
    assert max_batch(plan, spec, huge) == BATCH_LIMIT
    report = build_report(replace(plan, device="10000GB"), spec)
    assert report.what_if is not None
    assert report.what_if.seq_len_text() == "32,768 (the model's context)"
    assert report.what_if.batch_text() == f"{BATCH_LIMIT:,} or more"


def test_a_smaller_model_is_smaller():
    spec = resolve_model("Qwen/Qwen2.5-7B")  # 7.6B: Llama-3.1-8B (8.0B) is not smaller
    plan = Plan(model="Qwen/Qwen2.5-7B", method="full").validated()
    models = catalog.specs()
    for a in advice(plan, spec, Budget(40 * GB), models):
        if a.action.startswith("pick a smaller model"):
            picked = dict(a.changes)["model"]
            assert resolve_model(str(picked)).params < spec.params


@settings(max_examples=25, deadline=None)
@given(
    model=st.sampled_from(["Qwen/Qwen2.5-0.5B", "Qwen/Qwen2.5-7B", "meta-llama/Llama-3.1-8B"]),
    method=st.sampled_from(["full", "lora", "qlora"]),
    seq_len=st.sampled_from([256, 2048, 8192]),
    batch=st.sampled_from([1, 2, 8]),
    grad_ckpt=st.booleans(),
    device_gb=st.sampled_from([8, 16, 24, 40, 80]),
    rule=st.booleans(),
)
def test_advice_never_raises_the_need_and_each_is_re_estimated(
    model, method, seq_len, batch, grad_ckpt, device_gb, rule
):
    plan = Plan(
        model=model,
        method=method,
        seq_len=seq_len,
        batch=batch,
        grad_ckpt=grad_ckpt,
        rule_of_thumb=rule,
    ).validated()
    spec = resolve_model(model)
    budget = Budget(device_gb * GB)
    now = need(plan, spec, budget)
    for a in advice(plan, spec, budget, catalog.specs()):
        assert a.saves_bytes >= MIN_SAVING_SHARE * now > 0  # never "saves 0.0 GB" or less
        changes = dict(a.changes)
        after_spec = resolve_model(str(changes["model"])) if "model" in changes else spec
        after = need(replace(plan, **changes), after_spec, budget)
        assert a.saves_bytes == now - after
        assert a.fits_after == (after <= budget.usable_bytes)


def test_a_real_trl_command_gets_the_bf16_base_advice(capsys):
    """TRL's fp32 default comes back from --from-args as base_dtype fp32, not "auto": the
    biggest fix for a real TRL command must still be offered."""
    args = "trl sft --model_name_or_path Qwen/Qwen2.5-7B --use_peft --bf16"
    assert main(["plan", "--from-args", args, "--device", "24GB", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["plan"]["base_dtype"] == "fp32"
    bf16 = [a for a in out["advice"] if a["changes"] == {"base_dtype": "16-bit"}]
    assert bf16 and bf16[0]["saves_bytes"] > 0


def test_a_moe_qlora_script_is_told_to_skip_the_fp32_kbit_preparation():
    """PEFT's prepare_model_for_kbit_training casts transformers 5's unquantized fused experts
    to fp32: leaving it out of the script is the largest fix. Only where the script calls it:
    axolotl makes the call itself, TRL 1.16 makes none."""
    spec = resolve_model("openai/gpt-oss-20b")
    budget = Budget(80 * GB)
    plan = Plan(model="openai/gpt-oss-20b", method="qlora").validated()
    skip = [a for a in advice(plan, spec, budget) if a.changes == (("kbit_prep", False),)]
    assert skip and skip[0].action.startswith("skip prepare_model_for_kbit_training")
    # the experts (about 19B of gpt-oss-20b's 21B) go from fp32 to bf16
    assert skip[0].saves_bytes > 35 * GB and skip[0].fits_after
    for stack in ("axolotl", "trl", "unsloth"):
        other = replace(plan, stack=stack).validated()
        assert all(a.changes != (("kbit_prep", False),) for a in advice(other, spec, budget))
    off = replace(plan, kbit_prep=False)
    assert all(a.changes != (("kbit_prep", False),) for a in advice(off, spec, Budget(16 * GB)))
