"""Byte sizes: parsing user input and formatting with unambiguous units.

GB means 10**9 bytes and GiB 2**30 everywhere; the guide's figures are in GB.
"""

from __future__ import annotations

import math
import re
import reprlib

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
# What a bare count (--model 7B) may ask for: the typical decoder's shape is assumed from it
# (architecture.spec_from_count), and beyond 5T no published model comes near.
MIN_COUNT, MAX_COUNT = 10**6, 5 * 10**12


class _Short(reprlib.Repr):
    """reprlib's bounded repr (a few items, a few levels: a YAML alias bomb's billion-item
    list costs a handful), with huge integers described, since repr() of one is slow or
    refused."""

    def __init__(self) -> None:
        super().__init__()
        self.maxlevel, self.maxlist, self.maxtuple, self.maxdict, self.maxset = 3, 4, 4, 4, 4
        self.maxstring, self.maxother = 30, 30

    def repr_int(self, x: int, level: int) -> str:
        return f"a {x.bit_length()}-bit integer" if x.bit_length() > 64 else repr(x)


_SHORT = _Short()


def shown(value: object, limit: int = 40) -> str:
    """A value for a one-line error message, cut short (text is stripped first); lists and
    objects abbreviated without walking them whole, a huge integer described."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"a {value.bit_length()}-bit integer"  # str() of it is slow or refused
    if isinstance(value, str):
        value = value.strip()
        return repr(value) if len(value) <= limit else repr(value[:limit]) + "..."
    text = _SHORT.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


class NumberError(ValueError):
    """A number from outside that is not one, or not one trainmem can compute with; the
    message starts with the value as :func:`shown` writes it."""


MAX_MAGNITUDE = 2**64  # beyond every size, count or length planned; float() stays exact-ish
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
# What float() reads that a number written in a file or an answer may be: ASCII digits,
# no "1_000" and no other script's digits ("١٢٣"), which float() takes too.
_FLOAT_TEXT = re.compile(
    r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]?(?:inf|infinity|nan)",
    re.IGNORECASE,
)
_MAX_TEXT = 100  # characters of a number written as text; longer is not a number we read


def checked_number(
    value: object,
    *,
    whole: bool = False,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
) -> int | float:
    """A number from outside (a file's value, a flag, a server's answer), checked before any
    conversion or arithmetic; the one gate every such number goes through.

    Takes an int, a float or text of one. Refused with a NumberError: booleans, anything
    else, NaN and infinities, magnitudes over ``MAX_MAGNITUDE`` (so ``float()`` of it cannot
    overflow and ``int()`` of it is safe), a fraction where ``whole`` asks for an integer,
    and values outside ``low..high`` (``low`` itself excluded when ``low_open``). A whole
    float (``5e8``) becomes an int when ``whole``. Text is read without converting more than
    ``_MAX_TEXT`` characters: ``int()`` of thousands of digits is slow or refused."""
    number: int | float
    kind = "a whole number" if whole else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise NumberError(f"{shown(value)} is not {kind}")
    if isinstance(value, str):
        text = value.strip()
        if len(text) > _MAX_TEXT:
            digits = text.lstrip("+-")
            if digits.isdigit():
                raise NumberError(
                    f"a {len(digits)}-digit integer is {_range(low, high, low_open, huge=True)}"
                )
            raise NumberError(f"{shown(text)} is not {kind}")
        if _INT_TEXT.fullmatch(text):
            number = int(text)
        elif not _FLOAT_TEXT.fullmatch(text):
            raise NumberError(f"{shown(text) if text else 'empty'} is not {kind}")
        else:
            try:
                number = float(text)
            except ValueError:
                raise NumberError(f"{shown(text) if text else 'empty'} is not {kind}") from None
    else:
        number = value
    if isinstance(number, float) and not math.isfinite(number):
        raise NumberError(f"{shown(value)} is not a finite number")
    if abs(number) > MAX_MAGNITUDE:  # exact for ints of any size: no float() involved
        raise NumberError(f"{shown(number)} is {_range(low, high, low_open, huge=True)}")
    if whole and isinstance(number, float):
        if not number.is_integer():
            raise NumberError(f"{shown(value)} is not a whole number")
        number = int(number)
    too_low = low is not None and (number <= low if low_open else number < low)
    if too_low or (high is not None and number > high):
        raise NumberError(f"{_plain(number)} is {_range(low, high, low_open, huge=False)}")
    return number


def range_text(low: float | None, high: float | None, low_open: bool = False) -> str:
    """``1..10,000,000``, ``0 or more``, ``above 0 and at most 1``: a range in messages."""
    lo = "" if low is None else _plain(low)
    hi = "" if high is None else _plain(high)
    if low_open:
        return f"above {lo}" + (f" and at most {hi}" if hi else "")
    if not hi or not lo:
        return f"{lo} or more" if lo else f"{hi} or less"
    return f"{lo}..{hi}"


def _range(low: float | None, high: float | None, low_open: bool, *, huge: bool) -> str:
    """What is wrong with a value outside the range; ``huge``: beyond ``MAX_MAGNITUDE``."""
    if low is not None and high is not None:
        if low_open:  # "0 is outside above 0 and at most 1" reads wrong
            return f"not {range_text(low, high, low_open)}"
        return f"outside {range_text(low, high, low_open)}"
    if huge:
        return "out of range (beyond ±2^64)"
    if low is not None:
        return f"{'not above' if low_open else 'below'} {_plain(low)}"
    return f"above {_plain(high if high is not None else 0)}"


def _plain(value: float) -> str:
    """A checked number for a message: 10,000,000, 0.5."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


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
    if not unit:
        raise ValueError(f"{shown(text)} needs a unit: GB (10^9 bytes) or GiB (2^30 bytes)")
    if unit not in _UNITS:  # 1PB, 5 furlongs: a unit, just not one of these
        raise ValueError(
            f"{shown(text)}: {shown(unit)} is not a unit; use B, KB, MB, GB, TB, KiB, MiB, "
            "GiB or TiB"
        )
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
            "give one from 1M to 5T, e.g. 7B, 1.5b, 494M or 70e9",
        )
    return round(value)
