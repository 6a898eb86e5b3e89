"""Readers: the records behind a Located source (packtool.io.sources: which files, or which
Dataset), as a stream of raw records, batch by batch.

    file                                read with                       RawRecord.file / .line
    x.jsonl, x.ndjson (+ .gz .zst .bz2 .xz)   line by line, json.loads  the path / 1-based line
    x.json (+ .gz .zst .bz2 .xz)        whole file, json.loads          the path / None
    x.parquet                           pyarrow, 8192-row batches       the path / None
    a save_to_disk folder or hub id     its Arrow dataset               the folder or id

Records come in batches (`RawBatch`, one file each) exactly as stored (packtool.formats maps and
normalizes them); each --column is checked against the stream (formats.ColumnCheck). JSON Lines stay
bytes until the encode step parses them. A record's index counts every record read across all
files, malformed ones included: its `source_index`; messages name a record within its own file
(`data.jsonl:12`, `data.json record 3`). `cfg.limit` is applied here, so a limited run reads a prefix.

A `.json` file holds a list of records, one record, or a wrapper {"data": [{...}, ...]} (one key no
format reads, holding a list of objects); one whose first line is a whole object is JSON Lines.
Memory: jsonl one batch of lines (a line over io.files.max_record_bytes is read through and refused),
parquet one batch, Arrow memory-mapped, a .json file whole.
"""

from __future__ import annotations

import json
import lzma
import os
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import orjson

from packtool.config import ReadConfig
from packtool.data.tokenized import where
from packtool.errors import PacktoolError, UsageError
from packtool.formats.detect import ColumnCheck
from packtool.io.files import as_utf8, max_record_bytes, open_data, record_lines, text_codec
from packtool.io.sources import COMPRESSED, Located, data_kind, locate

BATCH_RECORDS = 1024  # records per batch
ARROW_BATCH_RECORDS = 8192  # rows per batch of Parquet / Arrow input: decoded in bulk, and often
# pre-tokenized, where a batch has a fixed overhead whatever its size
BATCH_BYTES = 8 << 20  # and at most about this much JSON text per batch


@dataclass(frozen=True)
class RawRecord:
    index: int  # 0-based position among all records read, across files, malformed ones included
    file: str  # path (or hub id) it came from
    line: int | None  # 1-based line for jsonl, None otherwise
    record: dict | None  # the parsed record, None when it could not be parsed
    error: str | None  # why not parsed, e.g. "malformed JSON: Expecting ',' delimiter (col 17)"
    position: int | None = None  # 0-based position within its own file (None: = index)

    @property
    def where(self) -> str:
        return where(self.file, self.line, self.index if self.position is None else self.position)


# --------------------------------------------------------------------------- public API


def iter_batches(
    located: Located, cfg: ReadConfig, batch_records: int = BATCH_RECORDS
) -> Iterator[RawBatch]:
    """Every record behind `located`, in a deterministic order, at most `cfg.limit` of them, in
    batches of at most `batch_records` records (and about BATCH_BYTES of JSON; Arrow sources in
    batches of ARROW_BATCH_RECORDS rows), each from one file."""
    if located.kind == "files":
        streams = (_file_batches(f, cfg, batch_records) for f in located.files)
    else:
        arrow_records = max(batch_records, ARROW_BATCH_RECORDS)
        streams = iter([_dataset_batches(located.dataset, located.label, arrow_records)])
    index = 0
    check = ColumnCheck(cfg) if cfg.columns else None
    for batches in streams:
        offset = 0  # records of this file before the batch
        for b in batches:
            n = len(b)
            if cfg.limit is not None and index + n > cfg.limit:
                b = b.head(cfg.limit - index)
                n = len(b)
            b.start, b.offset = index, offset
            if check is not None and not check.done:
                _feed(check, b)
            yield b
            index += n
            offset += n
            if index == cfg.limit:
                break
        if index == cfg.limit:  # stop before reading one more record (or opening a file)
            break
    if check is not None:  # every --column matched in some record read, or a usage error
        n = len(located.files)
        name = (
            located.label
            if located.kind != "files"
            else located.files[0]
            if n == 1
            else f"{n} files"
        )
        if (problem := check.problem(name)) is not None:
            raise UsageError(problem)


def _feed(check: ColumnCheck, b: RawBatch) -> None:
    """The batch's records into the --column check (stops early once every mapping matched)."""
    if b.arrow is not None:
        return check.feed_names(list(b.arrow.schema.names), _nested_names(b.arrow.schema), len(b))
    for i in range(len(b)):
        if check.done:
            return
        if b.raw is not None:
            check.feed_raw(b.raw[i])
        else:
            check.feed(b.records[i])


