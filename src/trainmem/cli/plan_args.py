"""The plan flags, derived from the plan's field declarations (trainmem.core.plan), shared by
`trainmem-tui plan` and the dashboard (which opens on that plan)."""

from __future__ import annotations

import argparse
from typing import Any

from trainmem.core.architecture import ModelSpec
from trainmem.core.errors import PlanError
from trainmem.core.fields import FieldSpec
from trainmem.core.plan import PLAN_FIELDS, Plan
from trainmem.sources.resolve import resolve_model

GROUP = "plan"


def _typed(spec: FieldSpec) -> Any:
    """The field's own text parser, its message as argparse's one-line error."""

    def parse(text: str) -> Any:
        try:
            return spec.parse(text)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def _choice_type(spec: FieldSpec) -> Any:
    kinds = {type(c) for c in spec.choices}
    return int if kinds == {int} else str


def _add(group: argparse._ArgumentGroup, spec: FieldSpec) -> None:
    shown = spec.format(spec.default)
    help_text = f"{spec.help} (default {shown})".replace("%", "%%")
    if spec.kind == "bool":
        group.add_argument(
            spec.flag, action=argparse.BooleanOptionalAction, default=spec.default, help=help_text
        )
    elif spec.kind == "choice":
        group.add_argument(
            spec.flag,
            type=_choice_type(spec),
            choices=spec.choices,
            default=spec.default,
            help=help_text,
        )
    else:
        group.add_argument(spec.flag, type=_typed(spec), default=spec.default, help=help_text)


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(GROUP)
    for spec in PLAN_FIELDS:
        _add(group, spec)
    group.add_argument(
        "--revision",
        help="a branch, tag or commit of a Hugging Face model (same as --model org/name@rev)",
    )
    group.add_argument(
        "--download",
        action="store_true",
        help="fetch config.json and safetensors headers (never weights) of a Hub id "
        "that is not in the catalogue or the local cache",
    )


def resolve_for_args(ns: argparse.Namespace, plan: Plan) -> ModelSpec:
    """The plan's model, downloading its config first when --download asks for it."""
    try:
        return resolve_model(plan.model)
    except PlanError:
        if not getattr(ns, "download", False) or "/" not in plan.model:
            raise
    from trainmem.sources.hub import download, split_revision

    hf_id, revision = split_revision(plan.model)
    download(hf_id, revision)
    return resolve_model(plan.model)


def plan_from_args(ns: argparse.Namespace) -> Plan:
    """The validated Plan the flags describe (raises PlanError on bad values or combinations,
    named by flag)."""
    values = {spec.name: getattr(ns, spec.name) for spec in PLAN_FIELDS}
    revision = getattr(ns, "revision", None)
    if revision:
        model, _, given = values["model"].partition("@")
        if given and given != revision:
            raise PlanError("--revision", f"{revision!r} differs from {given!r} in --model")
        values["model"] = f"{model}@{revision}"
    try:
        return Plan(**values).validated()
    except PlanError as exc:
        spec = next((s for s in PLAN_FIELDS if s.name == exc.field), None)
        if spec is None:
            raise
        raise PlanError(spec.flag, exc.message) from None
