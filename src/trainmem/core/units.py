"""Byte sizes: parsing user input and formatting with unambiguous units.

GB means 10**9 bytes and GiB 2**30 everywhere; the guide's figures are in GB.
"""

from __future__ import annotations

import math
import re

from trainmem.core.errors import PlanError

GB = 10**9
GiB = 2**30
_UNITS = {
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": GB,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": GiB,
    "tib": 2**40,
}
_AMBIGUOUS = {"m": (6, 20), "g": (9, 30), "t": (12, 40)}  # decimal and binary exponents
# Unambiguous alternatives (no nested or adjacent quantifiers over the same digits), so a
# hostile string of thousands of digits is matched in linear time.
_NUMBER = r"(?:[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
_SIZE = re.compile(rf"^({_NUMBER})\s*([a-z]*)$")
MAX_SIZE = 2**64  # bytes (16 EiB): far beyond any device, small enough to be exact
MAX_COUNT = 10**15  # parameters (1000T)


def shown(value: object, limit: int = 40) -> str:
    """A value for a one-line error message: repr'd and cut short (text is stripped first);
    a huge integer, an object or a list described rather than printed."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit integer"  # str() of a huge int is slow or refused
    if isinstance(value, (dict, list)):
        return "an object" if isinstance(value, dict) else "a list"
    if isinstance(value, str):
        value = value.strip()
        return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_size(text: str) -> int:
    """``"24GiB"`` -> 25769803776, ``"80GB"`` -> 80000000000; a bare ``G`` is refused."""
    m = _SIZE.match(text.strip().lower())
    if not m:
        raise ValueError(f"{shown(text)} is not a size; use e.g. 24GiB or 80GB")
    number, unit = m.groups()
    if unit in _AMBIGUOUS:
        u, (dec, bin_) = unit.upper(), _AMBIGUOUS[unit]
        raise ValueError(
            f"{text!r} is ambiguous: write {number}{u}B (10^{dec} bytes) "
            f"or {number}{u}iB (2^{bin_} bytes)"
        )
    if unit not in _UNITS:
        raise ValueError(f"{shown(text)} needs a unit: GB (10^9 bytes) or GiB (2^30 bytes)")
    value = float(number) * _UNITS[unit]  # 300+ digits: inf, never an OverflowError here
    if not math.isfinite(value) or value > MAX_SIZE:
        raise ValueError(
            f"{shown(text)} is too large; give a size up to 2^64 bytes, e.g. 24GiB or 80GB"
        )
    size = round(value)
    if size <= 0:
        raise ValueError(f"{shown(text)} must be larger than zero")
    return size


def fmt_bytes(n: float, unit: str = "GB", digits: int = 1) -> str:
    """``fmt_bytes(17.4e9)`` -> ``"17.4 GB"``; negative values keep their sign."""
    scale = _UNITS[unit.lower()]
    return f"{n / scale:.{digits}f} {unit}"


def fmt_count(n: float) -> str:
    """Parameter counts the way model cards write them: 494M, 7.62B."""
    for scale, suffix in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "K")):
        if abs(n) >= scale:
            value = n / scale
            digits = 2 if value < 10 else 1 if value < 100 else 0
            return f"{value:.{digits}f}{suffix}"
    return str(int(n))


_COUNT = re.compile(rf"^\s*({_NUMBER}(?:e[0-9]+)?)\s*([kmbt]?)\s*$", re.IGNORECASE)
_COUNT_SCALE = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "t": 10**12}


def parse_count(text: str) -> int | None:
    """``"7B"``, ``"1.5b"``, ``"494M"``, ``"70e9"`` -> an integer; None if not a count.

    A count too large to mean anything (above ``MAX_COUNT``, or one that overflows a float:
    ``1e400``, 300 digits) raises PlanError (a ValueError) for the model field, naming what is
    accepted; callers already report PlanError as the model's one-line error."""
    m = _COUNT.match(text)
    if not m:
        return None
    value = float(m.group(1)) * _COUNT_SCALE[m.group(2).lower()]
    if not math.isfinite(value) or value > MAX_COUNT:
        raise PlanError(
            "model",
            f"{shown(text)} is too large a parameter count; "
            "give one up to 1000T, e.g. 7B, 1.5b, 494M or 70e9",
        )
    return round(value)
