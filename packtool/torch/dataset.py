"""PackedDataset and PairDataset: a pack folder (manifest + shards) as a map-style torch dataset, one
item per row, read from a cache of each Parquet shard as an uncompressed Arrow IPC file.

    OUT/manifest.json        pack_len, pad_id, counts.rows, shards [{file, rows, sha256}]
    OUT/data/train-00000-of-00002.parquet   compressed pages: cannot be memory-mapped
        |  convert_shard (once; record batch by record batch, RAM stays bounded; atomic)
    <cache_dir>/<sha256>.arrow              uncompressed, ~16 bytes per token slot (3-4x the Parquet)
        |  MappedShard (memory map, zero-copy)
    ds[i]                                   one row, copied out of the page cache into torch tensors

The rows themselves are the schema's (docs/ARCHITECTURE.md, "Schema"); this module finds them,
checks the manifest adds up, and turns one row into torch tensors. Refusals name the shard and the
fix (`re-run packtool pack`); the shard's schema is checked by `schema.shard_schema_problems` (the
same check verify reports).

A preference pack (`"task": "preference"`) is schema v1 plus one list column, `side` (list<int8>,
aligned with seq_lengths and source_index): 0 = chosen, 1 = rejected. A pair is two adjacent
documents of one row, chosen first, both carrying the pair's source_index (its input record);
documents 2j and 2j+1 of a row are the row's pair j. Both sides start with the same prompt tokens:

    slot          0  1  2  3  4 | 5  6  7  8 | 9 10 11 | 12 13 14 15 | 16 17
    input_ids     P  P  c  c  c | P  P  r  r | Q  Q  d | Q  Q  e  e  | pad pad
    labels       -100 -100 c c c|-100 -100 r r|-100 -100 d|-100 -100 e e|-100 -100
    seq_lengths   [5, 4, 3, 4]      side [0, 1, 0, 1]      source_index [7, 7, 12, 12]

Fixed-docs packs (--fixed-docs --max-docs K, K >= 2) list K entries per row, at most K // 2 pairs,
empty ones (length 0) last; with --pad-to-multiple, seq_lengths_unpadded holds the real lengths, as
for SFT.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import torch

from packtool import schema
from packtool.errors import PacktoolError
from packtool.io.files import cache_root, sha256_file
from packtool.torch.collate import PackedCollator, PairCollator

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
    pairs: bool = False,
) -> None:
    """Write Parquet shard `src` (rows of `pack_len` tokens, `rows` of them per the manifest; with
    seq_lengths_unpadded when the manifest says `padded`, with `side` when it is a preference pack,
    `pairs`) to the Arrow IPC file `dest`, atomically. PacktoolError when the shard is missing,
    does not match `sha256` (checked only with verify_checksum), breaks the shard schema or has
    another row count."""
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
    problems = schema.shard_schema_problems(got, pack_len, padded, pairs)
    if problems:
        raise PacktoolError(
            f"shard {src} is not a schema v{schema.SCHEMA_VERSION} shard with pack_len {pack_len}: "
            f"{'; '.join(problems)}; re-run `packtool pack`"
        )
    if pf.metadata.num_rows != rows:
        raise PacktoolError(
            f"shard {src} has {pf.metadata.num_rows} rows, the manifest says {rows}"
        )
    expected = schema.arrow_schema(pack_len, padded, pairs)
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


class PackedDataset(torch.utils.data.Dataset):
    """Map-style dataset over a pack folder (`OUT/manifest.json` + `OUT/data/*.parquet`).

    The first item read converts every shard not yet cached (in each process that reads: DataLoader
    workers too) into the Arrow IPC cache under `cache_dir` (default `arrow/` in packtool's cache:
    $PACKTOOL_CACHE, $XDG_CACHE_HOME/packtool or ~/.cache/packtool; delete it to reclaim the space),
    memory-mapped from then on: nothing is loaded up front, and `ds[i]` copies one row out of the
    page cache, as `datasets` does without fingerprints.

    Item: `input_ids`, `labels`, `position_ids` (int64 tensors of `pack_len`), `document_id` (int32),
    `seq_lengths` (int32 tensor), `source_index` (int64 tensor), `num_tokens`, `num_loss_tokens` (int);
    in a pack written with --pad-to-multiple N > 1 also `seq_lengths_unpadded` (int32 tensor).
    `layout` is the pack's (schema.Layout: pad_to_multiple, fixed_docs); give the collator
    `fixed_docs=ds.fixed_docs` for static cu_seqlens shapes (`ds.collator(mode)` does).

    verify_checksums=True hashes every shard against the manifest before converting (slow on
    big packs; `packtool verify` is the place for that).

    The manifest's `task` must be this class's: an SFT pack (`task` absent or "sft") here, a
    preference pack (`"task": "preference"`) in `PairDataset`. Read as SFT, a preference pack
    would train the rejected answers: PacktoolError.
    """

    task = "sft"
    _collator_class = PackedCollator

    def __init__(
        self,
        folder: str | os.PathLike,
        *,
        cache_dir: str | os.PathLike | None = None,
        verify_checksums: bool = False,
    ):
        self.folder = Path(folder)
        manifest_path = self.folder / schema.MANIFEST
        if not manifest_path.is_file():
            raise PacktoolError(
                f"{self.folder} is not a pack folder: {schema.MANIFEST} is missing; "
                "create one with `packtool pack DATA --len 4096 --out DIR`"
            )
        self.manifest: dict[str, Any] = json.loads(manifest_path.read_text())
        task = self.manifest.get("task") or "sft"
        if task != self.task:
            raise PacktoolError(self._wrong_task(manifest_path, task))
        self.pack_len = int(self.manifest["pack_len"])
        shards = self.manifest.get("shards") or []
        if not shards:
            raise PacktoolError(f"{manifest_path} lists no shards; the pack is empty or unfinished")
        self.cache_dir = Path(cache_dir) if cache_dir is not None else cache_root() / "arrow"
        self.verify_checksums = verify_checksums
        self.shard_files = [self._shard_path(s["file"]) for s in shards]
        self.shard_rows = [int(s["rows"]) for s in shards]
        self._shard_sha = [s.get("sha256") for s in shards]
        self._shard_start = np.concatenate([[0], np.cumsum(self.shard_rows)]).astype(np.int64)
        total = self.manifest.get("counts", {}).get("rows")
        if total is not None and int(total) != int(self._shard_start[-1]):
            raise PacktoolError(
                f"{manifest_path}: counts.rows = {total} but the shards list {int(self._shard_start[-1])} "
                "rows; the pack is inconsistent, re-run `packtool pack`"
            )
        self.layout = schema.Layout.from_manifest(self.manifest)
        self._views: list[MappedShard] | None = None  # opened lazily (and again in each worker)

    def _wrong_task(self, manifest_path: Path, task: str) -> str:
        if task == "preference":
            return (
                f"{manifest_path} is a preference pack (chosen/rejected pairs): read it with "
                "packtool.torch.PairDataset; read as SFT it would train the rejected answers"
            )
        return f"{manifest_path} declares task {task!r}; PackedDataset reads SFT packs only"

    def _shard_path(self, file: str) -> Path:
        # the manifest names shards relative to the pack folder ("data/train-...parquet"); a bare
        # file name is taken to be inside data/
        rel = Path(file)
        return self.folder / (rel if len(rel.parts) > 1 else Path(schema.DATA_DIR) / rel)

    # -- properties ---------------------------------------------------------------------------------

    @property
    def pad_id(self) -> int | None:
        if self.manifest.get("pad_id") is not None:
            return int(self.manifest["pad_id"])
        return (self.manifest.get("tokenizer") or {}).get("pad_id")

    @property
    def fixed_docs(self) -> bool:
        """Every row lists exactly --max-docs documents (zeros at the end): static cu_seqlens."""
        return bool(self.layout.fixed_docs)

    def collator(self, mode: str = "hf", **kwargs):
        """A PackedCollator (PairDataset: a PairCollator) for this pack's layout (its fixed_docs)."""
        return self._collator_class(mode, fixed_docs=self.fixed_docs, **kwargs)

    @property
    def shard_offsets(self) -> np.ndarray:
        """int64[S+1]: rows of shard s are `shard_offsets[s]:shard_offsets[s+1]` of the dataset."""
        return self._shard_start.copy()

    def __len__(self) -> int:
        return int(self._shard_start[-1])

    # -- opening --------------------------------------------------------------------------------------

    def __getstate__(self):
        # DataLoader workers started with "spawn" get a pickled copy: reopen the maps there.
        state = self.__dict__.copy()
        state["_views"] = None
        return state

    def _open(self) -> list[MappedShard]:
        views = []
        for s, src in enumerate(self.shard_files):
            path = cache_path(self.cache_dir, src, self._shard_sha[s])
            if not path.is_file():
                convert_shard(
                    src,
                    path,
                    pack_len=self.pack_len,
                    rows=self.shard_rows[s],
                    sha256=self._shard_sha[s],
                    verify_checksum=self.verify_checksums,
                    padded=self.layout.padded,
                    pairs=self.task == "preference",
                )
            views.append(MappedShard(path, pack_len=self.pack_len, rows=self.shard_rows[s]))
        return views

    # -- access ----------------------------------------------------------------------------------------

    def locate(self, index: int) -> tuple[int, int]:
        """(shard, row within shard) of dataset row `index`."""
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(f"row {index} out of range for a pack of {n} rows")
        s = int(np.searchsorted(self._shard_start, index, side="right") - 1)
        return s, int(index - self._shard_start[s])

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self._views is None:
            self._views = self._open()
        s, r = self.locate(int(index))
        row = self._views[s].row(r)  # views into the memory map: copy what the item keeps
        item: dict[str, Any] = {
            name: torch.from_numpy(row[name].astype(np.int64))
            for name in ("input_ids", "labels", "position_ids")
        }
        # document_id, the list columns (seq_lengths_unpadded, a task's own such as `side`)
        copied = [n for n in row if n not in item and n not in schema.SCALAR_COLUMNS]
        item.update({name: torch.from_numpy(row[name].copy()) for name in copied})
        item.update({name: int(row[name]) for name in schema.SCALAR_COLUMNS})
        return item


class PairDataset(PackedDataset):
    """Map-style dataset over a preference pack: `PackedDataset`'s item plus `side` (int8 tensor,
    one entry per seq_lengths entry). An SFT pack is refused (PacktoolError): it has no pairs.
    `ds.collator(mode)` gives the `PairCollator` for this pack's layout."""

    task = "preference"
    _collator_class = PairCollator

    def _wrong_task(self, manifest_path: Path, task: str) -> str:
        return (
            f"{manifest_path} is not a preference pack (task {task!r}, no chosen/rejected pairs): "
            "read it with packtool.torch.PackedDataset"
        )

    @property
    def pairs(self) -> int | None:
        """The pack's pair count (manifest preference.pairs)."""
        n = (self.manifest.get("preference") or {}).get("pairs")
        return None if n is None else int(n)
