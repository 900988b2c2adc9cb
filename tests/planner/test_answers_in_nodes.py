"""Answers in nodes (issue 18): the fewest nodes of the plan's GPUs per node that fit, the
GPUs when one node is enough, and the node's host RAM stated with ``ram:SIZE`` and judged."""

from __future__ import annotations

import json
from dataclasses import replace

from trainmem.cli.main import main
from trainmem.core.estimator import estimate
from trainmem.core.fit import Budget
from trainmem.core.plan import Plan
from trainmem.core.whatif import SHARDINGS, fewest_gpus, fewest_nodes
from trainmem.devices.target import parse_device_spec
from trainmem.planner.report import build_report
from trainmem.sources.resolve import resolve_model

MODEL = "meta-llama/Llama-3.3-70B-Instruct"
FULL_FSDP = ["--model", MODEL, "--method", "full", "--gpus", "8", "--strategy", "fsdp"]


def test_the_fewest_nodes_are_the_smallest_count_of_whole_nodes_that_fit():
    spec = resolve_model(MODEL)
    plan = Plan(model=MODEL, method="full", gpus=8, strategy="fsdp").validated()
    budget = Budget(80 * 10**9)
    nodes = fewest_nodes(plan, spec, budget)
    gpus = fewest_gpus(plan, spec, budget)
    for name, n in nodes.items():
        if n is None:
            continue
        sharded = replace(plan, **SHARDINGS[name])  # type: ignore[arg-type]
        assert estimate(replace(sharded, nodes=n), spec).device_bytes <= budget.usable_bytes
        if n > 1:
            assert estimate(replace(sharded, nodes=n - 1), spec).device_bytes > budget.usable_bytes
        more = gpus[name]  # as many GPUs per node as it takes on one node
        assert more is None or more > 8 * (n - 1)
    assert nodes["fsdp full-shard"] is not None and nodes["fsdp full-shard"] > 1
    assert nodes["ddp"] is None  # replicas never shrink


def test_ram_beside_gpus_is_the_nodes_ram_not_a_device(capsys):
    targets = parse_device_spec("h100-80gb,ram:2TB")
    assert [t.kind for t in targets] == ["gpu", "system"]
    plan = Plan(model=MODEL, method="full", gpus=8, strategy="fsdp", device="h100-80gb,ram:2TB")
    report = build_report(plan, solve=False)
    assert [t.kind for t in report.targets] == ["gpu"]  # the step is judged on the GPU only
    assert report.host_fit is not None and report.host_fit.usable_bytes == 2 * 10**12
    assert report.host_fit.required_bytes == report.estimate.host_bytes_per_node


def test_the_text_answers_in_nodes_and_asks_for_the_ram(capsys):
    assert main(["plan", *FULL_FSDP, "--device", "h100-80gb"]) == 0
    out = capsys.readouterr().out
    assert "fewest that fit there (nodes of 8 GPUs): " in out and " nodes" in out
    assert "node RAM needed" in out and "ram:SIZE" in out
    assert main(["plan", *FULL_FSDP, "--device", "h100-80gb,ram:4TB", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["host"]["fit"]["usable_bytes"] == 4 * 10**12
    assert doc["what_if"]["gpus_per_node"] == 8 and doc["what_if"]["fewest_nodes"]


def test_one_gpus_node_ram_verdict_is_shown_where_it_is_judged(capsys):
    """One GPU, nothing offloaded: the model is still loaded through the node's RAM, and
    ``ram:`` makes that a verdict --check and --json count; where it is not a plain fit the
    text and the dashboard say it too, so a failing --check never comes without its reason
    (ample RAM stays unsaid: tests/app/test_sharding_view.py)."""
    from trainmem.app.widgets.breakdown import sharding_text

    args = ["plan", "--model", "7B", "--device", "h100-80gb,ram:1GB"]
    assert main([*args, "--check"]) == 1
    out = capsys.readouterr().out
    assert "node RAM (usable 1.0 GB) for " in out and "TOO BIG" in out
    plan = Plan(model="7B", device="h100-80gb,ram:1GB")
    report = build_report(plan, solve=False)
    assert report.host_fit is not None and not report.host_fit.fits
    shown = sharding_text(report).plain
    assert "Node RAM needs" in shown and "of 1.0 GB" in shown
