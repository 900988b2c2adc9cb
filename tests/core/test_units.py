"""Sizes and counts typed by users: every valid form, and hostile ones refused in one line."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable

import pytest

from trainmem.core.errors import PlanError
from trainmem.core.units import GB, MAX_SIZE, GiB, parse_count, parse_size


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("24GiB", 24 * GiB),
        ("80GB", 80 * GB),
        (" 80 gb ", 80 * GB),
        (".5GiB", GiB // 2),
        ("1.5TB", 1500 * GB),
        ("16384MiB", 16 * GiB),
        ("1B", 1),
        ("18446744073709551616B", 2**64),  # the largest accepted
        ("0" * 500 + "24GiB", 24 * GiB),  # long but harmless
        ("24." + "0" * 500 + "GB", 24 * GB),
    ],
)
def test_valid_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


@pytest.mark.parametrize(
    "text",
    [
        "9" * 300 + "GB",  # overflows a float: inf
        "1" * 400 + "TiB",
        "1" * 30 + "B",  # finite, but far above 2^64 bytes
        "20000000000GB",
        "0." + "0" * 400 + "1TB",  # rounds to zero bytes
        "1e400GB",  # no exponents in sizes
        "infGB",
        "nanGB",
        "24.GB",
    ],
)
def test_hostile_sizes_are_one_line_value_errors(text: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_size(text)
    message = str(err.value)
    assert "\n" not in message and len(message) < 160
    assert "GB" in message or "larger than zero" in message  # names what is accepted


@pytest.mark.parametrize(("text", "unit"), [("1PB", "'pb'"), ("5 furlongs", "'furlongs'")])
def test_an_unknown_unit_is_named_not_called_missing(text: str, unit: str) -> None:
    with pytest.raises(ValueError, match=f"{unit} is not a unit; use B, KB") as err:
        parse_size(text)
    assert "needs a unit" not in str(err.value)


def test_too_large_size_names_the_bound() -> None:
    with pytest.raises(ValueError, match=r"too large; give a size up to 2\^64 bytes"):
        parse_size("9" * 300 + "GB")
    assert MAX_SIZE == 2**64


@pytest.mark.parametrize("parse", [parse_size, parse_count])
def test_digit_floods_are_matched_in_linear_time(parse: Callable[[str], object]) -> None:
    start = time.perf_counter()
    for text in ("1" * 50_000 + "x!", "1" * 50_000 + ".", "." + "1" * 50_000 + " !"):
        with contextlib.suppress(ValueError):
            parse(text)
    assert time.perf_counter() - start < 1.0  # quadratic backtracking took minutes


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("7B", 7 * 10**9),
        ("1.5b", 1_500_000_000),
        ("494M", 494_000_000),
        ("70e9", 70 * 10**9),
        (" 2 T ", 2 * 10**12),
        ("125k", 125_000),
        (".5B", 500_000_000),
        ("5e12", 5 * 10**12),  # the largest accepted
    ],
)
def test_valid_counts(text: str, count: int) -> None:
    assert parse_count(text) == count


@pytest.mark.parametrize("text", ["", "Qwen/Qwen2.5-7B", "llama-3-8b", "7 billion", "7BB", "1e"])
def test_not_a_count_is_none(text: str) -> None:
    assert parse_count(text) is None


@pytest.mark.parametrize("text", ["1e400", "9" * 400, "9" * 400 + "T", "1e16", "1001T", "6T"])
def test_absurd_counts_are_one_line_plan_errors(text: str) -> None:
    with pytest.raises(PlanError) as err:
        parse_count(text)
    assert isinstance(err.value, ValueError) and err.value.field == "model"
    message = str(err.value)
    assert "\n" not in message and len(message) < 160
    assert "from 1M to 5T" in message and "7B" in message
