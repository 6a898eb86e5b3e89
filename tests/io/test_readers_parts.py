"""Parts of a file (readers.file_parts / part_batches), which the Ray engine reads in parallel:
together they hold every record of the file once, in order, with lines counted from each part's
start; the driver's offsets (lines and records of the earlier parts) give back the file's own."""

from __future__ import annotations

import json

import pytest

from packtool.config import ReadConfig
from packtool.io import readers

READ = ReadConfig()


def _records_of_parts(path, part_bytes):
    """(line, raw) of every record, over the parts, made absolute with the parts' line counts."""
    out, lines_before = [], 0
    for part in readers.file_parts(str(path), part_bytes):
        lines = None
        for b in readers.part_batches(str(path), READ, part, batch_records=7):
            out += [(lines_before + b.line_of(i), b.raw[i]) for i in range(len(b))]
            lines = b.lines_read if b.lines_read is not None else lines
        lines_before += lines or 0
    return out


@pytest.mark.parametrize("part_bytes", [1, 13, 64, 100, 1 << 20])
def test_json_lines_parts_hold_every_record_once_with_its_line(tmp_path, part_bytes):
    rows = [
        json.dumps({"messages": [{"role": "user", "content": "x" * (i % 17)}]}) for i in range(60)
    ]
    text = ""
    for i, r in enumerate(rows):
        text += r + "\n" + ("\n" if i % 9 == 0 else "") + ("   \n" if i % 13 == 0 else "")
    path = tmp_path / "a.jsonl"
    path.write_text(text.rstrip("\n"))  # the last line without its newline
    whole = [(b.line_of(i), b.raw[i]) for b in readers.part_batches(str(path), READ, None)
             for i in range(len(b))]  # fmt: skip
    parts = readers.file_parts(str(path), part_bytes)
    assert (len(parts) > 1) == (part_bytes < path.stat().st_size)
    assert _records_of_parts(path, part_bytes) == whole
    assert len(whole) == 60


def test_parts_of_compressed_and_json_files_are_the_whole_file(tmp_path):
    import gzip

    (tmp_path / "a.jsonl.gz").write_bytes(gzip.compress(b'{"text": "a"}\n' * 100))
    (tmp_path / "b.json").write_text(json.dumps([{"text": "a"}] * 100))
    for name in ("a.jsonl.gz", "b.json"):
        assert readers.file_parts(str(tmp_path / name), 10) == [None]


def test_parquet_parts_are_row_group_ranges(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": [f"row {i}" for i in range(95)]}), tmp_path / "a.parquet",
                   row_group_size=10)  # fmt: skip
    parts = readers.file_parts(str(tmp_path / "a.parquet"), 1)
    assert parts == [("groups", g, g + 1) for g in range(10)]
    got = [
        r["text"]
        for p in readers.file_parts(str(tmp_path / "a.parquet"), 200)
        for b in readers.part_batches(str(tmp_path / "a.parquet"), READ, p)
        for r in b.arrow.to_pylist()
    ]
    assert got == [f"row {i}" for i in range(95)]
    assert readers.file_parts(str(tmp_path / "a.parquet"), 1 << 30) == [None]


def test_part_batches_count_records_from_the_part_start(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_text("".join(json.dumps({"text": str(i)}) + "\n" for i in range(40)))
    second = readers.file_parts(str(path), path.stat().st_size // 2)[1]
    batches = list(readers.part_batches(str(path), READ, second, batch_records=8))
    assert batches[0].start == batches[0].offset == 0 and batches[0].lines[0] == 1
    assert batches[1].start == 8
    assert batches[-1].lines_read == sum(len(b) for b in batches)
