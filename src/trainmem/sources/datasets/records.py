"""Records from a dataset file, one at a time, in constant memory whatever the file's size.

Each reader yields ``(where, record)``: ``where`` is the line a record starts on (JSON Lines,
JSON, CSV) or its row (Parquet, Arrow), counted from 1; ``record`` is a dict, or a
:class:`Malformed` saying why that one could not be read. A malformed record is never fatal;
what cannot be read at all (not a regular file, not UTF-8 from the start, a Parquet file
without pyarrow) is one ``DatasetError`` line.

The file is opened through ``files.open_file`` (regular files only, checked before opening);
the size caps of ``files.read_bytes`` do not apply, since a dataset is streamed, but one
record is capped at ``MAX_RECORD`` bytes.
"""

from __future__ import annotations

import codecs
import csv
import gzip
import io
import json
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from trainmem.core.text import lone_surrogate
from trainmem.sources import files

MAX_RECORD = 64 * 2**20  # one example of 64 MiB is no training example
CHUNK = 1 << 20
BATCH_ROWS = 64  # rows per Arrow record batch read from Parquet: each row may be 64 MiB
BATCH_BYTES = 64 * 2**20  # a batch's Arrow buffers past this are decoded a row at a time
_GZIP = b"\x1f\x8b"


class DatasetError(ValueError):
    """A dataset that cannot be read at all; ``str()`` is one line naming it."""


@dataclass(frozen=True)
class Malformed:
    why: str


Record = dict[str, Any]
Item = tuple[int, "Record | Malformed"]


def _text_source(raw: IO[bytes]) -> io.BufferedReader:
    """The file's bytes, buffered (the readers peek), through gzip when it starts with gzip's
    magic (``.jsonl.gz``, ``.json.gz``)."""
    f = raw if isinstance(raw, io.BufferedReader) else io.BufferedReader(cast(Any, raw))
    if f.peek(2)[:2] == _GZIP:
        return io.BufferedReader(cast(Any, gzip.GzipFile(fileobj=f)), CHUNK)
    return f


def _record(value: Any) -> Record | Malformed:
    if isinstance(value, dict):
        return value
    return Malformed(f"a JSON {type(value).__name__}, not an object")


def json_lines(f: IO[bytes]) -> Iterator[Item]:
    """One JSON object per line; blank lines are skipped, a line over MAX_RECORD is one
    malformed record (the rest of it is read past, not kept)."""
    number = 0
    while True:
        line = f.readline(MAX_RECORD + 1)
        if not line:
            return
        number += 1
        if number == 1:  # a byte-order mark (Windows editors write one) is no part of it
            line = line.removeprefix(b"\xef\xbb\xbf")
        if len(line) > MAX_RECORD and not line.endswith(b"\n"):
            while (rest := f.readline(CHUNK)) and not rest.endswith(b"\n"):
                pass
            yield number, Malformed(f"longer than {MAX_RECORD:,} bytes")
            continue
        if not line.strip():
            continue
        try:
            yield number, _record(json.loads(line.decode("utf-8")))
        except UnicodeDecodeError as exc:
            yield number, Malformed(f"not UTF-8 (byte {exc.start})")
        except RecursionError:
            yield number, Malformed("nested too deeply")
        except ValueError as exc:  # JSONDecodeError, or an integer over 4,300 digits
            yield number, Malformed(f"not valid JSON ({_short(exc)})")


def _short(exc: Exception) -> str:
    text = str(exc)
    return text if len(text) <= 80 else text[:77] + "..."


