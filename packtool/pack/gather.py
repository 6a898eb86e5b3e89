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

The kernels take int64 addresses (int32_at), not a numba.typed.List of chunks, which would
compile its methods in every fresh process; ListColumn keeps the chunks alive meanwhile.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import Any

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from packtool import schema
from packtool.data import labels
from packtool.data.labels import arrow_numpy, column_numpy
from packtool.data.tokenized import TokenizedData
from packtool.errors import PacktoolError
from packtool.pack.overflow import Pieces


class ListColumn:
    """A list<int> column of a (chunked, sliced, memory-mapped) Arrow table, zero-copy: per row the
    address of its first token and its length; `mask`: a list<bool> loss_mask, whose `first` are
    then bit addresses (8 x the byte's address + the bit, least significant first)."""

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
    """The Arrow table and its row mapping (a datasets.Dataset after select or shuffle), if any."""
    import pyarrow as pa

    if isinstance(table, pa.Table):
        return table, None
    indices = getattr(table, "_indices", None)
    mapping = None if indices is None else column_numpy(indices, indices.column_names[0], np.int64)
    return getattr(table.data, "table", table.data), mapping


@dataclass
class Located:
    """Piece p's tokens at address ids_at[p], its labels at lab_at[p] (`ids`, `lab` keep them alive)."""

    ids: ListColumn | None  # (None: the pieces are in files only, read by a FileGather)
    lab: ListColumn | None
    ids_at: np.ndarray
    lab_at: np.ndarray
    source: np.ndarray  # source_index per piece
    loss_cut_tails: int  # loss tokens in the cut-off tails of truncated examples
    masked: bool = False  # lab_at: each piece's first loss_mask bit address, not int32 labels
    unmask: Any = None  # () -> (labels ListColumn, lab_at): a masked table's labels, built

    def stage(self, pcs: np.ndarray, piece_len: np.ndarray):
        """copy_rows' token arguments for pieces `pcs`, where they are (labels: file_gather built them)."""
        return pcs, piece_len, self.ids_at, self.lab_at


class FileGather:
    """Reads a block's pieces from the tokenization cache file with pread, into staging buffers:
    through the memory map, random reads in plan order would map large folios whole (5,000 3 KB
    reads map ~900 MB of a 1 GB file) and resident memory would grow to the input's size.

        staging  ids  [piece q0 tokens | piece q1 tokens | ...]   (block order)
                 labs [piece q0 labels | piece q1 labels | ...]
                 bits [q0 bytes | q1 bytes | ...]   a masked entry (data/labels.py): the bytes
                      that hold each piece's loss_mask bits (the first from bit lab_bit[q] on), and
                      labs = ids where the bit is 1 else -100 (labels_from_bits)
    """

    def __init__(
        self, paths: list[str], where: tuple, capacity: int, lab_bit: np.ndarray | None = None
    ):
        """where: (file, byte offset) of each piece's tokens, and of its labels or of the byte of
        its first loss_mask bit; lab_bit: for a loss_mask, that bit's place in its byte (0-7)."""
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
        """copy_rows' token arguments for pieces `pcs` (as Located.stage), read into the staging
        buffers by one pread_pieces call a column."""
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
            labels_from_bits(
                self.bits, at, bit, n, self.ids, np.int32(schema.IGNORE_INDEX), self.lab
            )
        local = np.arange(len(pcs), dtype=np.int64)
        return local, n, self.ids.ctypes.data + first, self.lab.ctypes.data + first

    def _read(self, file_of, offset, nbytes, dest) -> None:
        """pread_pieces; a piece read short (EINTR: a signal) is read again once, from that piece on;
        a second short read of the same piece is a truncated file."""
        done, again = 0, -1
        while (
            short := pread_pieces(
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
    input of a mixture), else None. It changes `loc`: with None and a loss mask, `loc` is given the
    labels built in memory (before any writer thread); with a gather, the map's pages are released."""
    mapped = data.mapped_files  # [(path, base address, size)]
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


def locate_rows(table, lengths: np.ndarray, src: np.ndarray, pieces: Pieces) -> Located:
    """The pieces in `table` (a pyarrow Table or a datasets.Dataset), checked against its lengths."""
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
        tr, cut = trow[pieces.truncated], lengths[pieces.truncated] - keep
        if masked:
            tails = int(labels.loss_after(table, tr, keep).sum())
        else:
            tails = int(count_not_equal(lab.first[tr] + 4 * keep, cut, schema.IGNORE_INDEX).sum())
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


# ---------------------------------------------------------------------------------------------
# Gather kernels for the shard writer. A piece (a whole example, its truncated head, or one split
# part) is piece_len[p] int32 values at address ids_at[p], kept alive by the caller meanwhile.
# ---------------------------------------------------------------------------------------------


def int32_at(address, n):
    """The n int32 values at memory `address`, no copy (compiled: the overload below)."""
    return np.ctypeslib.as_array((ctypes.c_int32 * int(n)).from_address(int(address)))


@intrinsic
def _int32_pointer(typingctx, address):
    """int64 address -> int32* (an LLVM inttoptr)."""
    sig = types.CPointer(types.int32)(types.int64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.CPointer(types.int32)))

    return sig, codegen


@overload(int32_at, jit_options={"cache": True})
def _int32_at_compiled(address, n):
    return lambda address, n: carray(_int32_pointer(address), n)


def pread_into(fd, address, n, offset):
    """pread(2) into memory at `address`: the bytes read, -1 on an error (compiled: libc's pread)."""
    try:
        return os.preadv(
            int(fd), [(ctypes.c_char * int(n)).from_address(int(address))], int(offset)
        )
    except OSError:
        return -1


