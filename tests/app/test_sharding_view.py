"""The estimate's multi-GPU lines: what is sharded and what every GPU holds whole, the node's
RAM need, and the fewest GPUs that fit."""

from __future__ import annotations

from trainmem.app.widgets.breakdown import sharding_text, summary_text, whatif_text
from trainmem.core.plan import Plan
from trainmem.planner.report import build_report

GiB = 2**30


def test_fsdp_shards_every_state_and_never_the_activations():
    plan = Plan(model="Qwen/Qwen2.5-7B", method="full", gpus=8, strategy="fsdp")
    report = build_report(plan, targets=None, solve=False, node_ram_bytes=64 * GiB)
    assert "8 GPUs, FSDP2 full-shard" in summary_text(report.estimate).plain
    shown = sharding_text(report).plain
    assert "sharded over 8: weights, gradients, optimizer state" in shown
    assert "whole on every GPU: activations, logits" in shown
    assert "gathered layers" in shown
    assert "Node RAM needs" in shown and "loading the model" in shown


def test_zero2_keeps_weights_whole_and_offload_needs_host_ram():
    plan = Plan(
        model="Qwen/Qwen2.5-7B", method="full", gpus=4, strategy="zero", zero=2, offload="optimizer"
    )
    report = build_report(plan, solve=False, node_ram_bytes=1024 * GiB)
    shown = sharding_text(report).plain
    assert "sharded over 4: gradients, optimizer state" in shown
    assert "whole on every GPU: weights, activations, logits" in shown
    assert "offloaded" in shown and "FITS" in shown.upper()


def test_one_gpu_shows_no_sharding_lines():
    report = build_report(Plan(model="0.5B"), solve=False, node_ram_bytes=64 * GiB)
    assert sharding_text(report).plain == ""


def test_a_plan_too_big_for_one_gpu_gets_the_fewest_gpus():
    plan = Plan(model="Qwen/Qwen2.5-7B", method="full", device="24GB")
    answers = build_report(plan, solve=True).what_if
    assert answers is not None and answers.fewest_gpus
    assert answers.fewest_gpus["ddp"] is None  # DDP divides nothing
    assert "fewest that fit: ddp none" in whatif_text(answers).plain  # one GPU per node
