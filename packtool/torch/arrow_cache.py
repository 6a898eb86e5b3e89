"""The Arrow cache behind `PackedDataset`: each Parquet shard once as an uncompressed Arrow IPC file.

Parquet pages are compressed, so they cannot be memory-mapped as they are. `convert_shard` rewrites
a shard, one record batch at a time (RAM stays bounded), as an uncompressed Arrow IPC file named by
the shard's sha256 (`cache_path`); later runs and other ranks reuse it. `MappedShard` memory-maps
that file and hands out numpy views of its rows (zero-copy), so nothing is loaded up front:

    OUT/data/train-00000-of-00002.parquet   compressed pages: cannot be memory-mapped
        |  convert_shard (once; record batch by record batch)
    <cache_dir>/<sha256>.arrow              uncompressed, ~16 bytes per token slot (3-4x the Parquet)
        |  MappedShard (memory map, zero-copy)
    row(r)                                  numpy views of one row: the caller copies what it keeps

Refusals name the shard and the fix (`re-run packtool pack`); the shard's schema is checked by the
one shard-schema check, `schema.shard_schema_problems` (the same one verify reports).
numpy and pyarrow only: no torch here.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np

from packtool import schema
from packtool.errors import PacktoolError
from packtool.io.files import sha256_file

# rows per record batch when converting Parquet -> Arrow IPC (bounded RAM)
_CONVERT_BATCH_ROWS = 256


def cache_path(cache_dir: Path, shard: Path, sha256: str | None) -> Path:
    """Where shard `shard` is cached: `<cache_dir>/<sha256>.arrow`, by its sha256 from the manifest;
    without one, by what identifies this version of the file (path, size, mtime)."""
    if not sha256:
        st = shard.stat()
        key = f"{shard.resolve()}:{st.st_size}:{st.st_mtime_ns}"
        sha256 = hashlib.sha256(key.encode()).hexdigest()
    return cache_dir / f"{sha256}.arrow"


def convert_shard(
    src: Path,
    dest: Path,
    *,
    pack_len: int,
    rows: int,
    sha256: str | None = None,
    verify_checksum: bool = False,
    padded: bool = False,
    extra: tuple = (),
) -> None:
    """Write Parquet shard `src` (rows of `pack_len` tokens, `rows` of them per the manifest; with
    seq_lengths_unpadded when the manifest says `padded`) to the Arrow IPC file `dest`, atomically.
    `extra`: pyarrow fields of list columns the pack's task adds to schema v1 (a preference pack's
    `side`), each required with exactly that type and kept after the v1 columns. PacktoolError
    when the shard is missing, does not match `sha256` (checked only with verify_checksum), breaks
    the shard schema or has another row count."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not src.is_file():
        raise PacktoolError(
            f"shard {src} listed in the manifest is missing; re-run `packtool pack`"
        )
    if verify_checksum and sha256 and sha256_file(src) != sha256:
        raise PacktoolError(
            f"shard {src} does not match its sha256 in the manifest; re-run `packtool pack`"
        )
    pf = pq.ParquetFile(src)
    got = pf.schema_arrow
    problems = []
    for f in extra:  # the task's columns, checked here; the v1 check sees the shard without them
        i = got.get_field_index(f.name)
        if i < 0:
            problems.append(f"column {f.name} is missing")
        else:
            if not got.field(i).type.equals(f.type):
                problems.append(f"column {f.name} is {got.field(i).type}, expected {f.type}")
            got = got.remove(i)
    problems += schema.shard_schema_problems(got, pack_len, padded)
    if problems:
        raise PacktoolError(
            f"shard {src} is not a schema v{schema.SCHEMA_VERSION} shard with pack_len {pack_len}: "
            f"{'; '.join(problems)}; re-run `packtool pack`"
        )
    if pf.metadata.num_rows != rows:
        raise PacktoolError(
            f"shard {src} has {pf.metadata.num_rows} rows, the manifest says {rows}"
        )
    expected = schema.arrow_schema(pack_len, padded)
    for f in extra:
        expected = expected.append(pa.field(f.name, f.type, nullable=False))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        with pa.OSFile(str(tmp), "wb") as sink:
            with pa.ipc.new_file(sink, expected) as writer:
                for batch in pf.iter_batches(
                    batch_size=_CONVERT_BATCH_ROWS, columns=expected.names
                ):
                    writer.write_batch(pa.RecordBatch.from_arrays(batch.columns, schema=expected))
        os.replace(tmp, dest)  # atomic: concurrent ranks converting the same shard is harmless
    finally:
        if tmp.exists():
            tmp.unlink()


class MappedShard:
    """A cached shard, memory-mapped: `row(r)` gives numpy views of row r (no copy, no RAM up front).

    Each record batch of the IPC file is one chunk: the token columns as [rows, pack_len] int32
    views, the list columns as (offsets, values), the scalar columns as 1-D arrays."""

    def __init__(self, path: Path, *, pack_len: int, rows: int):
        import pyarrow as pa

        table = pa.ipc.open_file(pa.memory_map(str(path), "r")).read_all()  # zero-copy
        if table.num_rows != rows:
            raise PacktoolError(f"cached {path} has {table.num_rows} rows, expected {rows}")
        self.path = path
        # v1's list columns, seq_lengths_unpadded when present, and any column convert_shard was
        # given as `extra` (all of them lists aligned with seq_lengths)
        known = (*schema.TOKEN_COLUMNS, *schema.LIST_COLUMNS, *schema.SCALAR_COLUMNS)
        self.lists = schema.LIST_COLUMNS + tuple(n for n in table.column_names if n not in known)
        self.chunks: list[dict[str, Any]] = []
        for j in range(table.column("input_ids").num_chunks):
            c: dict[str, Any] = {}
            for name in schema.TOKEN_COLUMNS:
                arr = table.column(name).chunk(j)
                c[name] = arr.flatten().to_numpy(zero_copy_only=True).reshape(len(arr), pack_len)
            for name in self.lists:
                arr = table.column(name).chunk(j)
                c[name] = (arr.offsets.to_numpy(), arr.values.to_numpy(zero_copy_only=True))
            for name in schema.SCALAR_COLUMNS:
                c[name] = table.column(name).chunk(j).to_numpy(zero_copy_only=True)
            self.chunks.append(c)
        sizes = [len(c["num_tokens"]) for c in self.chunks]
        self.start = np.concatenate([[0], np.cumsum(sizes)])

    def __len__(self) -> int:
        return int(self.start[-1])

    def row(self, r: int) -> dict[str, Any]:
        """Row `r` of this shard: {column: numpy view} (token and list columns), scalars as numpy ints."""
        j = int(np.searchsorted(self.start, r, side="right") - 1)
        c, k = self.chunks[j], r - int(self.start[j])
        out: dict[str, Any] = {name: c[name][k] for name in schema.TOKEN_COLUMNS}
        for name in self.lists:
            offsets, values = c[name]
            out[name] = values[offsets[k] : offsets[k + 1]]
        for name in schema.SCALAR_COLUMNS:
            out[name] = c[name][k]
        return out
