"""PYTORCH_CUDA_ALLOC_CONF parsed as torch 2.13 parses it; torch's own parser (in the CPU
wheel's libc10) is the referee where it is installed."""

from __future__ import annotations

import pytest

from trainmem.core.alloc_conf import (
    DEFAULT,
    SIZE_MAX,
    AllocConfError,
    env_alloc_conf,
    parse_alloc_conf,
)

MiB = 1024 * 1024


def test_defaults():
    assert parse_alloc_conf("") == DEFAULT
    assert DEFAULT.max_split_size == SIZE_MAX and not DEFAULT.expandable_segments


def test_values():
    cfg = parse_alloc_conf(
        " expandable_segments:True, max_split_size_mb:128,garbage_collection_threshold:0.6,"
        "max_non_split_rounding_mb:40,per_process_memory_fraction:0.5,"
    )
    assert cfg.expandable_segments and cfg.max_split_size == 128 * MiB
    assert cfg.garbage_collection_threshold == 0.6
    assert cfg.max_non_split_rounding_size == 40 * MiB
    assert cfg.per_process_memory_fraction == 0.5


def test_roundup_power2_divisions_both_forms():
    assert parse_alloc_conf("roundup_power2_divisions:4").roundup_power2_divisions == (4,) * 16
    table = parse_alloc_conf("roundup_power2_divisions:[256:1,512:2,1024:4,>:8]")
    # index i is [2^i, 2^(i+1)) MiB; the first entry fills below it, '>' after the last
    assert table.roundup_power2_divisions == (1,) * 9 + (2, 4) + (8,) * 5
    assert table.divisions(300 * MiB) == 1 and table.divisions(600 * MiB) == 2


def test_large_segment_size_is_read_first_and_sets_the_minimums():
    cfg = parse_alloc_conf("max_split_size_mb:40,large_segment_size_mb:32")
    assert cfg.large_segment_size == 32 * MiB and cfg.max_non_split_rounding_size == 32 * MiB
    with pytest.raises(AllocConfError, match="max_split_size_mb: too small, must be >= 32"):
        parse_alloc_conf("large_segment_size_mb:32,max_split_size_mb:30")


BAD = [
    ("expandable_segments:true", "expandable_segments"),
    ("max_split_size_mb:10", "max_split_size_mb"),
    ("garbage_collection_threshold:1.0", "garbage_collection_threshold"),
    ("garbage_collection_threshold:abc", "garbage_collection_threshold"),
    ("roundup_power2_divisions:3", "roundup_power2_divisions"),
    ("roundup_power2_divisions:[64:3]", "roundup_power2_divisions"),
    ("roundup_power2_divisions:[100:4]", "roundup_power2_divisions"),
    ("roundup_power2_divisions:[64:8", "roundup_power2_divisions"),
    ("large_segment_size_mb:10", "large_segment_size_mb"),
    ("max_split_size_mb", "max_split_size_mb"),
    ("max_split_size_mb:abc", "max_split_size_mb"),
    ("backend:magic", "backend"),
    ("bogus:1", "bogus"),
    ("expandable_segments:True max_split_size_mb:30", "expandable_segments"),
]


@pytest.mark.parametrize(("text", "key"), BAD)
def test_bad_strings_are_one_line_naming_the_key(text, key):
    with pytest.raises(AllocConfError) as err:
        parse_alloc_conf(text)
    message = str(err.value)
    assert "\n" not in message and f": {key}:" in message


def test_where_torch_is_lax_we_ask_for_a_plain_number():
    # std::stoull reads "25.5" as 25 and "-5" as 2**64 - 5; a user meant neither
    for text in ("max_split_size_mb:25.5", "max_split_size_mb:-5"):
        with pytest.raises(AllocConfError, match="whole number"):
            parse_alloc_conf(text)


def test_the_variable_torch_reads():
    assert env_alloc_conf({}) is None
    both = {"PYTORCH_ALLOC_CONF": "a", "PYTORCH_CUDA_ALLOC_CONF": "b"}
    assert env_alloc_conf(both) == ("PYTORCH_CUDA_ALLOC_CONF", "b")
    assert env_alloc_conf({"PYTORCH_ALLOC_CONF": "a"}) == ("PYTORCH_ALLOC_CONF", "a")


def _torch_setter():
    torch = pytest.importorskip("torch")
    setter = getattr(torch._C, "_accelerator_setAllocatorSettings", None)
    if setter is None:
        pytest.skip("this torch has no _accelerator_setAllocatorSettings")
    return setter


ACCELERATOR = [  # keys torch's device-independent parser (libc10) checks itself
    "expandable_segments:True",
    "expandable_segments:False,max_split_size_mb:20",
    "roundup_power2_divisions:[64:8,256:4,>:1]",
    "garbage_collection_threshold:0.5",
    "large_segment_size_mb:64,max_non_split_rounding_mb:64",
    *(text for text, key in BAD if key not in ("bogus", "backend")),
]


@pytest.mark.parametrize("text", ACCELERATOR)
def test_torch_accepts_what_we_accept(text):
    setter = _torch_setter()
    try:
        parse_alloc_conf(text)
        ours = True
    except AllocConfError:
        ours = False
    try:
        setter(text)
        theirs = True
    except (ValueError, RuntimeError):
        theirs = False
    finally:
        setter("")
    assert ours == theirs
