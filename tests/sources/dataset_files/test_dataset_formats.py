"""Each file format and record shape read back as the examples written, malformed records
counted by line, and the files that are one clear error."""

from __future__ import annotations

import builtins
import csv
import gzip
import json
import os
from pathlib import Path

import pytest
from dataset_helpers import chat, words, write_jsonl

from trainmem.sources.datasets import Chat, DatasetError, Malformed, Message, Plain, open_dataset

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402


def examples(text: str | Path):
    shape, items = open_dataset(str(text)).examples()
    return shape.name, list(items)


def test_messages_and_sharegpt_turns(tmp_path: Path):
    path = write_jsonl(
        tmp_path / "chat.jsonl",
        [
            {
                "messages": [
                    {"role": "system", "content": "be brief"},
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": [{"type": "text", "text": "yo"}]},
                ]
            },
            {"messages": [{"from": "human", "value": "a"}, {"from": "gpt", "value": "b"}]},
        ],
    )
    shape, got = examples(path)
    assert shape == "messages"
    assert got == [
        (
            1,
            Chat(
                (Message("system", "be brief"), Message("user", "hi"), Message("assistant", "yo"))
            ),
        ),
        (2, Chat((Message("user", "a"), Message("assistant", "b")))),
    ]


def test_conversations_prompt_completion_alpaca_and_text(tmp_path: Path):
    cases = {
        "conversations": (chat(("user", 2), ("assistant", 3), key="conversations"), Chat),
        "prompt/completion": ({"prompt": "p", "completion": "c"}, Plain("p", "c")),
        "instruction/input/output": (
            {"instruction": "do", "input": "this", "output": "done"},
            Chat((Message("user", "do\n\nthis"), Message("assistant", "done"))),
        ),
        "text": ({"text": "all of it"}, Plain("", "all of it")),
    }
    for name, (record, expected) in cases.items():
        shape, got = examples(write_jsonl(tmp_path / "d.jsonl", [record]))
        assert shape == name
        assert got[0][1] == expected or isinstance(got[0][1], expected)  # type: ignore[arg-type]


def test_conversational_prompt_completion_is_a_chat(tmp_path: Path):
    record = {
        "prompt": [{"role": "user", "content": "q"}],
        "completion": [{"role": "assistant", "content": "a"}],
    }
    _, got = examples(write_jsonl(tmp_path / "pc.jsonl", [record]))
    assert got == [(1, Chat((Message("user", "q"), Message("assistant", "a"))))]


def test_malformed_lines_are_counted_by_number_and_not_fatal(tmp_path: Path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        json.dumps({"text": "one"})
        + "\n"
        + "{not json\n"
        + "\n"
        + "[1, 2]\n"
        + json.dumps({"other": 1})
        + "\n"
        + json.dumps({"text": 5})
        + "\n"
        + json.dumps({"text": "two"})
        + "\n"
    )
    _, got = examples(path)
    good = [(w, e) for w, e in got if not isinstance(e, Malformed)]
    bad = [(w, e.why) for w, e in got if isinstance(e, Malformed)]
    assert good == [(1, Plain("", "one")), (7, Plain("", "two"))]
    assert [w for w, _ in bad] == [2, 4, 5, 6]
    assert "not valid JSON" in bad[0][1]
    assert "not an object" in bad[1][1]
    assert "no text field" in bad[2][1]
    assert "not text" in bad[3][1]


def test_a_json_array_is_streamed_with_the_line_of_each_element(tmp_path: Path):
    path = tmp_path / "d.json"
    path.write_text('[\n  {"text": "a"},\n  {"text": "b"}, {"text": "c"},\n  {"text":\n "d"}\n]')
    _, got = examples(path)
    assert got == [
        (2, Plain("", "a")),
        (3, Plain("", "b")),
        (3, Plain("", "c")),
        (4, Plain("", "d")),
    ]


def test_a_broken_json_array_keeps_what_came_before(tmp_path: Path):
    path = tmp_path / "d.json"
    path.write_text('[{"text": "a"},\n{"text": oops}, {"text": "c"}]')
    _, got = examples(path)
    assert got[0] == (1, Plain("", "a"))
    assert got[1][0] == 2 and isinstance(got[1][1], Malformed)
    assert len(got) == 2


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('[{"text": "a"}\n {"text": "b"}]', "no comma after an element"),
        ('[{"text": "a"},,{"text": "b"}]', "not valid JSON"),
        ('[{"text": "a"},\n]', "a comma before ']'"),
    ],
)
def test_a_json_array_needs_its_commas(tmp_path: Path, text: str, why: str):
    """Any run of commas, or none, was read as a separator: two records from a broken file."""
    path = tmp_path / "d.json"
    path.write_text(text)
    _, got = examples(path)
    assert got[0] == (1, Plain("", "a")) and len(got) == 2
    assert isinstance(got[1][1], Malformed) and why in got[1][1].why


