"""Plan-field values from training configs under the flags a user typed: one rule for the
command line (cli/plan_args.py) and the dashboard's re-read of a watched config."""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import TYPE_CHECKING, Any

from trainmem.core.errors import PlanError
from trainmem.core.plan import PLAN_FIELDS, Plan

if TYPE_CHECKING:  # the readers (and PyYAML) load only when a config is read
    from trainmem.sources.configs.common import ConfigPlan

TRAINMEM_DEFAULT = "trainmem default"


def merged(
    values: Mapping[str, Any], origins: Mapping[str, str], config: ConfigPlan, given: Set[str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """``values`` (defaults and flags) with the config's values on every field the user did
    not type: flags override files, files override trainmem's defaults."""
    out, where = dict(values), dict(origins)
    for name, value in config.values.items():
        if name in out and name not in given:
            out[name], where[name] = value, config.origins[name]
    return out, where


def plan_from_config(config: ConfigPlan, flags: Mapping[str, Any]) -> Plan:
    """The validated plan a config describes under ``flags`` (field name -> typed value);
    a bad value is a PlanError named by the config key it came from."""
    defaults = {s.name: flags.get(s.name, s.default) for s in PLAN_FIELDS}
    values, origins = merged(defaults, {n: TRAINMEM_DEFAULT for n in defaults}, config, set(flags))
    try:
        return Plan(**values).validated()
    except PlanError as exc:
        origin = origins.get(exc.field, TRAINMEM_DEFAULT)
        if origin == TRAINMEM_DEFAULT or exc.field in flags:
            raise
        raise PlanError(origin, exc.message) from None
