"""Exact parameter counts and dtypes from safetensors headers, without loading any weight.

Format (huggingface/safetensors README): 8-byte little-endian header length N, then N bytes
of JSON mapping tensor names to {dtype, shape, data_offsets}.
"""

from __future__ import annotations

import json
import math
import struct
from collections import Counter
from pathlib import Path

MAX_HEADER = 100 * 2**20  # a real header is kilobytes; refuse to read a corrupt length


def read_header(path: Path) -> dict[str, dict[str, object]]:
    with path.open("rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise ValueError(f"{path.name} is not a safetensors file (too short)")
        (length,) = struct.unpack("<Q", raw)
        if length > MAX_HEADER:
            raise ValueError(f"{path.name} has an implausible header length {length}")
        header = json.loads(f.read(length))
    if not isinstance(header, dict):
        raise ValueError(f"{path.name} has a malformed header")
    header.pop("__metadata__", None)
    return header


def count(folder: Path) -> tuple[int, str] | None:
    """(parameter count, dominant dtype) over every *.safetensors file, or None if none."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    dtypes: Counter[str] = Counter()
    for file in files:
        for tensor in read_header(file).values():
            shape = tensor.get("shape")
            if not isinstance(shape, list):
                raise ValueError(f"{file.name} has a tensor without a shape")
            n = math.prod(int(d) for d in shape)
            total += n
            dtypes[str(tensor.get("dtype"))] += n
    return total, dtypes.most_common(1)[0][0] if dtypes else "BF16"
