"""units.checked_number, the one gate for numbers from outside, and shown(), which every
message about them uses: huge integers, infinities, NaN and text never reach float() or
int() unchecked, and no message prints a value whole."""

from __future__ import annotations

import math

import pytest

from trainmem.core.errors import PlanError
from trainmem.core.plan import FIELDS_BY_NAME
from trainmem.core.units import NumberError, checked_number, shown

HUGE = 10**400  # float(HUGE) raises OverflowError


@pytest.mark.parametrize(
    ("value", "kwargs", "message"),
    [
        (HUGE, {}, "a 1329-bit integer is out of range (beyond ±2^64)"),
        (-HUGE, {}, "out of range"),
        ("1" + "0" * 400, {"whole": True}, "a 401-digit integer is out of range"),
        (HUGE, {"low": 1, "high": 10**7}, "a 1329-bit integer is outside 1..10,000,000"),
        (math.inf, {}, "inf is not a finite number"),
        (-math.inf, {"whole": True}, "-inf is not a finite number"),
        (math.nan, {"whole": True}, "nan is not a finite number"),
        ("Infinity", {}, "'Infinity' is not a finite number"),
        ("1e400", {}, "'1e400' is not a finite number"),
        (True, {}, "True is not a number"),
        (None, {"whole": True}, "None is not a whole number"),
        ([1] * 10**6, {}, "[1, 1, 1, 1, ...] is not a number"),
        ("four", {"whole": True}, "'four' is not a whole number"),
        ("", {}, "empty is not a number"),
        ("1_000", {}, "'1_000' is not a number"),  # float() reads both of these
        ("\u0967\u0968\u0969", {}, "is not a number"),  # Devanagari 123
        ("0x10", {}, "'0x10' is not a number"),
        (1.5, {"whole": True}, "1.5 is not a whole number"),
        (0, {"low": 1, "high": 10**7}, "0 is outside 1..10,000,000"),
        (20_000_000, {"low": 1, "high": 10**7}, "20,000,000 is outside 1..10,000,000"),
        (-5, {"low": 0}, "-5 is below 0"),
        (0, {"low": 0, "low_open": True}, "0 is not above 0"),
        (7, {"high": 5}, "7 is above 5"),
    ],
)
def test_refused_in_one_line_without_converting(value, kwargs, message):
    with pytest.raises(NumberError) as err:
        checked_number(value, **kwargs)
    assert message in str(err.value)
    assert "\n" not in str(err.value) and len(str(err.value)) < 120


@pytest.mark.parametrize(
    ("value", "kwargs", "expected"),
    [
        (5e8, {"whole": True}, 500_000_000),  # JSON's way of writing a bucket size
        ("4", {"whole": True}, 4),
        (" -3 ", {}, -3),
        ("0.05", {}, 0.05),
        ("+1.5E3", {}, 1500.0),
        (".5", {}, 0.5),
        (2**64, {}, 2**64),
        (1024, {"low": 1, "high": 10**7}, 1024),
    ],
)
def test_accepted_numbers_come_back_typed(value, kwargs, expected):
    got = checked_number(value, **kwargs)
    assert got == expected and type(got) is type(expected)


def test_shown_never_walks_a_huge_value():
    bomb: list = ["lol"] * 9
    for _ in range(8):  # 9**9 items once expanded: repr() would build gigabytes
        bomb = [bomb] * 9
    assert shown(bomb) == "[[[[...], [...], [...], [...], ...], ..."
    assert shown(HUGE) == "a 1329-bit integer"
    assert shown({"a": [HUGE], "b": 2}) == "{'a': [a 1329-bit integer], 'b': 2}"
    assert shown("x" * 10**7).endswith("...") and len(shown("x" * 10**7)) < 50


def test_plan_fields_use_the_gate_for_flags_and_files():
    seq_len = FIELDS_BY_NAME["seq_len"]
    with pytest.raises(ValueError, match="a 401-digit integer is out of range"):
        seq_len.parse("1" + "0" * 400)  # a flag: --seq-len 1000...0
    with pytest.raises(PlanError, match=r"seq_len: a 1329-bit integer is outside 1\.\.10,000,000"):
        seq_len.check(HUGE)  # a plans file or a config
    alpha = FIELDS_BY_NAME["lora_alpha"]
    with pytest.raises(ValueError, match="not a finite number"):
        alpha.parse("1e400")
    with pytest.raises(PlanError, match="lora_alpha: a 1329-bit integer"):
        alpha.check(HUGE)
    assert seq_len.parse("4,096") == 4096 and alpha.check(16) == 16.0