def json_array(f: IO[bytes]) -> Iterator[Item]:
    """The elements of a top-level JSON array, decoded one at a time with ``raw_decode`` from a
    buffer that holds one element and a chunk, so a 50 GB array needs no more memory than its
    largest element. A broken element ends the array: JSON has no line to resync on."""
    decoder = json.JSONDecoder()
    text = codecs.getincrementaldecoder("utf-8-sig")()
    buf, pos, line, eof = "", 0, 1, False

    def more(size: int = CHUNK) -> bool:
        nonlocal buf, pos, eof
        if eof:
            return False
        chunk = f.read(size)
        eof = not chunk
        buf = buf[pos:] + text.decode(chunk, final=eof)
        pos = 0
        return True

    def skip(chars: str) -> str:
        """Skip whitespace and ``chars``; the next other character ('' at the end)."""
        nonlocal pos, line
        while True:
            while pos < len(buf) and (buf[pos].isspace() or buf[pos] in chars):
                line += buf[pos] == "\n"
                pos += 1
            if pos < len(buf) or not more():
                return buf[pos] if pos < len(buf) else ""

    try:
        if skip("") != "[":
            raise DatasetError("is not a JSON array")
        pos += 1
        first = skip("")
        while first not in ("]", ""):
            start = line
            while True:
                try:
                    value, end = decoder.raw_decode(buf, pos)
                    break
                except json.JSONDecodeError as exc:
                    # the read-ahead doubles: each retry decodes the element from its start,
                    # so a chunk at a time made a 60 MB element cost 47 s
                    if len(buf) - pos > MAX_RECORD or not more(max(CHUNK, len(buf) - pos)):
                        yield (
                            start,
                            Malformed(
                                f"not valid JSON ({_short(exc)}); the rest of the array is not read"
                            ),
                        )
                        return
                except RecursionError:
                    yield start, Malformed("nested too deeply; the rest of the array is not read")
                    return
            line += buf.count("\n", pos, end)
            pos = end
            yield start, _record(value)
            # exactly one comma between elements, as JSON has it, and none before the "]"
            after = skip("")
            if after == ",":
                pos += 1
                first = skip("")
                if first == "]":
                    yield line, Malformed("a comma before ']'; the array ends there")
                    return
            elif after in ("]", ""):
                first = after
            else:
                yield (
                    line,
                    Malformed("no comma after an element; the rest of the array is not read"),
                )
                return
        if first == "":
            yield line, Malformed("the array is not closed (the file ends inside it)")
    except UnicodeDecodeError as exc:
        yield line, Malformed(f"not UTF-8 (byte {exc.start}); the rest is not read")


def json_document(f: io.BufferedReader, name: str) -> Iterator[Item]:
    """A JSON file: a top-level array (streamed), or an object whose one list-valued key
    holds the records (``{"data": [...]}``, read whole: objects are small by convention)."""
    if f.peek(64).lstrip(b"\xef\xbb\xbf \t\r\n")[:1] == b"[":
        yield from json_array(f)
        return
    data = f.read(MAX_RECORD + 1)
    if len(data) > MAX_RECORD:
        raise DatasetError(
            f"{name}: a JSON object over {MAX_RECORD:,} bytes; give a top-level array or JSON Lines"
        )
    try:
        value = files.parse_json(data, what=name)
    except files.FileReadError as exc:
        raise DatasetError(str(exc)) from None
    if not isinstance(value, dict):
        raise DatasetError(f"{name} holds a JSON {type(value).__name__}, not records")
    lists = [k for k, v in value.items() if isinstance(v, list)]
    if len(lists) != 1:
        yield 1, value  # one record (or an object the shape check will refuse)
        return
    for i, item in enumerate(value[lists[0]], 1):
        yield i, _record(item)


def csv_rows(f: IO[bytes], delimiter: str = ",") -> Iterator[Item]:
    """Rows of a CSV (or TSV) file with a header line, as dicts keyed by the header."""
    csv.field_size_limit(MAX_RECORD)
    # A bad byte decodes to a lone surrogate, found row by row: strict decoding failed on the
    # 8 KB the header came in, blaming the header for row 2's byte and reading no row.
    stream = io.TextIOWrapper(f, encoding="utf-8-sig", errors="surrogateescape", newline="")
    reader = csv.reader(stream, delimiter=delimiter)
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise DatasetError(f"the CSV header cannot be read ({_short(exc)})") from None
    if any(lone_surrogate(cell) for cell in header or ()):
        raise DatasetError("the CSV header is not UTF-8")
    if not header:
        return
    while True:
        start = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            yield start, Malformed(f"not valid CSV ({_short(exc)})")
            continue
        if any(lone_surrogate(cell) for cell in row):
            yield start, Malformed("not UTF-8")
            continue
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            yield start, Malformed(f"{len(row)} fields where the header has {len(header)}")
            continue
        yield start, dict(zip(header, row, strict=True))


def _pyarrow(what: str) -> Any:
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise DatasetError(
            f"reading {what} needs pyarrow: pip install 'trainmem-tui[parquet]'"
        ) from None
    return pyarrow


def _text_size(value: Any) -> int:
    """Characters and bytes of the text a decoded row holds (its numbers count nothing)."""
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, dict):
        return sum(_text_size(v) for v in value.values())
    if isinstance(value, list):
        return sum(_text_size(v) for v in value)
    return 0


