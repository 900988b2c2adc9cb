"""PYTORCH_CUDA_ALLOC_CONF as torch 2.13 reads it: a pure function of the string.

Read from torch 2.13.0 (git cf30153c): the tokenizer and the getters are in its installed header
c10/core/AllocatorConfig.h (ConfigTokenizer, AcceleratorAllocatorConfig); the parser bodies in
c10/core/AllocatorConfig.cpp (AcceleratorAllocatorConfig::parseArgs and parse*; read at the
pytorch/pytorch version with ``large_segment_size_mb``, whose strings libc10.so of 2.13 holds) and
c10/cuda/CUDAAllocatorConfig.cpp (CUDAAllocatorConfig::parseArgs: the CUDA-only keys, and
"Unrecognized key" for any other). The checks below are theirs, with their limits; where torch
is laxer than a user deserves (``std::stoull`` takes "25.5" as 25 and "-5" as 2**64 - 5) a plain
non-negative integer is required instead.

Which variable: CUDAAllocatorConfig::instance (2.13's c10/cuda/CUDAAllocatorConfig.h) reads
PYTORCH_CUDA_ALLOC_CONF, and PYTORCH_ALLOC_CONF only when the first is unset: ``env_alloc_conf``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

MB = 1024 * 1024
SIZE_MAX = 2**64 - 1  # std::numeric_limits<size_t>::max(): max_split_size when unset
K_LARGE_BUFFER = 20 * MB  # default large_segment_size_ (AllocatorConfig.h)
K_MIN_LARGE_ALLOC_MB = 10  # kMinLargeAlloc / kMB: large_segment_size_mb must be above it
ROUNDUP_INTERVALS = 16  # kRoundUpPowerOfTwoIntervals: 1 MiB .. 64 GiB, one per power of two
MAX_REGISTER_THREADS = 128  # CUDAAllocatorConfig::pinned_max_register_threads()
ENV_VARS = ("PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF")

# Keys torch accepts and that change nothing the device allocator does (host/pinned memory,
# locking, graphs): their values are checked as torch checks them, then ignored.
_BOOL_KEYS = frozenset(
    {
        "pinned_use_background_threads",
        "release_lock_on_cudamalloc",
        "release_lock_on_hipmalloc",
        "pinned_use_cuda_host_register",
        "pinned_use_hip_host_register",
        "graph_capture_record_stream_reuse",
        "pinned_free_catch_all",
        "throw_on_cudamalloc_oom",
    }
)
_INT_KEYS = frozenset({"pinned_max_round_threshold_mb", "pinned_max_cached_size_mb"})


class AllocConfError(ValueError):
    """A PYTORCH_CUDA_ALLOC_CONF torch would refuse; ``str()`` is one line naming the key."""


@dataclass(frozen=True)
class AllocatorConfig:
    """The settings the CUDA caching allocator's behaviour depends on (torch's defaults)."""

    expandable_segments: bool = False
    max_split_size: int = SIZE_MAX  # bytes; blocks at least this large are never split
    max_non_split_rounding_size: int = K_LARGE_BUFFER  # bytes
    large_segment_size: int = K_LARGE_BUFFER  # bytes: the segment for 1-10 MiB requests
    roundup_power2_divisions: tuple[int, ...] = (0,) * ROUNDUP_INTERVALS
    garbage_collection_threshold: float = 0.0
    per_process_memory_fraction: float = 1.0
    backend: str = "native"  # "cudaMallocAsync" bypasses the caching allocator entirely
    text: str = ""  # the string it was read from

    def divisions(self, size: int) -> int:
        """AcceleratorAllocatorConfig::roundup_power2_divisions(size): the divisions of the
        power-of-two interval holding ``size`` (index 0 below 2 MiB, 15 from 32 GiB)."""
        log_size = size.bit_length() - 1
        index = max(0, log_size - 20)  # interval_start = log2(1 MiB)
        return self.roundup_power2_divisions[min(index, ROUNDUP_INTERVALS - 1)]


DEFAULT = AllocatorConfig()


def env_alloc_conf(env: Mapping[str, str]) -> tuple[str, str] | None:
    """(variable, value) of the allocator configuration torch would read from ``env``."""
    for name in ENV_VARS:
        if name in env:
            return name, env[name]
    return None


def _tokens(text: str) -> list[str]:
    """ConfigTokenizer: ',', ':', '[' and ']' are tokens of their own; whitespace is dropped."""
    tokens: list[str] = []
    buffer = ""
    for ch in text:
        if ch in ",:[]":
            if buffer:
                tokens.append(buffer)
                buffer = ""
            tokens.append(ch)
        elif not ch.isspace():
            buffer += ch
    if buffer:
        tokens.append(buffer)
    return tokens


class _Reader:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.i = 0

    def fail(self, key: str, message: str) -> AllocConfError:
        return AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: {key}: {message}")

    def value(self, key: str) -> str:
        """The token after ``key:`` (checkToken(++i, ":") then the value)."""
        if self.i + 1 >= len(self.tokens) or self.tokens[self.i + 1] != ":":
            raise self.fail(key, "expected ':' and a value after the key")
        if self.i + 2 >= len(self.tokens) or self.tokens[self.i + 2] in ",:[]":
            raise self.fail(key, "expected a value after ':'")
        self.i += 2
        return self.tokens[self.i]

    def integer(self, key: str) -> int:
        text = self.value(key)
        if not text.isdigit() or not text.isascii():
            raise self.fail(key, f"expected a whole number, not {text[:20]!r}")
        return int(text)

    def boolean(self, key: str) -> bool:
        text = self.value(key)  # ConfigTokenizer::toBool: exactly True or False
        if text not in ("True", "False"):
            raise self.fail(key, f"expected True or False, not {text[:20]!r}")
        return text == "True"

    def number(self, key: str) -> float:
        text = self.value(key)
        try:
            value = float(text)
        except ValueError:
            raise self.fail(key, f"expected a number, not {text[:20]!r}") from None
        return value

    def skip(self, key: str) -> None:
        """ConfigTokenizer::skipKey: past ``key:value`` or ``key:[...]``."""
        if (
            self.i + 1 < len(self.tokens)
            and self.tokens[self.i + 1] == ":"
            and (self.i + 2 < len(self.tokens) and self.tokens[self.i + 2] == "[")
        ):
            j = self.i + 2
            while j < len(self.tokens) and self.tokens[j] != "]":
                j += 1
            if j >= len(self.tokens):
                raise self.fail(key, "expected ']' to close the list")
            self.i = j
        else:
            self.value(key)


def _divisions(reader: _Reader, key: str) -> tuple[int, ...]:
    """parseRoundUpPower2Divisions: one power of two for every interval, or
    ``[B:v, ..., >:v]``: v for the interval starting at B MiB (the first entry also below it),
    ``>`` for every interval after the last one named."""
    tokens = reader.tokens
    if reader.i + 2 < len(tokens) and tokens[reader.i + 1] == ":" and tokens[reader.i + 2] == "[":
        reader.i += 2
        table = [0] * ROUNDUP_INTERVALS
        first, last_index = True, 0
        while True:
            reader.i += 1
            if reader.i >= len(tokens):
                raise reader.fail(key, "expected ']' to close the list")
            bound = tokens[reader.i]
            if bound == "]":
                return tuple(table)
            value = reader.integer(f"{key} [{bound}]")
            if value != 0 and value & (value - 1):
                raise reader.fail(key, f"divisions must be a power of 2 or 0, not {value}")
            if bound == ">":
                table[last_index + 1 :] = [value] * (ROUNDUP_INTERVALS - last_index - 1)
            else:
                if not bound.isdigit() or not bound.isascii() or int(bound) == 0:
                    raise reader.fail(key, f"interval {bound[:20]!r} is not a size in MiB")
                boundary = int(bound)
                if boundary & (boundary - 1):
                    raise reader.fail(key, f"interval {boundary} MiB is not a power of 2")
                index = min(boundary.bit_length() - 1, ROUNDUP_INTERVALS - 1)
                if first:
                    table[:index] = [value] * index
                    first = False
                table[index] = value
                last_index = index
            if reader.i + 1 < len(tokens) and tokens[reader.i + 1] != "]":
                if tokens[reader.i + 1] != ",":
                    raise reader.fail(key, "expected ',' or ']' after a division")
                reader.i += 1
    value = reader.integer(key)
    if value == 0 or value & (value - 1):
        raise reader.fail(key, f"divisions must be a power of 2, not {value}")
    return (value,) * ROUNDUP_INTERVALS


def parse_alloc_conf(text: str) -> AllocatorConfig:
    """The configuration ``text`` sets, torch's defaults for the rest; AllocConfError for a
    string torch (a CUDA build) would refuse. An empty string is the defaults."""
    if len(text) > 4096:
        raise AllocConfError("PYTORCH_CUDA_ALLOC_CONF: longer than 4,096 characters")
    reader = _Reader(text)
    tokens = reader.tokens
    # AcceleratorAllocatorConfig::parseArgs reads large_segment_size_mb first: the minimum of
    # max_split_size_mb and max_non_split_rounding_mb depend on it.
    large = K_LARGE_BUFFER
    for i, token in enumerate(tokens):
        if token == "large_segment_size_mb" and (i == 0 or tokens[i - 1] == ","):
            reader.i = i
            mb = reader.integer(token)
            if mb <= K_MIN_LARGE_ALLOC_MB:
                raise reader.fail(token, f"must be > {K_MIN_LARGE_ALLOC_MB} (MiB), not {mb}")
            large = min(mb, SIZE_MAX // MB) * MB
    fields: dict[str, Any] = {"large_segment_size": large, "text": text}
    fields["max_non_split_rounding_size"] = large
    reader.i = 0
    while reader.i < len(tokens):
        key = tokens[reader.i]
        if key == "large_segment_size_mb":
            reader.skip(key)
        elif key in ("max_split_size_mb", "max_non_split_rounding_mb"):
            mb = reader.integer(key)
            if mb < large // MB:
                raise reader.fail(key, f"too small, must be >= {large // MB} (MiB), not {mb}")
            name = "max_split_size" if key == "max_split_size_mb" else "max_non_split_rounding_size"
            fields[name] = min(mb, SIZE_MAX // MB) * MB
        elif key == "garbage_collection_threshold":
            value = reader.number(key)
            if not 0.0 < value < 1.0:
                raise reader.fail(key, f"must be in (0.0, 1.0), not {value}")
            fields["garbage_collection_threshold"] = value
        elif key == "roundup_power2_divisions":
            fields["roundup_power2_divisions"] = _divisions(reader, key)
        elif key == "expandable_segments":
            fields["expandable_segments"] = reader.boolean(key)
        elif key == "per_process_memory_fraction":
            value = reader.number(key)  # DeviceCachingAllocator::setMemoryFraction's range
            if not 0.0 <= value <= 1.0:
                raise reader.fail(key, f"must be in [0, 1], not {value}")
            fields["per_process_memory_fraction"] = value
        elif key == "backend":
            value_text = reader.value(key)  # CUDAAllocatorConfig::parseAllocatorConfig
            if value_text not in ("native", "cudaMallocAsync"):
                raise reader.fail(
                    key, "unknown allocator backend, options are native and cudaMallocAsync"
                )
            fields["backend"] = value_text
        elif key in _BOOL_KEYS:
            reader.boolean(key)
        elif key in _INT_KEYS:
            reader.integer(key)
        elif key == "pinned_num_register_threads":
            n = reader.integer(key)
            if n == 0 or n & (n - 1) or n > MAX_REGISTER_THREADS:
                raise reader.fail(key, f"must be a power of 2 up to {MAX_REGISTER_THREADS}")
        elif key == "pinned_reserve_segment_size_mb":
            if reader.integer(key) == 0:
                raise reader.fail(key, "must be greater than 0")
        elif key in ",:[]":
            raise AllocConfError(f"PYTORCH_CUDA_ALLOC_CONF: unexpected {key!r} where a key belongs")
        else:
            raise reader.fail(key[:40], "unrecognized key (torch's CUDA allocator refuses it)")
        reader.i += 1
        if reader.i < len(tokens):  # checkToken(++i, ","): a trailing ',' is accepted
            if tokens[reader.i] != ",":
                raise reader.fail(key, f"expected ',' after its value, not {tokens[reader.i]!r}")
            reader.i += 1
    return replace(DEFAULT, **fields)