def _nested_names(schema) -> set[str]:
    """Field names inside list and struct columns (the keys of turns)."""
    import pyarrow as pa

    out: set[str] = set()
    todo = [f.type for f in schema]
    while todo:
        t = todo.pop()
        if pa.types.is_struct(t):
            for j in range(t.num_fields):
                out.add(t.field(j).name)
                todo.append(t.field(j).type)
        elif pa.types.is_list(t) or pa.types.is_large_list(t):
            todo.append(t.value_type)
    return out


def iter_records(source: str, cfg: ReadConfig) -> Iterator[RawRecord]:
    """Every record behind `source`, one at a time (inspect, tests): located now, read lazily."""
    located = locate(source, cfg.split)

    def gen():
        for b in iter_batches(located, cfg, 256):
            records, errors = b.parsed()
            for i in range(len(b)):
                yield RawRecord(
                    b.start + i, b.file, b.line_of(i), records[i], errors[i], b.offset + i
                )

    return gen()


# --------------------------------------------------------------------------- batches


@dataclass
class RawBatch:
    """Consecutive records of one file, as read, with their provenance.

        start     source_index of the first record (set by iter_batches; counts every record read)
        offset    0-based position of the first record within its file (set by iter_batches)
        file      the path, hub id or save_to_disk folder they came from
        fmt       the format its file's records are normalized with, set by the tokenization
                  pipeline per file (None: the encode step's own)
        lines_read  on the last batch of a part of a file (part_batches): the part's lines
        lines     1-based line of each record (JSON Lines), else None
        payload   exactly one of: raw (JSON text per record, unparsed; with errors where a line was
                  refused as read, b"" for it), records (parsed dicts, None where unreadable, with
                  errors), arrow (a pyarrow RecordBatch)

    Picklable, so a worker process can parse and encode it.
    """

    file: str
    lines: list[int] | None = None
    raw: list[bytes] | None = None
    records: list[dict | None] | None = None
    errors: list[str | None] | None = None
    arrow: Any = None
    start: int = 0
    offset: int = 0
    fmt: str | None = None
    lines_read: int | None = None

    def __len__(self) -> int:
        if self.raw is not None:
            return len(self.raw)
        if self.records is not None:
            return len(self.records)
        return self.arrow.num_rows

    def head(self, n: int) -> RawBatch:
        """The first n records (without lines_read: a part's count)."""
        cut = {k: getattr(self, k) for k in ("lines", "raw", "records", "errors", "arrow")}
        return replace(self, lines_read=None, **{k: v[:n] for k, v in cut.items() if v is not None})

    def line_of(self, i: int) -> int | None:
        return self.lines[i] if self.lines is not None else None

    def position(self, i: int) -> int:
        """0-based position of record i of the batch within its file."""
        return self.offset + i

    def where(self, i: int) -> str:
        """Record i of the batch named within its file (data.tokenized.where), for messages."""
        return where(self.file, self.line_of(i), self.offset + i)

    def parsed(self) -> tuple[list[dict | None], list[str | None]]:
        """(record or None, why not) per record; JSON lines are parsed here."""
        if self.raw is not None:
            refused = self.errors or [None] * len(self.raw)
            rows = [
                (None, e) if e else parse_json_record(r)
                for r, e in zip(self.raw, refused, strict=True)
            ]
            return [r for r, _ in rows], [e for _, e in rows]
        if self.records is not None:
            return self.records, self.errors or [None] * len(self.records)
        return self.arrow.to_pylist(), [None] * self.arrow.num_rows

    def column_names(self) -> list[str] | None:
        return list(self.arrow.schema.names) if self.arrow is not None else None


