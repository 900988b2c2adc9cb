"""``--data``: a training dataset read as examples, streamed, whatever it is stored as.

:func:`open_dataset` takes what the user typed: a JSON Lines, JSON, CSV/TSV, Parquet or Arrow
file (gzipped text too), a ``save_to_disk`` folder, or ``org/name[/config][:split]`` of a
dataset in the local ``datasets`` cache. :meth:`Dataset.examples` yields each record as a
``Chat`` or ``Plain`` example, or a ``Malformed`` with its line, never raising for one bad
record; a file with nothing in it or no recognisable field is one ``DatasetError``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from trainmem.sources import files
from trainmem.sources.datasets import hf_cache, shapes
from trainmem.sources.datasets.records import (
    DatasetError,
    Item,
    Malformed,
    open_records,
    parquet_columns,
)
from trainmem.sources.datasets.shapes import Chat, Example, Message, Plain, Shape

__all__ = [
    "Chat",
    "Dataset",
    "DatasetError",
    "Example",
    "Malformed",
    "Message",
    "Plain",
    "Shape",
    "open_dataset",
]

KIND_NAMES = {
    "jsonl": "JSON Lines",
    "json": "JSON",
    "csv": "CSV",
    "tsv": "TSV",
    "parquet": "Parquet",
    "arrow": "Arrow",
}
_SUFFIXES = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".pq": "parquet",
    ".arrow": "arrow",
}


def _sniff(path: Path) -> str:
    """The kind of a file from its first bytes: Parquet's or Arrow's magic, a JSON array, or a
    first line that is a whole JSON object (JSON Lines, whatever the extension: many ``.json``
    datasets are JSON Lines); anything else is read as one JSON document."""
    with files.open_file(path, what="dataset") as (f, _):
        head = f.read(8)
    if head[:4] == b"PAR1":
        return "parquet"
    if head[:6] == b"ARROW1" or head[:4] == b"\xff\xff\xff\xff":
        return "arrow"
    first = next(open_records(path, "jsonl"), None)
    if first is None or isinstance(first[1], Malformed):
        return "json"  # a pretty-printed object or array, or something json will name
    record = first[1]
    lists = [k for k, v in record.items() if isinstance(v, list)]
    if len(lists) == 1 and shapes.detect(record.keys()) is None:  # {"data": [...]}, one line
        return "json"
    return "jsonl"


def file_kind(path: Path) -> str:
    """The file's format: JSON Lines, CSV and TSV by extension (``.gz`` too), the others by
    content."""
    with files.open_file(path, what="dataset") as (f, _):
        if f.read(4) == b"PK\x03\x04":  # read as text it was "not UTF-8 (byte 12)"
            raise DatasetError(f"{files.show(path)} is a zip archive: unzip it and give a file")
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] == ".gz":
        suffixes.pop()
    kind = _SUFFIXES.get(suffixes[-1] if suffixes else "")
    if kind in ("jsonl", "csv", "tsv"):
        return kind
    found = _sniff(path)
    if kind in ("parquet", "arrow") and found != kind:  # named so, but without its magic
        name = KIND_NAMES[kind]
        article = "an" if name[0] in "AEIOU" else "a"
        raise DatasetError(f"{files.show(path)} is not {article} {name} file (no {name} header)")
    return found


@dataclass(frozen=True)
class Dataset:
    """Where the examples come from: one file, or the Arrow shards of a cached dataset."""

    name: str  # as the user gave it
    where: str  # for the report: "JSON Lines file x.jsonl", "datasets cache ..."
    kind: str
    paths: tuple[Path, ...]

    def records(self, columns: list[str] | None = None) -> Iterator[Item]:
        """Every record, rows numbered on across shards."""
        offset = 0
        for path in self.paths:
            last = 0
            for where, record in open_records(path, self.kind, columns):
                last = where
                yield offset + where, record
            offset += last

    def columns(self) -> list[str] | None:
        """The column names when the format stores them (Parquet)."""
        if self.kind != "parquet":
            return None
        with files.open_file(self.paths[0], what="dataset") as (f, _):
            return parquet_columns(f)

    def shape(self) -> tuple[Shape, Iterator[Item]]:
        """The dataset's shape, from its column names or its first record, and its records
        from the start (those read to find the shape are not read twice)."""
        columns = self.columns()
        if columns is not None:
            shape = shapes.detect(columns)
            if shape is None:
                raise DatasetError(_no_field(self, columns))
            wanted = [c for c in shape.fields if c in columns]
            return shape, self.records(wanted)
        records = self.records()
        seen: list[Item] = []
        for item in records:
            seen.append(item)
            record = item[1]
            if isinstance(record, Malformed):
                continue
            shape = shapes.detect(record)
            if shape is None:
                raise DatasetError(_no_field(self, list(record), item[0]))
            return shape, itertools.chain(seen, records)
        bad = [(w, r.why) for w, r in seen if isinstance(r, Malformed)]
        if bad:
            lines = ", ".join(str(w) for w, _ in bad[:5]) + (", ..." if len(bad) > 5 else "")
            raise DatasetError(
                f"{self.where}: no record could be read ({len(bad)} malformed, at {lines}; "
                f"the first: {bad[0][1]})"
            )
        raise DatasetError(f"{self.where} is empty: no records")

    def examples(self) -> tuple[Shape, Iterator[tuple[int, Example | Malformed]]]:
        shape, records = self.shape()

        def convert() -> Iterator[tuple[int, Example | Malformed]]:
            for where, record in records:
                yield (
                    where,
                    record if isinstance(record, Malformed) else shapes.convert(shape, record),
                )

        return shape, convert()


def _no_field(ds: Dataset, keys: list[str], where: int | None = None) -> str:
    at = f" (line {where})" if where is not None and ds.kind in ("jsonl", "json", "csv") else ""
    shown = ", ".join(json.dumps(k) for k in keys[:8]) + (", ..." if len(keys) > 8 else "")
    return (
        f"{ds.where}: no recognisable field{at}; it has {shown or 'no fields'}, expected "
        "messages, conversations, prompt + completion, instruction + output, or text"
    )


def open_dataset(text: str) -> Dataset:
    """What ``--data TEXT`` names (see the module doc); DatasetError when it names nothing
    readable."""
    text = text.strip()
    if not text:
        raise DatasetError("--data is empty; give a dataset file or a cached dataset name")
    try:
        path = files.expand(text)
        found = files.kind(path)
    except files.FileReadError as exc:
        raise DatasetError(str(exc)) from None
    if found == "dir":
        arrows = hf_cache.saved_arrow_files(path)
        if arrows is None:
            raise DatasetError(
                f"{files.show(text)} is a folder, not a dataset saved by datasets' save_to_disk; "
                "give a file"
            )
        return Dataset(text, f"saved dataset {files.show(text)}", "arrow", tuple(arrows))
    if found is not None:  # a file, or something files.open_file refuses with one line
        try:
            kind = file_kind(path)
        except files.FileReadError as exc:
            raise DatasetError(str(exc)) from None
        return Dataset(text, f"{KIND_NAMES[kind]} file {files.show(text)}", kind, (path,))
    if text.count("/") in (1, 2) and not text.startswith((".", "/", "~")):
        cached = hf_cache.cached_arrow_files(text)
        if cached is not None:
            arrows, where = cached
            return Dataset(text, where, "arrow", tuple(arrows))
        raise DatasetError(
            f"no such file {files.show(text)}, and no dataset {text.partition(':')[0]!r} in the "
            f"datasets cache ({files.show(hf_cache.datasets_cache_dir())})"
        )
    raise DatasetError(f"no such file: {files.show(text)}")
