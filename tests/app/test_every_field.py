"""Every plan field, through every front end: flags -> plan -> form -> TOML -> plan -> JSON,
equal at each step, and the dashboard and `plan --json` agree on the device peak.

The plans are generated from the field declarations, so a new field is covered the moment it
is declared; a field a front end lacks fails here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from app_helpers import settle

from trainmem.app import TrainmemApp
from trainmem.app.screens.plan import PlanScreen
from trainmem.app.widgets.plan_form import PlanForm
from trainmem.cli.dashboard_cmd import build_parser as dashboard_parser
from trainmem.cli.dashboard_cmd import startup
from trainmem.cli.main import build_parser, main
from trainmem.cli.plan_args import plan_from_args
from trainmem.core.fields import FieldSpec
from trainmem.core.plan import PLAN_FIELDS, Plan
from trainmem.sources.plan_files import NamedPlan, PlanSet, from_toml, to_toml

# Text fields have no choices to pick from: one other valid value each.
TEXT_VALUES = {
    "model": ["Qwen/Qwen2.5-0.5B", "meta-llama/Llama-3.2-1B"],
    "lora_targets": ["q,v", "attention"],
    "device": ["24GB", "h100-80gb,unified:36GB"],
    "modules_to_save": ["lm_head", "embed_tokens,lm_head"],
    "alloc_conf": ["expandable_segments:True", "max_split_size_mb:512"],
}


def _other(spec: FieldSpec, pick: int) -> Any:
    """A valid value other than the default: ``pick`` chooses which."""
    if spec.kind == "bool":
        return not spec.default
    if spec.kind == "choice":
        others = [c for c in spec.choices if c != spec.default]
        return others[pick % len(others)] if pick >= 0 else others[-1]
    if spec.kind == "int":
        return spec.default + 1 + abs(pick)
    if spec.kind == "float":
        return round(spec.default + 0.05 * (1 + abs(pick)), 4)
    return TEXT_VALUES[spec.name][pick % 2]


def plans_setting_every_field() -> list[Plan]:
    """Plans in which every field differs from its default (and valid together)."""
    out = []
    for pick in (0, -1, 1):
        values = {spec.name: _other(spec, pick) for spec in PLAN_FIELDS}
        # sharding rules (Plan._sharding_rules): ZeRO fields with strategy zero, FSDP ones
        # with fsdp; the other strategy's fields stay set and are only noted as ignored
        if values["strategy"] == "fsdp":
            values["offload"] = "params"
            if values["fsdp"] == "no-shard":
                values["fsdp_version"] = 1
        elif values["offload"] == "params":
            values["zero"] = 3
        elif values["offload"] == "optimizer" and values["zero"] == 0:
            values["zero"] = 1
        # the mlx stack refuses autocast and CUDA-only settings; its own fields round-trip
        # under another stack all the same (they are kept, and noted as not applying)
        if values["stack"] == "mlx":
            values["stack"] = "axolotl"
        # rules between fields (Plan.validated): an fp32 base runs under autocast, a 16-bit
        # one needs 16-bit precision, the fused kernels need 16-bit compute
        if values["base_dtype"] == "fp32" and values["precision"] in ("bf16", "fp16"):
            values["precision"] += "-mixed"
        if values["precision"] == "fp32":
            values["base_dtype"] = "fp32"
            values["loss"] = "chunked" if values["loss"] == "fused" else values["loss"]
        out.append(Plan(**values).validated())
    return out


PLANS = plans_setting_every_field()


def flags(plan: Plan) -> list[str]:
    args: list[str] = []
    for spec in PLAN_FIELDS:
        value = getattr(plan, spec.name)
        if spec.kind == "bool":
            args.append(spec.flag if value else "--no-" + spec.flag[2:])
        else:
            args += [spec.flag, str(value)]
    return args


def test_text_values_cover_every_text_field():
    assert {s.name for s in PLAN_FIELDS if s.kind == "text"} == set(TEXT_VALUES)


def test_generated_plans_set_every_field():
    for plan in PLANS:
        same = [s.name for s in PLAN_FIELDS if getattr(plan, s.name) == s.default]
        assert same == []


@pytest.mark.parametrize("plan", PLANS)
def test_both_parsers_take_every_field(plan: Plan):
    for parser, prefix in ((build_parser(), ["plan"]), (dashboard_parser(), [])):
        ns = parser.parse_args([*prefix, *flags(plan)])
        assert plan_from_args(ns) == plan


@pytest.mark.parametrize("plan", PLANS)
async def test_every_field_round_trips_through_every_front_end(
    plan: Plan, demo_app: Callable[..., TrainmemApp], tmp_path: Path, capsys
):
    # flags -> plan
    _ns, plan_set, messages, _broken = startup(flags(plan))
    assert messages == [] and plan_set is not None
    assert plan_set.plans[plan_set.selected].plan == plan
    # plan -> form -> plan
    app = demo_app(plan_set=plan_set)
    async with app.run_test(size=(120, 60)) as pilot:
        await settle(app, pilot)
        screen = app.screen
        assert isinstance(screen, PlanScreen)
        form = screen.query_one(PlanForm)
        for spec in PLAN_FIELDS:  # a row for every field
            assert screen.query(f"#f-{spec.name}"), f"the form has no row for {spec.name}"
        values, errors = form.read()
        assert errors == {}
        from_form = Plan(**values).validated()
        assert from_form == plan
        assert screen.report is not None
        dashboard_peak = screen.report.estimate.device_bytes
        dashboard_fit = [f.verdict for f in screen.report.fit]
        assert app.state.workspace.current.plan == plan
        # the plan the app keeps -> TOML -> plan
        session = app.state.workspace.to_plan_set()
    text = to_toml(session)
    loaded = from_toml(text, tmp_path / "s.toml")
    assert loaded.plans[loaded.selected].plan == plan
    # plan -> JSON (`plan --json`) -> plan, and the same device peak as the dashboard
    assert main(["plan", *flags(plan), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["plan"] == plan.to_dict()
    assert Plan.from_dict(doc["plan"]) == plan
    assert doc["peak"]["device_bytes"] == dashboard_peak
    assert [f["verdict"] for f in doc["fit"]] == dashboard_fit


async def test_an_edit_in_the_form_is_what_is_saved(demo_app: Callable[..., TrainmemApp]):
    """The form once dropped fields it did not show: typing in one must not lose another."""
    plan = PLANS[0]
    app = demo_app(plan_set=PlanSet((NamedPlan("x", plan),)))
    async with app.run_test(size=(120, 60)) as pilot:
        await settle(app, pilot)
        field = app.screen.query_one("#f-lora_dropout")
        field.value = "0.2"  # type: ignore[attr-defined]
        await settle(app, pilot)
        kept = app.state.workspace.current.plan
    assert kept.lora_dropout == 0.2
    assert {s.name: getattr(kept, s.name) for s in PLAN_FIELDS if s.name != "lora_dropout"} == {
        s.name: getattr(plan, s.name) for s in PLAN_FIELDS if s.name != "lora_dropout"
    }
