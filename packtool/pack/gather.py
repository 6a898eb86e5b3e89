"""Reading tokens for the rows straight from Arrow buffers: no Python objects per token.

tokenized table (chunked, maybe sliced or memory-mapped from the cache)
  input_ids  chunk 0 values [....] offsets    chunk 1 values [....] offsets ...
  labels     chunk 0 values [....] offsets    ...
                    │ ListColumn: per dataset row its chunk and the offset of its first token
                    ▼
Located: per piece (chunk, base) in both columns  ──copy_rows──▶  rows
                    │ the table is a cache file's memory map?
                    ▼
FileGather: pread each block's pieces into two staging buffers instead of touching the map
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from packtool import kernels, schema
from packtool.data.tokenized import TokenizedData
from packtool.errors import PacktoolError
from packtool.pack.overflow import Pieces


class ListColumn:
    """A list<int> column of a (possibly chunked, sliced, memory-mapped) Arrow table, zero-copy."""

    def __init__(self, chunked, name: str):
        import pyarrow as pa
        from numba.typed import List

        self.values = List()
        self.addresses: list[int] = []  # address of each chunk's first value (for file offsets)
        bases, lens, chunk_of = [], [], []
        for c, ch in enumerate(chunked.chunks):
            if not (pa.types.is_list(ch.type) or pa.types.is_large_list(ch.type)):
                raise PacktoolError(
                    f"column {name!r} has Arrow type {ch.type}; expected list<int32>"
                )
            if ch.null_count:
                raise PacktoolError(
                    f"column {name!r} has {ch.null_count} null rows; every example needs tokens"
                )
            if ch.type.value_type != pa.int32():
                ch = ch.cast(pa.list_(pa.int32()))
            offsets = ch.offsets.to_numpy().astype(np.int64, copy=False)
            child = ch.values
            if child.null_count:
                raise PacktoolError(f"column {name!r} has null token ids")
            vals = child.to_numpy(zero_copy_only=False)
            vals.flags.writeable = False  # one numba type for every chunk
            self.values.append(vals)
            self.addresses.append(vals.ctypes.data)
            bases.append(offsets[:-1])
            lens.append(np.diff(offsets))
            chunk_of.append(np.full(len(ch), c, dtype=np.int64))
        if not len(self.values):
            self.values.append(np.zeros(1, dtype=np.int32)[:0])
            self.values[0].flags.writeable = False
        self.base = np.concatenate(bases) if bases else np.zeros(0, np.int64)
        self.length = np.concatenate(lens) if lens else np.zeros(0, np.int64)
        self.chunk = np.concatenate(chunk_of) if chunk_of else np.zeros(0, np.int64)
        # byte offset of each chunk's values in its file
        self.file_offsets: np.ndarray | None = None
        self.file_of: np.ndarray | None = None  # which mapped file holds each chunk

    def map_to_files(self, files: list[tuple[str, int, int]]) -> bool:
        """Locate every chunk inside one of the memory-mapped files [(path, base address, size)];
        False if a chunk lies in none (then the table is read through memory, not pread)."""
        offs = np.zeros(len(self.addresses), dtype=np.int64)
        which = np.full(len(self.addresses), -1, dtype=np.int64)
        for c, a in enumerate(self.addresses):
            for f, (_, base, size) in enumerate(files):
                if base <= a < base + size:
                    offs[c], which[c] = a - base, f
                    break
        if (which < 0).any():
            return False
        self.file_offsets, self.file_of = offs, which
        return True


def _table_rows(table) -> tuple[Any, np.ndarray | None]:
    """The Arrow table of tokenized data and its row mapping (a datasets.Dataset after select or
    shuffle has one), if any."""
    import pyarrow as pa

    if isinstance(table, pa.Table):
        return table, None
    indices = getattr(table, "_indices", None)
    mapping = None if indices is None else np.asarray(indices.column(0).to_numpy(), np.int64)
    return getattr(table.data, "table", table.data), mapping


@dataclass
class Located:
    """Pieces located in the Arrow buffers: piece p reads ids.values[ids_chunk[p]][ids_base[p]:...]."""

    ids: ListColumn
    lab: ListColumn
    ids_chunk: np.ndarray
    ids_base: np.ndarray
    lab_chunk: np.ndarray
    lab_base: np.ndarray
    source: np.ndarray  # source_index per piece
    loss_cut_tails: int  # loss tokens in the cut-off tails of truncated examples

    def stage(self, pcs: np.ndarray, piece_len: np.ndarray):
        """copy_rows' token arguments for pieces `pcs`: the pieces where they are."""
        ids, lab = (self.ids_chunk, self.ids_base), (self.lab_chunk, self.lab_base)
        return pcs, piece_len, *ids, *lab, self.ids.values, self.lab.values


