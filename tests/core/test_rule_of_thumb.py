"""The guide's rule of thumb, its table and its two worked examples, exactly as printed."""

import pytest

from trainmem.core.fit import judge_fit, usable_bytes
from trainmem.core.plan import Plan
from trainmem.core.rule_of_thumb import rule_of_thumb_bytes
from trainmem.core.units import GB


def rule(billions: float, method: str, precision: str = "bf16") -> float:
    plan = Plan(model="x", method=method, precision=precision)
    return rule_of_thumb_bytes(round(billions * 1e9), plan) / GB


@pytest.mark.parametrize(
    ("size", "lora", "full"),
    [(0.5, 4, 10), (1.5, 6, 22), (3, 9, 40), (7, 17, 88), (14, 31, 172)],
)
def test_guide_table(size, lora, full):
    assert rule(size, "lora") == pytest.approx(lora)
    assert rule(size, "full") == pytest.approx(full)


def test_master_copy_is_16_per_billion():
    assert rule(7, "full", "bf16-mixed") == pytest.approx(16 * 7 + 4)
    assert rule(7, "full", "fp32") == pytest.approx(16 * 7 + 4)


def test_qlora_figures():
    assert rule(8, "qlora") == pytest.approx(9, abs=0.5)  # "8B needs ~9 GB instead of ~19"
    assert rule(8, "lora") == pytest.approx(19)
    assert 22 <= rule(27, "qlora") <= 26  # "27-32B needs ~22-26 GB"
    assert 22 <= rule(32, "qlora") <= 26


def verdict(billions: float, method: str, usable: int) -> str:
    required = rule_of_thumb_bytes(round(billions * 1e9), Plan(model="x", method=method))
    return judge_fit(required, "d", usable).verdict


def test_36gb_unified_laptop():
    usable = usable_bytes(36 * GB, unified=True)
    assert usable == 27 * GB
    assert verdict(1.5, "lora", usable) == "fits"
    assert verdict(7, "lora", usable) == "fits"
    assert verdict(14, "lora", usable) == "too big"
    assert verdict(1.5, "full", usable) == "fits"
    assert verdict(3, "full", usable) == "too big"
    assert verdict(27, "qlora", usable) == "fits"
    # 25.8 GB of 27 GB: fits, with under 10% headroom, which the tool calls "tight".
    assert verdict(32, "qlora", usable) in ("fits", "tight")
    # "LoRA fits models up to ~10B there; full tops out around 1.5B".
    assert verdict(10, "lora", usable) != "too big"
    assert verdict(12, "lora", usable) == "tight"  # 27 GB of 27: the edge
    assert verdict(13, "lora", usable) == "too big"


def test_16gb_gpu():
    usable = 16 * GB
    assert verdict(8, "lora", usable) == "too big"
    assert verdict(8, "qlora", usable) == "fits"