def test_json_object_with_one_list_and_json_lines_named_json(tmp_path: Path):
    (tmp_path / "o.json").write_text(json.dumps({"version": 1, "data": [{"text": "x"}]}, indent=2))
    assert examples(tmp_path / "o.json")[1] == [(1, Plain("", "x"))]
    write_jsonl(tmp_path / "lines.json", [{"text": "a"}, {"text": "b"}])
    ds = open_dataset(str(tmp_path / "lines.json"))
    assert ds.kind == "jsonl"


def test_csv_tsv_and_gzip(tmp_path: Path):
    with open(tmp_path / "d.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["instruction", "input", "output"])
        w.writerow(["say\nhello", "", "hello"])
        w.writerow(["short", "row"])
        w.writerow(["a", "b", "c"])
    _, got = examples(tmp_path / "d.csv")
    assert got[0] == (2, Chat((Message("user", "say\nhello"), Message("assistant", "hello"))))
    assert got[1][0] == 4 and isinstance(got[1][1], Malformed)
    assert got[2][0] == 5
    (tmp_path / "d.tsv").write_text("prompt\tcompletion\nx\ty\n")
    assert examples(tmp_path / "d.tsv")[1] == [(2, Plain("x", "y"))]
    msgs = json.dumps(chat(("user", 1), ("assistant", 1))["messages"])
    with open(tmp_path / "m.csv", "w", newline="") as f:
        csv.writer(f).writerows([["messages"], [msgs]])
    assert isinstance(examples(tmp_path / "m.csv")[1][0][1], Chat)
    with gzip.open(tmp_path / "d.jsonl.gz", "wt") as g:
        g.write(json.dumps({"text": "zipped"}) + "\n")
    assert examples(tmp_path / "d.jsonl.gz")[1] == [(1, Plain("", "zipped"))]


def test_parquet_reads_only_the_shape_columns(tmp_path: Path):
    table = pa.table(
        {"prompt": ["p1", "p2"], "completion": ["c1", "c2"], "blob": [b"x" * 10, b"y"]}
    )
    pq.write_table(table, tmp_path / "d.parquet", row_group_size=1)
    ds = open_dataset(str(tmp_path / "d.parquet"))
    shape, records = ds.shape()
    rows = list(records)
    assert shape.name == "prompt/completion"
    assert rows == [
        (1, {"prompt": "p1", "completion": "c1"}),
        (2, {"prompt": "p2", "completion": "c2"}),
    ]


def test_parquet_without_pyarrow_is_one_line_naming_the_extra(tmp_path: Path, monkeypatch):
    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "d.parquet")
    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(DatasetError) as err:
        examples(tmp_path / "d.parquet")
    assert str(err.value) == "reading Parquet needs pyarrow: pip install 'trainmem-tui[parquet]'"


def _arrow_stream(path: Path, table) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.RecordBatchStreamWriter(sink, table.schema) as w:
        w.write_table(table, max_chunksize=1)


def test_the_datasets_cache_layout(tmp_path: Path, monkeypatch):
    """<cache>/<org>___<name>/<config>/<version>/<hash>/<name>-<split>-NNNNN-of-NNNNN.arrow
    (datasets 5.2 builder.py); the newest copy wins; HF_DATASETS_CACHE is read at call time."""
    cache = tmp_path / "ds-cache"
    monkeypatch.setenv("HF_DATASETS_CACHE", str(cache))
    old = cache / "org___my_set" / "default" / "0.0.0" / "aaa"
    new = cache / "org___my_set" / "default" / "0.0.0" / "bbb"
    for folder, texts in ((old, ["old"]), (new, ["n1", "n2", "n3"])):
        folder.mkdir(parents=True)
        _arrow_stream(folder / "my_set-train-00000-of-00002.arrow", pa.table({"text": texts[:2]}))
        _arrow_stream(folder / "my_set-train-00001-of-00002.arrow", pa.table({"text": texts[2:]}))
        _arrow_stream(folder / "my_set-test.arrow", pa.table({"text": ["t"]}))
    os.utime(old, (1, 1))
    shape, got = examples("org/MySet")
    assert shape == "text"
    assert got == [(1, Plain("", "n1")), (2, Plain("", "n2")), (3, Plain("", "n3"))]
    assert examples("org/MySet:test")[1] == [(1, Plain("", "t"))]
    with pytest.raises(DatasetError, match="without a 'validation' split"):
        open_dataset("org/MySet:validation")
    with pytest.raises(DatasetError, match=r"without config 'other' \(cached: default\)"):
        open_dataset("org/MySet/other")
    with pytest.raises(DatasetError, match="no dataset 'org/none' in the datasets cache"):
        open_dataset("org/none")