def parse_json_record(raw: bytes) -> tuple[dict | None, str | None]:
    """One JSON object from bytes: (record, None) or (None, why). Never raises.

    orjson first; where it refuses, the standard library decides (NaN/Infinity literals, integers
    beyond 64 bits). Lone surrogate escapes (no tokenizer can encode them) are errors."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        if "surrogate in string" in str(e):
            return (
                None,
                f"invalid JSON string: {str(e).split(':')[0]} (col {e.colno}); a lone \\ud800-\\udfff escape is not text",
            )
        if "depth limit" in str(e):
            return None, f"malformed JSON: nested deeper than 1024 levels (col {e.colno})"
        try:
            obj = json.loads(raw)  # bytes: UTF-8 (a BOM is accepted)
        except (ValueError, RecursionError) as e2:
            return None, _json_error(e2, whole=False)
    why = _not_an_object(obj)
    return (None, why) if why else (obj, None)


def _json_error(e: Exception, whole: bool) -> str:
    """Why json.loads refused a record (or, `whole`, a whole .json file)."""
    if isinstance(e, json.JSONDecodeError):
        if whole:
            return f"malformed JSON at line {e.lineno} col {e.colno}: {e.msg}"
        return f"malformed JSON: {e.msg} (col {e.colno})"
    if isinstance(e, UnicodeDecodeError):
        return f"not valid UTF-8: {e.reason}" + ("" if whole else f" (byte {e.start + 1})")
    if isinstance(e, RecursionError):
        return "malformed JSON: nested too deeply"
    return f"malformed JSON: {str(e).split(';')[0]}"  # e.g. an integer of more than 4300 digits


# --------------------------------------------------------------------------- per-file readers


def _file_batches(
    path: str, cfg: ReadConfig, batch_records: int, part: tuple | None = None
) -> Iterator[RawBatch]:
    kind = data_kind(path)
    errors: tuple[type[BaseException], ...] = (OSError, EOFError, lzma.LZMAError, zlib.error)
    if path.lower().endswith(".zst"):
        import zstandard

        errors += (zstandard.ZstdError,)
    try:
        if part is not None and part[0] == "bytes":
            yield from _jsonl_range_batches(path, part[1], part[2], batch_records)
        elif kind == "parquet":
            groups = range(part[1], part[2]) if part is not None else None
            yield from _parquet_batches(path, max(batch_records, ARROW_BATCH_RECORDS), groups)
        elif kind == "json":
            yield from _json_batches(path, cfg, batch_records)
        else:
            yield from _jsonl_batches(path, batch_records)
    except errors as e:  # unreadable, truncated or corrupt (compressed) data
        raise PacktoolError(f"cannot read {path!r}: {e}") from None


# --------------------------------------------------------------------------- parts of a file


PART_BYTES = 64 << 20  # a part of a file that one Ray task reads (JSON Lines bytes, Parquet data)


def file_parts(path: str, part_bytes: int = PART_BYTES) -> list[tuple | None]:
    """How the Ray engine cuts one file into parts read in parallel, in reading order:

        plain JSON Lines   ("bytes", a, b)     the lines that start at byte a <= x < b
        Parquet            ("groups", g0, g1)  row groups g0 .. g1 - 1, about part_bytes each
        anything else      None                the whole file (.json, compressed JSON Lines)

    `part_batches` reads one; its batches count records and lines from the part's start."""
    kind = data_kind(path)
    if kind == "jsonl" and not path.lower().endswith(COMPRESSED):
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            wide = text_codec(f.read(4))[0] != "utf-8"
        if size <= part_bytes or wide:  # UTF-16/32: one part (its lines are not cut at b"\n")
            return [None]
        parts = -(-size // part_bytes)
        step = -(-size // parts)  # parts of equal size, the last one maybe shorter
        return [("bytes", a, min(size, a + step)) for a in range(0, size, step)]
    if kind == "parquet":
        meta = _parquet_file(path).metadata
        parts, start, size = [], 0, 0
        for g in range(meta.num_row_groups):
            size += meta.row_group(g).total_byte_size
            if size >= part_bytes:
                parts.append(("groups", start, g + 1))
                start, size = g + 1, 0
        if start < meta.num_row_groups or not parts:
            parts.append(("groups", start, meta.num_row_groups))
        return parts if len(parts) > 1 else [None]
    return [None]


def part_batches(
    path: str, cfg: ReadConfig, part: tuple | None, batch_records: int = BATCH_RECORDS
) -> Iterator[RawBatch]:
    """The batches of one part of a file (`file_parts`), with start and offset counted from the
    part's first record and lines from its first line; no --limit (the caller cuts)."""
    offset = 0
    for b in _file_batches(path, cfg, batch_records, part):
        b.start = b.offset = offset
        offset += len(b)
        yield b


def _jsonl_range_batches(path: str, a: int, b: int, batch_records: int) -> Iterator[RawBatch]:
    """The lines of a plain JSON Lines file that start in [a, b), numbered from 1 at the first of
    them; the last batch (always yielded, maybe empty) says in `lines_read` how many lines (blank
    ones too) the range holds."""
    with open(path, "rb") as f:
        if a > 0:
            f.seek(a - 1)
            if f.read(1) != b"\n":
                f.readline()  # the line that starts before a belongs to the part before
        else:
            f.read(text_codec(f.peek(4)[:4])[1])  # a UTF-8 BOM (file_parts: UTF-8 only)
        each = record_lines(f, "utf-8", max_record_bytes())

        def lines():
            pos = f.tell()
            while pos < b and (line := next(each, None)) is not None:
                pos += line[0]
                yield line

        yield from _line_batches(path, enumerate(lines(), 1), batch_records, part=True)


def _json_type(obj: Any) -> str:
    return {list: "array", str: "string", type(None): "null", bool: "boolean"}.get(
        type(obj), "number"
    )


def _not_an_object(obj: Any) -> str | None:
    """Why a parsed JSON value is not a record, or None (a dict)."""
    return (
        None if isinstance(obj, dict) else f"record is a JSON {_json_type(obj)}, expected an object"
    )


def _jsonl_batches(path: str, batch_records: int) -> Iterator[RawBatch]:
    with open_data(path) as f:
        codec, bom = text_codec(f.peek(4)[:4])
        f.read(bom)
        each = record_lines(f, codec, max_record_bytes())
        yield from _line_batches(path, enumerate(each, 1), batch_records)


def _line_batches(path: str, numbered, batch_records: int, part=False) -> Iterator[RawBatch]:
    """(line number, io.files.record_lines item) pairs → batches of the non-blank lines (a refused
    line is a record: b"" with its error); for a `part` of a file the last batch is always yielded
    and carries the lines read (the last line number) in `lines_read`."""
    lines: list[int] = []
    raw: list[bytes] = []
    errors: list[str | None] = []
    size = lineno = 0

    def batch(lines_read=None) -> RawBatch:
        return RawBatch(
            path, lines, raw, errors=errors if any(errors) else None, lines_read=lines_read
        )

    for lineno, (_, text, why) in numbered:
        if why is None and not text.strip():
            continue
        lines.append(lineno)
        raw.append(text)
        errors.append(why)
        size += len(text)
        if len(raw) >= batch_records or size >= BATCH_BYTES:
            yield batch()
            lines, raw, errors, size = [], [], [], 0
    if part or raw:
        yield batch(lineno if part else None)


def _json_batches(path: str, cfg: ReadConfig, batch_records: int) -> Iterator[RawBatch]:
    with open_data(path) as f:
        data = f.read()
    data = as_utf8(path, data)
    if not data.strip():
        return
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError) as e:
        first = data.lstrip().split(b"\n", 1)[0]
        if getattr(e, "msg", None) == "Extra data" and parse_json_record(first)[0] is not None:
            yield from _jsonl_batches(path, batch_records)  # JSON Lines saved as .json
            return
        raise PacktoolError(f"{path}: {_json_error(e, whole=True)}") from None
    if isinstance(obj, dict):
        obj = _unwrap(obj, cfg)
    if isinstance(obj, dict):
        obj = [obj]
    if not isinstance(obj, list):
        raise PacktoolError(
            f"{path}: holds a JSON {_json_type(obj)}; expected a list of records or one record"
        )
    for a in range(0, len(obj), batch_records):
        items = obj[a : a + batch_records]
        errors = [_not_an_object(x) for x in items]
        records = [None if e else x for x, e in zip(items, errors, strict=True)]
        yield RawBatch(path, records=records, errors=errors)


def _unwrap(obj: dict, cfg: ReadConfig) -> dict | list:
    """{"data": [{...}, ...]} -> the list; any other object is one record (see module docstring)."""
    from packtool.formats.detect import RECORD_FIELDS

    if len(obj) != 1:
        return obj
    ((key, value),) = obj.items()
    if key in RECORD_FIELDS or key in {theirs for _, theirs in cfg.columns}:
        return obj
    if isinstance(value, list) and all(isinstance(v, dict) for v in value):
        return value
    return obj


def _parquet_file(path: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise PacktoolError(f"{path!r} is not a readable Parquet file: {e}") from None


def _parquet_batches(path: str, batch_records: int, groups=None) -> Iterator[RawBatch]:
    import pyarrow as pa

    pf = _parquet_file(path)
    try:  # one row group at a time: a single iter_batches over the file keeps every decoded page
        groups = range(pf.num_row_groups) if groups is None else groups
        for group in groups:  # (pyarrow 26: memory grew by the file's size)
            for batch in pf.iter_batches(batch_size=batch_records, row_groups=[group]):
                yield RawBatch(path, arrow=batch)
    except pa.ArrowException as e:
        raise PacktoolError(f"{path!r}: cannot read Parquet data: {e}") from None


def _dataset_batches(ds: Any, label: str, batch_records: int) -> Iterator[RawBatch]:
    for table in ds.with_format("arrow").iter(batch_size=batch_records):
        for batch in table.to_batches():
            yield RawBatch(label, arrow=batch)