@intrinsic
def _pread(typingctx, fd, address, n, offset):
    """libc pread(int fd, void *buf, size_t n, off_t offset), by symbol name (so cache=True keeps it)."""
    sig = types.int64(types.int64, types.int64, types.int64, types.int64)

    def codegen(context, builder, signature, args):
        i64, ptr = ir.IntType(64), ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(i64, [ir.IntType(32), ptr, i64, i64])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "pread")
        fd, address, n, offset = args
        fd32 = builder.trunc(fd, ir.IntType(32))
        return builder.call(fn, [fd32, builder.inttoptr(address, ptr), n, offset])

    return sig, codegen


@overload(pread_into, jit_options={"cache": True})
def _pread_into_compiled(fd, address, n, offset):
    return lambda fd, address, n, offset: _pread(fd, address, n, offset)


@njit(cache=True, nogil=True)
def pread_pieces(fds, file_of, file_offset, nbytes, dest):
    """Piece q: nbytes[q] bytes of file fds[file_of[q]] at file_offset[q] into memory at address
    dest[q], one pread each without the GIL.  Returns the first piece read short (or failed), or -1."""
    for q in range(file_of.shape[0]):
        if pread_into(fds[file_of[q]], dest[q], nbytes[q], file_offset[q]) != nbytes[q]:
            return q
    return -1


@njit(cache=True, nogil=True)
def layout_rows(
    rows,
    row_offsets,
    doc_order,
    piece_len,
    slot_len,
    input_ids,
    labels,
    position_ids,
    document_id,
    pad_id,
    ignore_index,
):
    """Lay out plan rows `rows` (in shard order) into preallocated int32 [len(rows), L] arrays.

        input_ids     . . . pad . . . | pad pad   (documents: filled by copy_rows; slot_len [4, 3])
        labels        . . . -100. . . | -100 -100 (a document's padding: pad id, -100)
        position_ids  0 1 2 3   0 1 2 | 0   1     restart per document; pad tail is its own run
        document_id   0 0 0 0   1 1 1 | -1  -1    a document's padding belongs to it

    Returns (seq_offsets int64[k+1], pieces int64[m], dest_col int64[m], num_tokens int64[k]):
    row j holds pieces[seq_offsets[j]:seq_offsets[j+1]], piece q starting at column dest_col[q].
    """
    k = rows.shape[0]
    pack_len = input_ids.shape[1]
    seq_offsets = np.zeros(k + 1, dtype=np.int64)
    seq_offsets[1:] = np.cumsum(row_offsets[rows + 1] - row_offsets[rows])
    m = seq_offsets[k]
    pieces = np.empty(m, dtype=np.int64)
    dest_col = np.empty(m, dtype=np.int64)
    num_tokens = np.empty(k, dtype=np.int64)
    for j in range(k):
        r = rows[j]
        col = 0
        real = 0
        q = seq_offsets[j]
        for doc in range(row_offsets[r + 1] - row_offsets[r]):
            p = doc_order[row_offsets[r] + doc]
            n = piece_len[p]
            s = slot_len[p]
            pieces[q] = p
            dest_col[q] = col
            for t in range(s):
                position_ids[j, col + t] = t
                document_id[j, col + t] = doc
            for t in range(n, s):
                input_ids[j, col + t] = pad_id
                labels[j, col + t] = ignore_index
            col += s
            real += n
            q += 1
        num_tokens[j] = real
        for t in range(pack_len - col):
            input_ids[j, col + t] = pad_id
            labels[j, col + t] = ignore_index
            position_ids[j, col + t] = t
            document_id[j, col + t] = -1
    return seq_offsets, pieces, dest_col, num_tokens


@njit(cache=True, nogil=True)
def copy_rows(
    seq_offsets,
    dest_col,
    pieces,
    piece_len,
    ids_at,
    lab_at,
    input_ids,
    labels,
    ignore_index,
):
    """Copy each piece's tokens (at ids_at[p]) and labels (at lab_at[p]) into its row; mask every
    document's first label. Returns (num_loss_tokens int64[k], documents whose first label had loss).
    """
    k = seq_offsets.shape[0] - 1
    num_loss = np.zeros(k, dtype=np.int64)
    first_loss = 0
    for j in range(k):
        row = labels[j]
        loss = 0
        for q in range(seq_offsets[j], seq_offsets[j + 1]):
            p = pieces[q]
            n = piece_len[p]
            c = dest_col[q]
            input_ids[j, c : c + n] = int32_at(ids_at[p], n)
            row[c : c + n] = int32_at(lab_at[p], n)
            if row[c] != ignore_index:
                first_loss += 1
            row[c] = ignore_index
            for t in range(c + 1, c + n):  # branchless count, not a test in the copy
                loss += row[t] != ignore_index
        num_loss[j] = loss
    return num_loss, first_loss


@njit(cache=True, nogil=True)
def count_not_equal(at, n, ignore_index):
    """Per i: how many of the n[i] int32 values at address at[i] differ from ignore_index."""
    out = np.zeros(at.shape[0], dtype=np.int64)
    for i in range(at.shape[0]):
        out[i] = np.count_nonzero(int32_at(at[i], n[i]) != ignore_index)
    return out


@njit(cache=True, nogil=True)
def labels_from_bits(packed, at, bit, n, ids, ignore_index, out):
    """Labels of pieces whose loss-mask bits were read into `packed`: piece q's n[q] bits from bit
    bit[q] of byte at[q]; out[k] = ids[k] where the token's bit is 1, else ignore_index (pieces
    back to back in `ids` and `out`). Returns the number of tokens written."""
    k = 0
    for q in range(n.shape[0]):
        b = at[q] * 8 + bit[q]
        for _ in range(n[q]):
            out[k] = ids[k] if (packed[b >> 3] >> (b & 7)) & 1 else ignore_index
            b += 1
            k += 1
    return k