def test_a_save_to_disk_folder(tmp_path: Path):
    folder = tmp_path / "saved"
    (folder / "train").mkdir(parents=True)
    (folder / "dataset_dict.json").write_text(json.dumps({"splits": ["train"]}))
    _arrow_stream(folder / "train" / "data-00000-of-00001.arrow", pa.table({"text": ["s"]}))
    (folder / "train" / "state.json").write_text(
        json.dumps({"_data_files": [{"filename": "data-00000-of-00001.arrow"}]})
    )
    assert examples(folder)[1] == [(1, Plain("", "s"))]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "is empty: no records"),
        ("\n\n  \n", "is empty: no records"),
        (
            '{"question": "q", "answer": "a"}\n',
            'no recognisable field (line 1); it has "question", "answer", expected messages',
        ),
        ("garbage\nmore garbage\n", "no record could be read (2 malformed, at 1, 2; the first"),
    ],
)
def test_one_clear_error(tmp_path: Path, content: str, message: str):
    path = tmp_path / "d.jsonl"
    path.write_text(content)
    with pytest.raises(DatasetError) as err:
        examples(path)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_what_is_not_a_dataset_file(tmp_path: Path):
    os.mkfifo(tmp_path / "fifo.jsonl")
    with pytest.raises(DatasetError, match="is a FIFO"):
        examples(tmp_path / "fifo.jsonl")
    with pytest.raises(DatasetError, match="no such file"):
        open_dataset(str(tmp_path / "missing.jsonl"))
    with pytest.raises(DatasetError, match="not a dataset saved by datasets' save_to_disk"):
        open_dataset(str(tmp_path))
    pq_bad = tmp_path / "bad.parquet"
    pq_bad.write_bytes(b"PAR1 this is not parquet")
    with pytest.raises(DatasetError, match="not a readable Parquet file"):
        examples(pq_bad)


def test_a_line_over_the_record_cap_is_one_malformed_record(tmp_path: Path, monkeypatch):
    from trainmem.sources.datasets import records

    monkeypatch.setattr(records, "MAX_RECORD", 100)
    path = write_jsonl(tmp_path / "d.jsonl", [{"text": "x" * 500}, {"text": words(3)}])
    _, got = examples(path)
    assert isinstance(got[0][1], Malformed) and "longer than 100 bytes" in got[0][1].why
    assert got[1] == (2, Plain("", words(3)))


@pytest.mark.parametrize(("name", "kind"), [("d.parquet", "a Parquet"), ("d.arrow", "an Arrow")])
def test_a_columnar_file_without_its_header_is_named_as_such(tmp_path: Path, name: str, kind: str):
    """It was sniffed as JSON and called "not valid JSON"."""
    (tmp_path / name).write_bytes(b"not columnar at all")
    with pytest.raises(DatasetError, match=f"is not {kind} file"):
        examples(tmp_path / name)


def test_parquet_rows_are_capped_and_big_batches_decoded_a_row_at_a_time(
    tmp_path: Path, monkeypatch
):
    """A Parquet file's rows had no size cap (a 2.4 KB file of dictionary-encoded 20 MiB
    rows: 400 decoded at once were a MemoryError)."""
    import trainmem.sources.datasets.records as records

    monkeypatch.setattr(records, "MAX_RECORD", 1000)
    monkeypatch.setattr(records, "BATCH_BYTES", 100)
    texts = ["short"] * 5 + ["word " * 400] + ["also short"]
    pq.write_table(pa.table({"text": pa.array(texts).dictionary_encode()}), tmp_path / "d.parquet")
    _, examples = open_dataset(str(tmp_path / "d.parquet")).examples()
    got = [(where, getattr(ex, "why", None) or ex.answer) for where, ex in examples]
    assert got == [
        *[(i, "short") for i in range(1, 6)],
        (6, "longer than 1,000 bytes of text"),
        (7, "also short"),
    ]
