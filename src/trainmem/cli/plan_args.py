"""The plan flags, derived from the plan's field declarations (trainmem.core.plan), shared by
`trainmem-tui plan` and the dashboard (which opens on that plan)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Any

from trainmem.core.alloc_conf import env_alloc_conf
from trainmem.core.architecture import ModelSpec
from trainmem.core.errors import PlanError
from trainmem.core.fields import FieldSpec
from trainmem.core.plan import PLAN_FIELDS, Plan
from trainmem.sources.configs.merge import TRAINMEM_DEFAULT, merged
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


GIVEN = "plan_flags_given"  # the namespace attribute naming the plan flags typed


def _note_given(namespace: argparse.Namespace, dest: str) -> None:
    # A new set each time: a set default would be shared by every parse.
    setattr(namespace, GIVEN, {*getattr(namespace, GIVEN, ()), dest})


class _Store(argparse.Action):
    """``store``, remembering that the flag was typed (flags override --from files)."""

    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, opt: Any = None
    ) -> None:
        setattr(namespace, self.dest, values)
        _note_given(namespace, self.dest)


class _Bool(argparse.BooleanOptionalAction):
    def __call__(
        self, parser: Any, namespace: argparse.Namespace, values: Any, opt: Any = None
    ) -> None:
        super().__call__(parser, namespace, values, opt)
        _note_given(namespace, self.dest)


def _add(group: argparse._ArgumentGroup, spec: FieldSpec) -> None:
    shown = spec.format(spec.default)
    help_text = f"{spec.help} (default {shown})".replace("%", "%%")
    if spec.kind == "bool":
        group.add_argument(spec.flag, action=_Bool, default=spec.default, help=help_text)
    elif spec.kind == "choice":
        group.add_argument(
            spec.flag,
            action=_Store,
            type=_choice_type(spec),
            choices=spec.choices,
            default=spec.default,
            help=help_text,
        )
    else:
        group.add_argument(
            spec.flag, action=_Store, type=_typed(spec), default=spec.default, help=help_text
        )


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
    group.add_argument(
        "--from",
        dest="from_files",
        metavar="FILE",
        action="append",
        default=[],
        help="plan from a training config: axolotl or LLaMA-Factory YAML, TRL SFTConfig or "
        "TrainingArguments (YAML/JSON), DeepSpeed JSON, accelerate config (repeatable; "
        "flags override it)",
    )
    group.add_argument(
        "--from-args",
        dest="from_args",
        metavar="COMMAND",
        action="append",
        default=[],
        help='plan from a training command line, e.g. "trl sft --model_name_or_path X '
        '--per_device_train_batch_size 4" or "accelerate launch train.py ..."',
    )


def resolve_for_args(ns: argparse.Namespace, plan: Plan) -> ModelSpec:
    """The plan's model, downloading its config first when --download asks for it. A model
    named by a config key is reported by that key (``axo.yml:1 base_model: unknown ...``)."""
    try:
        return _resolve(ns, plan)
    except PlanError as exc:
        origin = getattr(ns, "plan_origins", {}).get("model", "")
        if exc.field != "model" or not _from_file(origin):
            raise
        raise PlanError(origin, exc.message) from None


def _resolve(ns: argparse.Namespace, plan: Plan) -> ModelSpec:
    try:
        return resolve_model(plan.model)
    except PlanError:
        if not getattr(ns, "download", False) or "/" not in plan.model:
            raise
    from trainmem.sources.hub import download, split_revision

    hf_id, revision = split_revision(plan.model)
    download(hf_id, revision)
    return resolve_model(plan.model)


@dataclass(frozen=True)
class Planned:
    """The plan the flags and --from files describe, and where each field came from."""

    plan: Plan
    origins: dict[str, str]
    unmodelled: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def _from_file(origin: str) -> bool:
    return not origin.startswith("flag ") and origin != TRAINMEM_DEFAULT


def planned_from_args(ns: argparse.Namespace) -> Planned:
    """The validated plan: trainmem's defaults, under the --from files' values, under the
    flags typed. Raises PlanError named by the flag or the config key at fault."""
    given: set[str] = set(getattr(ns, GIVEN, ()))
    values = {spec.name: getattr(ns, spec.name) for spec in PLAN_FIELDS}
    origins = {
        s.name: f"flag {s.flag}" if s.name in given else TRAINMEM_DEFAULT for s in PLAN_FIELDS
    }
    unmodelled: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    files_given = getattr(ns, "from_files", []) or []
    commands = getattr(ns, "from_args", []) or []
    if files_given or commands:
        from trainmem.sources.configs import read_configs

        config = read_configs(files_given, commands)
        values, origins = merged(values, origins, config, given)
        unmodelled, notes = config.unmodelled, config.notes
    # The allocator's settings, when neither a flag nor a file gives them: this shell's
    # PYTORCH_CUDA_ALLOC_CONF, as torch in a run started from it would read them.
    from_env = env_alloc_conf(os.environ)
    if from_env and origins["alloc_conf"] == TRAINMEM_DEFAULT:
        values["alloc_conf"], origins["alloc_conf"] = from_env[1], f"environment {from_env[0]}"
    revision = getattr(ns, "revision", None)
    if revision:
        model, _, pinned = values["model"].partition("@")
        if pinned and pinned != revision:
            raise PlanError("--revision", f"{revision!r} differs from {pinned!r} in --model")
        values["model"] = f"{model}@{revision}"
        origins["model"] = f"{origins['model']}, flag --revision"
    try:
        plan = Plan(**values).validated()
    except PlanError as exc:
        spec = next((s for s in PLAN_FIELDS if s.name == exc.field), None)
        if spec is None:
            raise
        origin = origins[spec.name]
        raise PlanError(origin if _from_file(origin) else spec.flag, exc.message) from None
    ns.plan_origins = origins  # for resolve_for_args, which names a config's model key
    return Planned(plan, origins, unmodelled, notes)


def plan_from_args(ns: argparse.Namespace) -> Plan:
    """The validated Plan the flags (and --from files) describe (raises PlanError on bad
    values or combinations, named by flag or config key)."""
    return planned_from_args(ns).plan
