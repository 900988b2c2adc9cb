"""`plan --trace`'s refusals (trainmem.probe.trace.check): one line naming what the fake-tensor
trace cannot run, before torch is imported. The trace itself: tests/measure/test_trace_events.py
(needs torch)."""

from __future__ import annotations

import pytest

from trainmem.cli.main import main
from trainmem.core.errors import PlanError
from trainmem.core.plan import Plan
from trainmem.probe.trace import check
from trainmem.sources.resolve import resolve_model


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"method": "qlora", "quant": "int8"}, "quant int8 is not traced"),
        ({"gpus": 2}, "sharded and multi-GPU plans are not"),
        ({"optimizer": "adamw-8bit"}, "optimizer adamw-8bit is not traced"),
    ],
)
def test_refused_plans(fields: dict[str, object], words: str) -> None:
    spec = resolve_model("SmolLM2-135M")
    with pytest.raises(PlanError, match=words) as err:
        check(Plan(model="SmolLM2-135M", **fields).validated(), spec)  # type: ignore[arg-type]
    assert err.value.field == "trace"


def test_bare_count_is_refused_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--model", "7B", "--trace", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err == "trainmem-tui plan: error: trace: needs the model's config (a catalogue id, "
        "config.json or id)"
    )


def test_a_model_type_estimated_as_llama_like_is_not_traced() -> None:
    # transformers would build its own "bert" (a causal BERT) and the trace would be set
    # beside the Llama-like estimate of another model
    from dataclasses import replace

    spec = replace(resolve_model("SmolLM2-135M"), model_type="bert")
    with pytest.raises(PlanError, match="'bert' is estimated as Llama-like"):
        check(Plan(model="SmolLM2-135M").validated(), spec)