def _rows(batches: Iterable[Any]) -> Iterator[Item]:
    """Each row as a dict; a row over MAX_RECORD of text is malformed. A batch whose Arrow
    buffers pass BATCH_BYTES is decoded a row at a time (a 2.4 KB Parquet file of
    dictionary-encoded 20 MiB rows: 400 of them decoded at once were a MemoryError)."""
    row = 0
    for batch in batches:
        if batch.nbytes <= BATCH_BYTES:
            records: Iterable[Any] = batch.to_pylist()
        else:
            records = (batch.slice(i, 1).to_pylist()[0] for i in range(batch.num_rows))
        for record in records:
            row += 1
            size = _text_size(record)
            if size > MAX_RECORD:
                yield row, Malformed(f"longer than {MAX_RECORD:,} bytes of text")
            else:
                yield row, record


def parquet_rows(f: IO[bytes], columns: list[str] | None = None) -> Iterator[Item]:
    """Rows of a Parquet file, BATCH_ROWS at a time, reading only ``columns`` when given."""
    pa = _pyarrow("Parquet")
    try:
        pf = pa.parquet.ParquetFile(f)
        yield from _rows(pf.iter_batches(batch_size=BATCH_ROWS, columns=columns))
    except pa.ArrowException as exc:  # ArrowInvalid, ArrowIOError: a broken file
        raise DatasetError(f"not a readable Parquet file ({_short(exc)})") from None


def parquet_columns(f: IO[bytes]) -> list[str]:
    pa = _pyarrow("Parquet")
    try:
        return list(pa.parquet.ParquetFile(f).schema_arrow.names)
    except pa.ArrowException as exc:
        raise DatasetError(f"not a readable Parquet file ({_short(exc)})") from None


def arrow_rows(f: IO[bytes]) -> Iterator[Item]:
    """Rows of an Arrow IPC stream, as the datasets library writes its cache files
    (datasets 5.2 arrow_writer.py: pa.RecordBatchStreamWriter), or of an IPC file."""
    pa = _pyarrow("Arrow files")
    try:
        if f.read(6) == b"ARROW1":
            f.seek(0)
            reader = pa.ipc.open_file(f)
            batches: Iterable[Any] = (reader.get_batch(i) for i in range(reader.num_record_batches))
        else:
            f.seek(0)
            batches = pa.ipc.open_stream(f)
        yield from _rows(batches)
    except pa.ArrowException as exc:
        raise DatasetError(f"not a readable Arrow file ({_short(exc)})") from None


def open_records(path: Path, kind: str, columns: list[str] | None = None) -> Iterator[Item]:
    """The records of the file at ``path`` read as ``kind`` (see ``detect.file_kind``)."""
    name = files.show(path)
    try:
        with files.open_file(path, what="dataset") as (raw, _size):
            if kind == "parquet":
                yield from parquet_rows(raw, columns)
            elif kind == "arrow":
                yield from arrow_rows(raw)
            else:
                yield from _decompressed(_text_records(raw, kind, name), name)
    except OSError as exc:  # a read error
        raise DatasetError(f"cannot read {name}: {_short(exc)}") from None
    except files.FileReadError as exc:
        raise DatasetError(str(exc)) from None


def _text_records(raw: IO[bytes], kind: str, name: str) -> Iterator[Item]:
    if kind == "jsonl":
        return json_lines(_text_source(raw))
    if kind == "json":
        return json_document(_text_source(raw), f"dataset {name}")
    return csv_rows(_text_source(raw), "\t" if kind == "tsv" else ",")


def _decompressed(records: Iterator[Item], name: str) -> Iterator[Item]:
    """``records`` with a broken gzip stream as one DatasetError naming the last line read:
    zlib.error (a corrupt body) is no OSError, and BadGzipFile's own words are better than
    the OSError message files.open_file would give it."""
    last = 0
    try:
        for item in records:
            last = item[0]
            yield item
    except (gzip.BadGzipFile, zlib.error) as exc:
        after = f" after line {last:,}" if last else ""
        raise DatasetError(f"{name}: the gzip data is corrupt{after} ({_short(exc)})") from None
    except EOFError:
        after = f" after line {last:,}" if last else ""
        raise DatasetError(f"{name}: the gzip data ends early{after} (a truncated file?)") from None
