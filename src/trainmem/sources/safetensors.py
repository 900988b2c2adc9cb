"""Exact parameter counts and dtypes from safetensors headers, without loading any weight.

Format (huggingface/safetensors README): 8-byte little-endian header length N, then N bytes
of JSON mapping tensor names to {dtype, shape, data_offsets}, plus an optional
``__metadata__`` object. A header is checked entry by entry before it is believed: each is
an object with a dtype name and a shape of non-negative integers, and the total stays within
MAX_PARAMS. ``data_offsets`` are not checked: the header stubs --download stores hold no data.
Every failure is a ValueError with one line naming the file.
"""

from __future__ import annotations

import math
import re
import struct
from collections import Counter
from pathlib import Path
from typing import Any

from trainmem.core.architecture import MAX_PARAMS
from trainmem.sources import files

MAX_HEADER = 100_000_000  # the format's own limit (safetensors' MAX_HEADER_SIZE)
MAX_RANK = 64  # dimensions per tensor
_DTYPE = re.compile(r"[A-Za-z0-9_]{1,32}")  # BF16, F8_E4M3, ...: short names, one line


def read_header(path: Path) -> dict[str, Any]:
    name = files.show(path.name)
    with files.open_file(path, what="safetensors file") as (f, size):
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{name} is not a safetensors file (too short)")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER:
            raise ValueError(f"{name} has an implausible header length {length:,}")
        if length > size - 8:
            raise ValueError(f"{name} says its header is {length:,} bytes; the file is {size:,}")
        data = f.read(length)
    if len(data) != length:  # the file shrank while being read
        raise ValueError(f"{name} ends inside its header")
    header = files.parse_json(data, what=f"{name} header")
    if not isinstance(header, dict):
        raise ValueError(f"{name} has a malformed header (not a JSON object)")
    header.pop("__metadata__", None)
    return header


def _tensor(file: str, key: str, entry: object) -> tuple[str, int]:
    """(dtype, element count) of one header entry, or ValueError."""
    where = f"{file}: tensor {files.show(key)[:60]!r}"
    if not isinstance(entry, dict):
        raise ValueError(f"{where} is not an object")
    dtype, shape = entry.get("dtype"), entry.get("shape")
    if not isinstance(dtype, str) or not _DTYPE.fullmatch(dtype):
        raise ValueError(f"{where} has no valid dtype")
    if not isinstance(shape, list) or len(shape) > MAX_RANK:
        raise ValueError(f"{where} has no valid shape (a list of up to {MAX_RANK} sizes)")
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_PARAMS:
            raise ValueError(f"{where} has a size that is not an integer in 0..{MAX_PARAMS:,}")
    n = math.prod(shape)  # bounded: at most 64 factors of at most 1e14
    if n > MAX_PARAMS:
        raise ValueError(f"{where} has more than {MAX_PARAMS:,} elements")
    return dtype, n


def count(folder: Path) -> tuple[int, str] | None:
    """(parameter count, dominant dtype) over every *.safetensors file, or None if none."""
    paths = sorted(folder.glob("*.safetensors"))
    if not paths:
        return None
    total = 0
    dtypes: Counter[str] = Counter()
    for path in paths:
        name = files.show(path.name)
        for key, entry in read_header(path).items():
            dtype, n = _tensor(name, key, entry)
            total += n
            dtypes[dtype] += n
        if total > MAX_PARAMS:
            raise ValueError(f"the safetensors files hold more than {MAX_PARAMS:,} parameters")
    if total == 0:
        raise ValueError("the safetensors headers list no parameters")
    return total, dtypes.most_common(1)[0][0]