class FileGather:
    """Reads a block's pieces from the tokenization cache file with pread, into staging buffers.

    Why not read them through the memory map: documents are gathered in plan order, i.e. at random
    positions of the file, and the page cache maps large folios whole, so 5,000 random 3 KB reads
    map ~900 MB of a 1 GB file. Resident memory (VmHWM) would grow to the size of the input. With
    pread the pages stay in the page cache (shared, reclaimable) and this process holds only the
    staging buffers: 2 x one row group of tokens. Cost: ~2 us a piece and column.

        staging  ids  [piece q0 tokens | piece q1 tokens | ...]   (block order)
                 labs [piece q0 labels | piece q1 labels | ...]
    """

    def __init__(self, paths: list[str], loc: Located, capacity: int):
        from numba.typed import List

        self.fds = [os.open(path, os.O_RDONLY) for path in paths]
        self.loc = loc
        self.ids = np.empty(capacity, dtype=np.int32)
        self.lab = np.empty(capacity, dtype=np.int32)
        self.ids_list, self.lab_list = List([self.ids]), List([self.lab])

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)

    def stage(self, pcs: np.ndarray, piece_len: np.ndarray):
        """copy_rows' token arguments for pieces `pcs`, read into the staging buffers (Located.stage's
        shape: local pieces and lengths, one chunk, the same base in both columns)."""
        loc = self.loc
        n = piece_len[pcs].astype(np.int64)
        start = np.zeros(len(pcs) + 1, dtype=np.int64)
        np.cumsum(n, out=start[1:])
        at = (4 * start).tolist()  # piece q: bytes at[q]:at[q + 1] of the staging buffer
        for col, chunk, base, buf in (
            (loc.ids, loc.ids_chunk[pcs], loc.ids_base[pcs], self.ids),
            (loc.lab, loc.lab_chunk[pcs], loc.lab_base[pcs], self.lab),
        ):
            view = memoryview(buf).cast("B")
            offsets = (col.file_offsets[chunk] + 4 * base).tolist()
            for q, (f, off) in enumerate(zip(col.file_of[chunk].tolist(), offsets, strict=True)):
                if os.preadv(self.fds[f], [view[at[q] : at[q + 1]]], off) != at[q + 1] - at[q]:
                    raise PacktoolError(
                        "the tokenization cache file was truncated while packing; run again"
                    )
        chunk, base = np.zeros(len(pcs), dtype=np.int64), start[:-1]
        local = np.arange(len(pcs), dtype=np.int64)
        return local, n, chunk, base, chunk, base, self.ids_list, self.lab_list


def file_gather(data: TokenizedData, loc: Located, capacity: int) -> FileGather | None:
    """A pread gather when the tokenized table is memory-mapped from cache files (one, or one per
    input of a mixture), else None."""
    mapped = list(getattr(data, "mapped_files", None) or [])  # [(path, base address, size)]
    if not mapped or not (loc.ids.map_to_files(mapped) and loc.lab.map_to_files(mapped)):
        return None
    if data.release_pages is not None:
        data.release_pages()  # pages mapped while locating: from here on the map is not read
    return FileGather([m[0] for m in mapped], loc, capacity)


def locate_rows(table, lengths: np.ndarray, src: np.ndarray, pieces: Pieces, L: int) -> Located:
    """The pieces in `table` (a pyarrow Table, or a datasets.Dataset with its row mapping), whose
    rows have `lengths` and source indices `src`; checked against the table's own list lengths."""
    table, mapping = _table_rows(table)
    ids = ListColumn(table.column("input_ids"), "input_ids")
    lab = ListColumn(table.column("labels"), "labels")
    trow = mapping if mapping is not None else np.arange(lengths.shape[0], dtype=np.int64)
    for col, name in ((ids, "input_ids"), (lab, "labels")):
        bad = np.flatnonzero(col.length[trow] != lengths)
        if bad.size:
            i = int(bad[0])
            raise PacktoolError(
                f"example {int(src[i])}: {name} has {int(col.length[trow[i]])} entries but its "
                f"length is {int(lengths[i])}; the tokenized data is inconsistent"
            )
    prow = trow[pieces.row]
    tails = 0
    if pieces.truncated.size:
        tr = trow[pieces.truncated]
        tails = int(
            kernels.count_not_equal(
                lab.chunk[tr],
                lab.base[tr] + L,
                lab.base[tr] + lengths[pieces.truncated],
                lab.values,
                schema.IGNORE_INDEX,
            ).sum()
        )
    return Located(
        ids=ids,
        lab=lab,
        ids_chunk=ids.chunk[prow],
        ids_base=ids.base[prow] + pieces.start,
        lab_chunk=lab.chunk[prow],
        lab_base=lab.base[prow] + pieces.start,
        source=src[pieces.row],
        loss_cut_tails=tails,
    )
