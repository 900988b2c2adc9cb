"""A plan in one line, written once for every front end that shows one: the CLI's `plan`
title and `run-report` (the details), the dashboard's monitor (the short form). A plan's
default name, which must be short and tell plans apart, is trainmem.planner.naming's."""

from __future__ import annotations

from trainmem.core.plan import Plan


def plan_details(plan: Plan) -> tuple[str, ...]:
    """What sets a step's memory, in reading order: method, precision, the tokens of a
    micro-batch, checkpointing, optimizer, stack and loss."""
    return (
        plan.method,
        plan.precision,
        f"seq {plan.seq_len:,} x batch {plan.batch:,}",
        f"checkpointing {'on' if plan.grad_ckpt else 'off'}",
        plan.optimizer,
        f"{plan.stack} stack",
        f"{plan.loss_kind} loss",
    )


def plan_summary(plan: Plan) -> str:
    """The model and the plan's details on one line (the model as the plan names it)."""
    return f"{plan.model}: {', '.join(plan_details(plan))}"


def plan_line(plan: Plan) -> str:
    """The short form, for a line beside other figures: model, method, sequence x batch."""
    return f"{plan.model} · {plan.method} · {plan.seq_len:,} × {plan.batch}"
