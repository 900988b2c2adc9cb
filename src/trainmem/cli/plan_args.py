"""The plan flags, shared by `trainmem-tui plan` and the dashboard (which opens on that plan)."""

from __future__ import annotations

import argparse
from dataclasses import fields

from trainmem.core.architecture import ModelSpec
from trainmem.core.errors import PlanError
from trainmem.core.plan import ATTENTION, METHODS, OFFLOAD, OPTIMIZERS, PRECISIONS, Plan
from trainmem.sources.resolve import resolve_model

DEFAULTS = Plan()


def _positive_int(text: str) -> int:
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def add_plan_arguments(parser: argparse.ArgumentParser) -> None:
    d = DEFAULTS
    g = parser.add_argument_group("plan")
    g.add_argument(
        "--model",
        default=d.model,
        help=f"a count (7B, 494M), a catalogue id, a config.json path or a cached id "
        f"(default {d.model})",
    )
    g.add_argument("--method", choices=METHODS, default=d.method, help="default %(default)s")
    g.add_argument("--seq-len", type=_positive_int, default=d.seq_len, help="tokens per example")
    g.add_argument("--batch", type=_positive_int, default=d.batch, help="micro-batch per GPU")
    g.add_argument(
        "--grad-ckpt",
        action=argparse.BooleanOptionalAction,
        default=d.grad_ckpt,
        help="gradient checkpointing (default on, as TRL's SFTConfig)",
    )
    g.add_argument("--attn", choices=ATTENTION, default=d.attn, help="default %(default)s")
    g.add_argument("--precision", choices=PRECISIONS, default=d.precision)
    g.add_argument("--optimizer", choices=OPTIMIZERS, default=d.optimizer)
    g.add_argument("--lora-rank", type=_positive_int, default=d.lora_rank)
    g.add_argument("--lora-alpha", type=_number, default=d.lora_alpha)
    g.add_argument(
        "--lora-targets",
        default=d.lora_targets,
        help="all-linear, attention, or a list such as q,k,v,o,gate,up,down",
    )
    g.add_argument("--lora-dropout", type=_number, default=d.lora_dropout)
    g.add_argument(
        "--kbit-prep",
        action=argparse.BooleanOptionalAction,
        default=d.kbit_prep,
        help="QLoRA with PEFT's prepare_model_for_kbit_training (default on, as TRL does)",
    )
    g.add_argument("--gpus", type=_positive_int, default=d.gpus)
    g.add_argument("--zero", type=int, choices=(0, 1, 2, 3), default=d.zero)
    g.add_argument("--offload", choices=OFFLOAD, default=d.offload)
    g.add_argument(
        "--device",
        default=d.device,
        help="auto, a preset (rtx-4090, h100-80gb, mac-36gb), a size (24GiB, unified:36GB), "
        "or a comma list",
    )
    g.add_argument(
        "--download",
        action="store_true",
        help="fetch config.json and safetensors headers (never weights) of a Hub id "
        "that is not in the catalogue or the local cache",
    )
    g.add_argument(
        "--rule-of-thumb",
        action="store_true",
        help="judge the fit on the guide's rule of thumb instead of the detailed estimate",
    )


def resolve_for_args(ns: argparse.Namespace, plan: Plan) -> ModelSpec:
    """The plan's model, downloading its config first when --download asks for it."""
    try:
        return resolve_model(plan.model)
    except PlanError:
        if not getattr(ns, "download", False) or plan.model.count("/") != 1:
            raise
    from trainmem.sources.hub import download

    download(plan.model)
    return resolve_model(plan.model)


def plan_from_args(ns: argparse.Namespace) -> Plan:
    """The validated Plan the flags describe (raises PlanError on bad combinations)."""
    values = {f.name: getattr(ns, f.name) for f in fields(Plan)}
    return Plan(**values).validated()
