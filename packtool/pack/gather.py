"""Reading tokens for the rows straight from Arrow buffers: no Python objects per token.

tokenized table (chunked, maybe sliced or memory-mapped from the cache)
  input_ids  chunk 0 values [....] offsets    chunk 1 values [....] offsets ...
  labels     chunk 0 values [....] offsets    ...
                    │ ListColumn: per dataset row the memory address of its first token
                    ▼
Located: per piece the address of its first token in both columns  ──copy_rows──▶  rows
                    │ the table is a cache file's memory map?
                    ▼
FileGather: pread each block's pieces into two staging buffers instead of touching the map

Addresses, not a list of chunk arrays: the kernels take int64 addresses (kernels.int32_at), so a
fresh process compiles nothing (a numba.typed.List compiles its methods in every process).
ListColumn keeps the chunks alive while the addresses are used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from packtool import kernels, schema
from packtool.data import labels
from packtool.data.tokenized import TokenizedData, arrow_numpy, column_numpy
from packtool.errors import PacktoolError
from packtool.pack.overflow import Pieces


class ListColumn:
    """A list<int> column of a (possibly chunked, sliced, memory-mapped) Arrow table, zero-copy;
    `mask`: a list<bool> loss_mask (packtool.data.labels), 1 bit a token, whose `first` are then
    bit addresses (8 x the byte's address + the bit, least significant first)."""

    def __init__(self, chunked, name: str, mask: bool = False):
        import pyarrow as pa

        kind = pa.bool_() if mask else pa.int32()
        self.chunks: list[Any] = []  # each chunk's values (kept alive: addresses)
        firsts, lens = [], []
        for ch in chunked.chunks:
            if not (pa.types.is_list(ch.type) or pa.types.is_large_list(ch.type)):
                raise PacktoolError(
                    f"column {name!r} has Arrow type {ch.type}; expected list<int32>"
                )
            if ch.null_count:
                raise PacktoolError(
                    f"column {name!r} has {ch.null_count} null rows; every example needs tokens"
                )
            if ch.type.value_type != kind:
                ch = ch.cast(pa.list_(kind))
            offsets = arrow_numpy(ch.offsets).astype(np.int64, copy=False)
            child = ch.values
            if child.null_count:
                raise PacktoolError(f"column {name!r} has null token ids")
            if mask:  # the values' bits: the child's offset counts bits
                self.chunks.append(child)
                firsts.append(8 * child.buffers()[1].address + child.offset + offsets[:-1])
            else:
                vals = arrow_numpy(child)
                self.chunks.append(vals)
                firsts.append(vals.ctypes.data + 4 * offsets[:-1])
            lens.append(np.diff(offsets))
        # address of each row's first token, and its length
        self.first = np.concatenate(firsts) if firsts else np.zeros(0, np.int64)
        self.length = np.concatenate(lens) if lens else np.zeros(0, np.int64)


def _locate_in_files(at: np.ndarray, files: list[tuple[str, int, int]]):
    """(file index, byte offset in that file) of every address in `at`, given the memory-mapped
    files [(path, base address, size)]; None if one lies in none of them."""
    if not files:
        return None
    base = np.array([f[1] for f in files], dtype=np.int64)
    end = base + np.array([f[2] for f in files], dtype=np.int64)
    order = np.argsort(base, kind="stable")
    f = order[np.maximum(np.searchsorted(base[order], at, side="right") - 1, 0)]
    if at.size and ((at < base[f]) | (at >= end[f])).any():
        return None
    return f, at - base[f]


def _table_rows(table) -> tuple[Any, np.ndarray | None]:
    """The Arrow table of tokenized data and its row mapping (a datasets.Dataset after select or
    shuffle has one), if any."""
    import pyarrow as pa

    if isinstance(table, pa.Table):
        return table, None
    indices = getattr(table, "_indices", None)
    mapping = None if indices is None else column_numpy(indices, indices.column_names[0], np.int64)
    return getattr(table.data, "table", table.data), mapping


@dataclass
class Located:
    """Pieces located in the Arrow buffers: piece p's tokens are at address ids_at[p], its labels
    at lab_at[p] (piece_len[p] int32 values each; `ids` and `lab` keep that memory alive)."""

    ids: ListColumn | None  # (None: the pieces are in files only, read by a FileGather)
    lab: ListColumn | None
    ids_at: np.ndarray
    lab_at: np.ndarray
    source: np.ndarray  # source_index per piece
    loss_cut_tails: int  # loss tokens in the cut-off tails of truncated examples
    masked: bool = False  # lab_at: each piece's first loss_mask bit address, not int32 labels
    unmask: Any = None  # () -> (labels ListColumn, lab_at): a masked table's labels, built

    def stage(self, pcs: np.ndarray, piece_len: np.ndarray):
        """copy_rows' token arguments for pieces `pcs`: the pieces where they are (labels, not a mask:
        file_gather builds a masked table's labels when no FileGather reads them)."""
        return pcs, piece_len, self.ids_at, self.lab_at


class FileGather:
    """Reads a block's pieces from the tokenization cache file with pread, into staging buffers.

    Why not read them through the memory map: documents are gathered in plan order, i.e. at random
    positions of the file, and the page cache maps large folios whole, so 5,000 random 3 KB reads
    map ~900 MB of a 1 GB file. Resident memory (VmHWM) would grow to the size of the input. With
    pread the pages stay in the page cache (shared, reclaimable) and this process holds only the
    staging buffers: 2 x one row group of tokens.

        staging  ids  [piece q0 tokens | piece q1 tokens | ...]   (block order)
                 labs [piece q0 labels | piece q1 labels | ...]
                 bits [q0 bytes | q1 bytes | ...]   a masked entry (data/labels.py): the bytes
                      that hold each piece's loss_mask bits (the first from bit lab_bit[q] on), and
                      labs = ids where the bit is 1 else -100 (kernels.labels_from_bits)
    """

    def __init__(
        self, paths: list[str], where: tuple, capacity: int, lab_bit: np.ndarray | None = None
    ):
        """where: ((file, byte offset) of each piece's tokens, the same of its labels or of the
        byte that holds its first loss_mask bit), file indexing `paths`; lab_bit: for a loss_mask,
        that bit's place in its byte (0-7), else None."""
        self.fds = np.array([os.open(path, os.O_RDONLY) for path in paths], dtype=np.int64)
        (self.ids_file, self.ids_offset), (self.lab_file, self.lab_offset) = where
        self.ids = np.empty(capacity, dtype=np.int32)
        self.lab = np.empty(capacity, dtype=np.int32)
        self.lab_bit = lab_bit
        self.bits = np.empty(capacity // 8 + 64 if lab_bit is not None else 0, dtype=np.uint8)

    def close(self) -> None:
        for fd in self.fds.tolist():
            os.close(fd)

    def stage(self, pcs: np.ndarray, piece_len: np.ndarray):
        """copy_rows' token arguments for pieces `pcs`, read into the staging buffers (Located.stage's
        shape: local pieces and lengths, the address of each in the staging buffers). The reads are
        one kernel call a column (kernels.pread_pieces: no Python per piece, no GIL)."""
        n = piece_len[pcs].astype(np.int64)
        first = np.zeros(len(pcs), dtype=np.int64)  # byte offset of piece q in the staging buffer
        np.cumsum(4 * n[:-1], out=first[1:])
        self._read(self.ids_file[pcs], self.ids_offset[pcs], 4 * n, self.ids.ctypes.data + first)
        if self.lab_bit is None:
            self._read(
                self.lab_file[pcs], self.lab_offset[pcs], 4 * n, self.lab.ctypes.data + first
            )
        else:
            bit = self.lab_bit[pcs]
            nb = (bit + n + 7) >> 3  # the bytes that hold piece q's bits
            at = np.zeros(len(pcs), dtype=np.int64)
            np.cumsum(nb[:-1], out=at[1:])
            need = int(nb.sum())
            if self.bits.size < need:
                self.bits = np.empty(need, dtype=np.uint8)
            self._read(self.lab_file[pcs], self.lab_offset[pcs], nb, self.bits.ctypes.data + at)
            kernels.labels_from_bits(
                self.bits, at, bit, n, self.ids, np.int32(schema.IGNORE_INDEX), self.lab
            )
        local = np.arange(len(pcs), dtype=np.int64)
        return local, n, self.ids.ctypes.data + first, self.lab.ctypes.data + first

    def _read(self, file_of, offset, nbytes, dest) -> None:
        """kernels.pread_pieces; a piece read short is read again once, from that piece on (a
        signal such as Ctrl-C interrupts pread with EINTR: its handler runs in between), and a
        second short read of the same piece is a truncated file."""
        done, again = 0, -1
        while (
            short := kernels.pread_pieces(
                self.fds, file_of[done:], offset[done:], nbytes[done:], dest[done:]
            )
        ) >= 0:
            if done + short == again:
                raise PacktoolError(
                    "the tokenization cache file was truncated while packing; run again"
                )
            done = again = done + short


def file_gather(data: TokenizedData, loc: Located, capacity: int) -> FileGather | None:
    """A pread gather when the tokenized table is memory-mapped from cache files (one, or one per
    input of a mixture), else None."""
    mapped = list(getattr(data, "mapped_files", None) or [])  # [(path, base address, size)]
    ids = _locate_in_files(loc.ids_at, mapped)
    lab_at = loc.lab_at >> 3 if loc.masked else loc.lab_at  # a mask's: the byte of its first bit
    lab = _locate_in_files(lab_at, mapped) if ids is not None else None
    if lab is None:
        if loc.masked:  # read from memory: the labels built once, before any writer thread
            loc.lab, loc.lab_at = loc.unmask()
            loc.masked = False
        return None
    if data.release_pages is not None:
        data.release_pages()  # pages mapped while locating: from here on the map is not read
    lab_bit = loc.lab_at & 7 if loc.masked else None
    return FileGather([m[0] for m in mapped], (ids, lab), capacity, lab_bit)


def locate_rows(table, lengths: np.ndarray, src: np.ndarray, pieces: Pieces, L: int) -> Located:
    """The pieces in `table` (a pyarrow Table, or a datasets.Dataset with its row mapping), whose
    rows have `lengths` and source indices `src`; checked against the table's own list lengths."""
    table, mapping = _table_rows(table)
    ids = ListColumn(table.column("input_ids"), "input_ids")
    masked = labels.stored(table) == labels.LOSS_MASK
    lab = ListColumn(table.column(labels.stored(table)), "labels", mask=masked)
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
    if pieces.truncated.size:  # a truncated example is one piece, from its start: what it keeps
        kept = np.zeros(lengths.shape[0], dtype=np.int64)
        kept[pieces.row] = pieces.length
        keep = kept[pieces.truncated]  # L, or a pair's cut (pack.pairs)
    if pieces.truncated.size and masked:
        tails = int(labels.loss_after(table, trow[pieces.truncated], keep).sum())
    elif pieces.truncated.size:
        tr = trow[pieces.truncated]
        tails = int(
            kernels.count_not_equal(
                lab.first[tr] + 4 * keep, lengths[pieces.truncated] - keep, schema.IGNORE_INDEX
            ).sum()
        )
    return Located(
        ids=ids,
        lab=lab,
        ids_at=ids.first[prow] + 4 * pieces.start,
        lab_at=lab.first[prow] + (1 if masked else 4) * pieces.start,  # (a mask's: in bits)
        source=src[pieces.row],
        loss_cut_tails=tails,
        masked=masked,
        unmask=lambda: _built_labels(table, prow, pieces.start),
    )


def _built_labels(table, prow: np.ndarray, start: np.ndarray) -> tuple[ListColumn, np.ndarray]:
    """A masked table's labels built in memory (4 bytes a token) and each piece's address in them."""
    lab = ListColumn(labels.labels_column(table), "labels")
    return lab, lab.first[prow] + 4 * start
