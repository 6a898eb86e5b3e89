"""Numba kernels on flat integer arrays: bin packing and the per-row gather of packed shards.

Bin packing (documents of integer length into rows of capacity L):

    order    stable counting sort, longest first, ties by lower index          O(n + L)
    FFD/FF   leftmost row with room: max-segment tree over row slots           O(n log R)
             (rows never opened hold capacity L, so "open a new row" is just the leftmost fit)
    BFD/BF   tightest row with room: rows bucketed by remaining capacity,      O(n log_64 L)
             a 4-level 64-ary bitset finds the smallest non-empty bucket >= x

Deterministic tie-breaks, mirrored by the brute-force oracle in tests/test_plan.py:
    first fit: the lowest row index that fits.
    best fit:  the smallest remaining capacity that fits; among rows with that capacity, the one that
               was touched (opened or given a document) most recently.  A row that reaches capacity 0
               or `max_docs` documents is closed and never offered again.
The core never imports pyarrow, rich or typer.
"""

from __future__ import annotations

import ctypes
import os

import numpy as np
from llvmlite import ir
from numba import carray, njit, types
from numba.core import cgutils
from numba.extending import intrinsic, overload

# ---------------------------------------------------------------------------------------------
# 64-ary bitset: 4 levels cover capacities up to 64**4 - 1 (16.7M tokens per row).
# Level k word w has bit b set when level k-1 word 64*w+b is non-zero (level 0: bucket c is
# non-empty).
# ---------------------------------------------------------------------------------------------

BITSET_LEVELS = 4
MAX_BITSET_SIZE = 64**BITSET_LEVELS

_ONE = np.uint64(1)
_ALL = np.uint64(0xFFFFFFFFFFFFFFFF)
_LOW = np.array(
    [0xFFFFFFFF, 0xFFFF, 0xFF, 0xF, 0x3, 0x1], dtype=np.uint64
)  # the low 32, 16, ... bits


@njit(cache=True, inline="always")
def _ctz(word):
    """Index of the lowest set bit of a non-zero uint64, by halving the width searched (no
    overflowing multiply, so it runs the same under NUMBA_DISABLE_JIT=1)."""
    n = 0
    for k in range(6):
        if (word & _LOW[k]) == 0:
            n += 32 >> k
            word >>= np.uint64(32 >> k)
    return n


@njit(cache=True)
def bitset_new(size):
    """Return (bits, offsets) for `size` bits, all clear."""
    offs = np.zeros(BITSET_LEVELS + 1, dtype=np.int64)
    words = size
    for lev in range(BITSET_LEVELS):
        words = (words + 63) >> 6
        offs[lev + 1] = offs[lev] + words
    return np.zeros(offs[BITSET_LEVELS], dtype=np.uint64), offs


@njit(cache=True, inline="always")
def bitset_set(bits, offs, i):
    for lev in range(BITSET_LEVELS):
        w = i >> 6
        pos = offs[lev] + w
        old = bits[pos]
        bits[pos] = old | (_ONE << np.uint64(i & 63))
        if old != 0:
            break
        i = w


@njit(cache=True, inline="always")
def bitset_clear(bits, offs, i):
    for lev in range(BITSET_LEVELS):
        w = i >> 6
        pos = offs[lev] + w
        new = bits[pos] & ~(_ONE << np.uint64(i & 63))
        bits[pos] = new
        if new != 0:
            break
        i = w


@njit(cache=True, inline="always")
def bitset_next(bits, offs, i):
    """Smallest set index >= i, or -1."""
    lev = 0
    while lev < BITSET_LEVELS:
        w = i >> 6
        if offs[lev] + w >= offs[lev + 1]:
            return -1
        word = bits[offs[lev] + w] & (_ALL << np.uint64(i & 63))
        if word != 0:
            idx = (w << 6) | _ctz(word)
            while lev > 0:
                lev -= 1
                idx = (idx << 6) | _ctz(bits[offs[lev] + idx])
            return idx
        i = w + 1
        lev += 1
    return -1


# ---------------------------------------------------------------------------------------------
# Packing kernels.  Lengths are int64 with 1 <= length <= pack_len (checked by the caller).
# ---------------------------------------------------------------------------------------------


@njit(cache=True)
def decreasing_order(lengths, pack_len):
    """Stable counting sort, longest first, equal lengths by lower index.

    Returns (seq int64[n] document indices, sizes int64[n] = lengths[seq]).
    """
    count = np.bincount(lengths, minlength=pack_len + 1)
    start = np.cumsum(count[::-1])[::-1] - count  # documents longer than each length
    seq = np.empty(lengths.shape[0], dtype=np.int64)
    for i in range(lengths.shape[0]):
        seq[start[lengths[i]]] = i
        start[lengths[i]] += 1
    return seq, np.repeat(np.arange(pack_len, -1, -1), count[::-1])  # sizes: the lengths sorted


