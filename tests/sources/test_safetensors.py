"""safetensors headers: checked entry by entry before their count is believed. A bad header
is a one-line note (config.json still gives the count), never a traceback or a negative,
fractional or astronomical parameter count."""

from __future__ import annotations

import json
import math
import struct
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tiny_model import CONFIG as TINY_CONFIG

from trainmem.core.architecture import MAX_PARAMS
from trainmem.core.estimator import estimate
from trainmem.core.plan import METHODS, Plan
from trainmem.sources import safetensors
from trainmem.sources.resolve import resolve_model

CONFIG = TINY_CONFIG
CONFIG_PARAMS = 80_448
FAST = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def write(path, header_bytes: bytes, declared: int | None = None) -> None:
    length = len(header_bytes) if declared is None else declared
    path.write_bytes(struct.pack("<Q", length) + header_bytes)


def header(tensors: dict[str, object]) -> bytes:
    return json.dumps(tensors).encode()


def folder_with(tmp_path, raw: bytes, declared: int | None = None):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    write(tmp_path / "model.safetensors", raw, declared)
    return tmp_path


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"a": 1}, "is not an object"),
        ({"a": {"dtype": "BF16"}}, "no valid shape"),
        ({"a": {"dtype": "BF16", "shape": None}}, "no valid shape"),
        ({"a": {"dtype": "BF16", "shape": [-5, 3]}}, "not an integer in 0.."),
        ({"a": {"dtype": "BF16", "shape": [2.5]}}, "not an integer in 0.."),
        ({"a": {"dtype": "BF16", "shape": [True]}}, "not an integer in 0.."),
        ({"a": {"dtype": "BF16", "shape": [10**30]}}, "not an integer in 0.."),
        ({"a": {"dtype": "BF16", "shape": [10**7] * 3}}, "more than"),
        ({"a": {"dtype": "BF16", "shape": [1] * 65}}, "no valid shape"),
        ({"a": {"dtype": 16, "shape": [1]}}, "no valid dtype"),
        ({"a": {"dtype": "BF\n16", "shape": [1]}}, "no valid dtype"),
        ({}, "no parameters"),
        ({"__metadata__": {"format": "pt"}}, "no parameters"),
    ],
)
def test_bad_entries_are_one_line_notes(tmp_path, tensors, message):
    spec = resolve_model(str(folder_with(tmp_path, header(tensors))))
    assert spec.params == CONFIG_PARAMS and spec.source == "config"
    note = spec.notes[-1]
    assert note.startswith("safetensors headers unreadable") and message in note
    assert "\n" not in note


@pytest.mark.parametrize(
    ("raw", "declared", "message"),
    [
        (b"{}", 2**40, "implausible header length"),
        (header({"a": {"dtype": "BF16", "shape": [4]}}), 1000, "the file is"),
        (b"[" * 100_000 + b"]" * 100_000, None, "nested too deeply"),
        (b"\xff\xfe", None, "not UTF-8"),
        (b"[1, 2]", None, "not a JSON object"),
        (b"{oops", None, "not valid JSON"),
    ],
    ids=["length-huge", "length-past-end", "deep", "utf16", "list", "broken"],
)
def test_bad_headers_are_one_line_notes(tmp_path, raw, declared, message):
    spec = resolve_model(str(folder_with(tmp_path, raw, declared)))
    assert spec.params == CONFIG_PARAMS and message in spec.notes[-1]


def test_a_short_file(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    (tmp_path / "model.safetensors").write_bytes(b"\x01\x02")
    assert "too short" in resolve_model(str(tmp_path)).notes[-1]


def test_a_header_stub_without_data_is_read(tmp_path):
    """--download stores the header alone: data_offsets point past its end, which is fine."""
    tensors = {"a": {"dtype": "BF16", "shape": [300, 400], "data_offsets": [0, 240_000]}}
    spec = resolve_model(str(folder_with(tmp_path, header(tensors))))
    assert spec.params == 120_000 and spec.source == "safetensors"


def test_a_count_below_the_config_is_not_trusted(tmp_path):
    """Fewer parameters than the config's decoder layers: not this model's headers."""
    spec = resolve_model(str(folder_with(tmp_path, header({"a": {"dtype": "F16", "shape": [9]}}))))
    assert spec.params == CONFIG_PARAMS and "shards missing?" in spec.notes[-1]


def test_counting_a_folder_without_safetensors(tmp_path):
    assert safetensors.count(tmp_path) is None


# -- hypothesis ------------------------------------------------------------------------------

dims = st.one_of(
    st.integers(0, 4096),
    st.integers(-(10**20), 10**20),
    st.sampled_from([MAX_PARAMS, MAX_PARAMS + 1, 2**64]),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    st.text(max_size=3),
)
shapes = st.one_of(
    st.lists(st.integers(0, 512), max_size=3),  # valid ones, often
    st.lists(dims, max_size=4),
    st.none(),
    st.integers(),
    st.text(max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
)
dtypes = st.one_of(
    st.sampled_from(["BF16", "F16", "F32", "I8", "U8", "F8_E4M3"]),
    st.text(max_size=40),
    st.integers(),
    st.none(),
)
good = st.fixed_dictionaries(
    {"dtype": st.sampled_from(["BF16", "F32", "I8"]), "shape": st.lists(st.integers(0, 700))}
)
entries = st.one_of(
    st.fixed_dictionaries({"dtype": dtypes, "shape": shapes}),
    good,
    st.integers(),
    st.text(max_size=3),
    st.none(),
    st.lists(st.integers(), max_size=2),
)
headers = st.one_of(
    st.dictionaries(st.text(max_size=6), entries, max_size=5),
    st.dictionaries(st.text(max_size=6), good, max_size=5),
)
declared = st.one_of(st.none(), st.none(), st.integers(0, 2**64 - 1))


def valid(entry: object) -> bool:
    return (
        isinstance(entry, dict)
        and entry["dtype"] in ("BF16", "F16", "F32", "I8", "U8", "F8_E4M3")
        and isinstance(entry["shape"], list)
        and all(type(d) is int and 0 <= d <= MAX_PARAMS for d in entry["shape"])
        and math.prod(entry["shape"]) <= MAX_PARAMS
    )


@FAST
@given(tensors=headers, length=declared)
def test_any_header_gives_a_sane_model(tmp_path, tensors, length):
    raw = header(tensors)
    spec = resolve_model(str(folder_with(tmp_path, raw, length)))
    assert all("\n" not in note for note in spec.notes)
    assert spec.params > 0 and 0 < spec.active_params <= spec.params
    intact = length is None or length == len(raw)
    body = {k: v for k, v in tensors.items() if k != "__metadata__"}
    believable = intact and all(valid(e) for e in body.values())
    by_dtype: Counter[str] = Counter()
    for e in body.values():
        by_dtype[e["dtype"] if valid(e) else "?"] += math.prod(e["shape"]) if valid(e) else 0
    total = sum(by_dtype.values())
    floats = bool(by_dtype) and by_dtype.most_common(1)[0][0] in ("BF16", "F16", "F32")
    decoder = spec.layers * spec.layer_params
    if believable and total >= decoder and floats:
        assert spec.source == "safetensors" and spec.params == total
    else:
        assert spec.source == "config" and spec.params == CONFIG_PARAMS
    for method in METHODS:
        est = estimate(Plan(model="x", method=method).validated(), spec)
        assert all(c.bytes >= 0 for c in est.components), (method, est.components)
        assert 0 < est.allocated_bytes <= est.device_bytes
