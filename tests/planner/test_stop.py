"""build_report's ``stop``: asked before each search, a report nobody wants any more (the
dashboard's plan was edited meanwhile) stops at the next one, instead of running them all."""

from __future__ import annotations

import pytest

from trainmem.core.plan import Plan
from trainmem.planner.report import Stale, build_report

PLAN = Plan(model="Qwen/Qwen2.5-0.5B", method="lora", seq_len=2048, device="rtx-4090")


def test_a_stop_asked_before_each_search() -> None:
    asked: list[int] = []

    def stop() -> bool:
        asked.append(len(asked))
        return False

    full = build_report(PLAN, stop=stop)
    assert full.what_if is not None and full.what_if.max_seq_len
    # longest sequence, largest batch, largest catalogue model, advice (it fits one GPU:
    # no fewest-GPUs search)
    assert len(asked) == 4
    assert full == build_report(PLAN)  # the same report as without a stop


@pytest.mark.parametrize("after", [0, 1, 3])
def test_a_stop_that_says_yes_ends_the_report(after: int) -> None:
    asked = 0

    def stop() -> bool:
        nonlocal asked
        asked += 1
        return asked > after

    with pytest.raises(Stale):
        build_report(PLAN, stop=stop)
    assert asked == after + 1  # no search was asked about once it said stop


def test_without_solving_stop_is_never_asked() -> None:
    def stop() -> bool:
        raise AssertionError("asked")

    build_report(PLAN, solve=False, stop=stop)