@njit(cache=True)
def best_fit(sizes, pack_len, max_docs):
    """Best fit over `sizes` (lengths in processing order): the row with the least room that fits.

    Returns (row int64[n] per processing position, num_rows).  Working on the processing order
    keeps every array access sequential except the per-row state.
    """
    n = sizes.shape[0]
    row = np.empty(n, dtype=np.int64)
    head = np.full(pack_len + 1, -1, dtype=np.int32)  # capacity -> most recently touched row
    nxt = np.empty(n, dtype=np.int32)  # row -> next row in the same capacity bucket
    ndocs = np.zeros(n, dtype=np.int32)
    bits, offs = bitset_new(pack_len + 1)
    num_rows = 0
    for t in range(n):
        x = sizes[t]
        c = bitset_next(bits, offs, x)
        if c < 0:
            r = num_rows
            num_rows += 1
            cap = pack_len
        else:
            r = head[c]
            head[c] = nxt[r]
            if head[c] < 0:
                bitset_clear(bits, offs, c)
            cap = c
        row[t] = r
        cap -= x
        ndocs[r] += 1
        if cap > 0 and (max_docs == 0 or ndocs[r] < max_docs):
            if head[cap] < 0:
                bitset_set(bits, offs, cap)
            nxt[r] = head[cap]
            head[cap] = r
    return row, num_rows


@njit(cache=True)
def first_fit(sizes, pack_len, max_docs, max_rows):
    """First fit over `sizes` (lengths in processing order): the lowest-index row that fits.

    `max_rows` must bound the number of rows (any-fit: at most one row is <= half full among rows
    not closed by max_docs, so 2*ceil(total/L) + 1 + ceil(n/max_docs) is always enough).
    Returns (row int64[n] per processing position, num_rows).
    """
    n = sizes.shape[0]
    row = np.empty(n, dtype=np.int64)
    size = 1
    while size < max_rows:
        size *= 2
    tree = np.full(2 * size, pack_len, dtype=np.int32)  # max remaining capacity of the subtree
    ndocs = np.zeros(size, dtype=np.int32)
    num_rows = 0
    for t in range(n):
        x = sizes[t]
        if tree[1] < x:
            raise ValueError("first_fit: max_rows bound exceeded")
        node = 1
        while node < size:
            node = 2 * node
            if tree[node] < x:
                node += 1
        r = node - size
        row[t] = r
        if r >= num_rows:
            num_rows = r + 1
        ndocs[r] += 1
        v = tree[node] - x
        if max_docs > 0 and ndocs[r] >= max_docs:
            v = 0
        tree[node] = v
        node >>= 1
        while node >= 1:
            a = tree[2 * node]
            b = tree[2 * node + 1]
            m = a if a > b else b
            if tree[node] == m:
                break
            tree[node] = m
            node >>= 1
    return row, num_rows


@njit(cache=True)
def group_by_row(seq, row, num_rows):
    """CSR layout: row_offsets int64[R+1], doc_order int64[n] (documents seq[t], placement order)."""
    n = seq.shape[0]
    row_offsets = np.zeros(num_rows + 1, dtype=np.int64)
    row_offsets[1:] = np.cumsum(np.bincount(row, minlength=num_rows))
    fill = row_offsets[:-1].copy()
    doc_order = np.empty(n, dtype=np.int64)
    for t in range(n):
        r = row[t]
        doc_order[fill[r]] = seq[t]
        fill[r] += 1
    return row_offsets, doc_order


# ---------------------------------------------------------------------------------------------
# Gather kernels for the shard writer.  A "piece" is a document as packed: a whole example, its
# truncated head, or one split part; piece p's tokens are the piece_len[p] int32 values at memory
# address ids_at[p] (an Arrow chunk's values, the mapped cache file, or a staging buffer: whoever
# passes the address keeps that memory alive while the kernel runs).  Addresses, not a list of
# arrays: a numba.typed.List compiles its methods in every fresh process (not cached by cache=True).
#
#   layout_rows   position_ids, document_id, the pad tail and each document's padding (a piece of
#                 piece_len tokens takes slot_len >= piece_len slots) of a block of rows; CSR of its pieces
#   copy_rows     input_ids and labels of those pieces, straight from where they are
# ---------------------------------------------------------------------------------------------


def int32_at(address, n):
    """The n int32 values at memory `address`, as an array over that memory (no copy).  Plain
    Python (NUMBA_DISABLE_JIT=1) reads it through ctypes; compiled code through the overload below."""
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
    """pread(2): n bytes of file `fd` at `offset` into memory at `address`; the bytes read, -1 on an
    error.  Plain Python through os.preadv; compiled code calls libc's pread (overload below)."""
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
    """Copy each piece's tokens (at address ids_at[p]) and labels (at lab_at[p]) into its row; mask
    every document's first label.

    Returns (num_loss_tokens int64[k], first_loss): first_loss counts documents whose first label
    carried loss before it became `ignore_index` (accounted for in the manifest, not silently lost).
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
    """Labels of pieces whose loss-mask bits were read into `packed` (packtool.data.labels: 1 bit a
    token, least significant first): piece q's n[q] bits start at bit bit[q] of byte at[q], and its
    ids and labels follow the previous piece's in `ids` and `out`:

        out[k] = ids[k] where the token's bit is 1, else ignore_index

    Returns the number of tokens written."""
    k = 0
    for q in range(n.shape[0]):
        b = at[q] * 8 + bit[q]
        for _ in range(n[q]):
            out[k] = ids[k] if (packed[b >> 3] >> (b & 7)) & 1 else ignore_index
            b += 1
            k += 1
    return k
