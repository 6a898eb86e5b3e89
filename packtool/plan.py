"""Plan packed rows from document lengths.

A plan is a CSR assignment of documents to rows of `pack_len` token slots:

    lengths      [5, 3, 7, 2, 4]            pack_len = 8, strategy = "bfd", order = "sorted"
    processing   2(7) 0(5) 4(4) 1(3) 3(2)   longest first, ties by lower index
    rows         row 0: [2]       7/8
                 row 1: [0, 1]    8/8
                 row 2: [4, 3]    6/8
    row_offsets  [0, 1, 3, 5]
    doc_order    [2, 0, 1, 4, 3]

Rows come out in the order the packer opened them (long documents first for "sorted");
pack.run.pack_tokenized shuffles them with the seed (row_order), which the shard writer follows.
All lengths must already be in 1..pack_len: the caller applies `--overflow` (drop, truncate,
split, error) before planning.

The kernels below it (numba) pack documents of integer length into rows of capacity L:

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
Pure numpy and numba: no pyarrow, rich or typer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from packtool.config import ORDERS, STRATEGIES


@dataclass(frozen=True)
class PackPlan:
    # int64[R+1]; row r holds documents doc_order[row_offsets[r]:row_offsets[r+1]]
    row_offsets: np.ndarray
    doc_order: np.ndarray  # int64[n]; indices into `lengths`, in row order (each exactly once)
    pack_len: int

    @property
    def num_rows(self) -> int:
        return int(self.row_offsets.shape[0] - 1)

    def docs_per_row(self) -> np.ndarray:
        """Documents per row, int64[R]."""
        return np.diff(self.row_offsets)


def lower_bound_rows(total_tokens: int, pack_len: int) -> int:
    """ceil(total / pack_len): no packing can use fewer rows."""
    return -(-int(total_tokens) // int(pack_len))


def plan_packs(
    lengths: np.ndarray,
    pack_len: int,
    strategy: str = "bfd",
    order: str = "sorted",
    max_docs: int = 0,
    seed: int = 0,
) -> PackPlan:
    """Assign each document to a row of `pack_len` slots: "bfd" the tightest row, "ffd" the lowest;
    "sorted" longest first, "random" a shuffle seeded with `seed`; at most `max_docs` documents a
    row (0 = no cap). ValueError for lengths outside 1..pack_len or bad options."""
    for name, value, allowed in (("strategy", strategy, STRATEGIES), ("order", order, ORDERS)):
        if value not in allowed:
            raise ValueError(f"{name} {value!r} is not one of {'|'.join(allowed)}")
    pack_len = int(pack_len)
    if pack_len < 1:
        raise ValueError(f"pack_len {pack_len} must be >= 1")
    if pack_len >= MAX_BITSET_SIZE:
        raise ValueError(f"pack_len {pack_len} must be < {MAX_BITSET_SIZE}")
    max_docs = int(max_docs)
    if max_docs < 0:
        raise ValueError(f"max_docs {max_docs} must be >= 0 (0 = no cap)")
    arr = np.asarray(lengths)
    if arr.ndim != 1:
        raise ValueError(f"lengths must be 1-D, got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"lengths must be integers, got {arr.dtype}")
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    n = arr.shape[0]
    if n == 0:
        return PackPlan(np.zeros(1, np.int64), np.zeros(0, np.int64), pack_len)
    bad = np.flatnonzero((arr < 1) | (arr > pack_len))
    if bad.size:
        i = int(bad[0])
        raise ValueError(
            f"document {i} has length {int(arr[i])}, outside 1..{pack_len} "
            f"({bad.size} such); apply the overflow policy before planning"
        )
    if order == "sorted":
        seq, sizes = decreasing_order(arr, pack_len)
    else:
        seq = np.random.default_rng(seed).permutation(n).astype(np.int64)
        sizes = arr[seq]
    if strategy == "bfd":
        row, num_rows = best_fit(sizes, pack_len, max_docs)
    else:
        bound = 2 * lower_bound_rows(int(arr.sum()), pack_len) + 1
        if max_docs:
            bound += -(-n // max_docs)
        row, num_rows = first_fit(sizes, pack_len, max_docs, min(n, bound))
    row_offsets, doc_order = group_by_row(seq, row, num_rows)
    return PackPlan(row_offsets=row_offsets, doc_order=doc_order, pack_len=pack_len)


def plan_pairs(
    slots: np.ndarray, pack_len: int, strategy: str, order: str, max_docs: int, seed: int
) -> PackPlan:
    """Plan pieces in pairs (2u, 2u+1), each pair in one row, chosen first. `max_docs` counts
    documents: 0 no cap, else a row holds max_docs // 2 pairs (1 cannot hold one)."""
    if max_docs == 1:
        raise ValueError("max_docs 1 cannot hold a pair: its two sides are two documents of a row")
    unit = slots[0::2] + slots[1::2]
    plan = plan_packs(unit, pack_len, strategy, order, max_docs // 2, seed)
    doc_order = np.stack([2 * plan.doc_order, 2 * plan.doc_order + 1], axis=1).ravel()
    return PackPlan(plan.row_offsets * 2, doc_order.astype(np.int64), pack_len)


# ---------------------------------------------------------------------------------------------
# 64-ary bitset over capacities 0..64**4 - 1: level k word w has bit b set when level k-1 word
# 64*w+b is non-zero (level 0: bucket c is non-empty).
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
    """Index of the lowest set bit of a non-zero uint64, by halving (same without the JIT)."""
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
    """Stable counting sort, longest first: (seq int64[n] document indices, sizes = lengths[seq])."""
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
    Returns (row int64[n] per processing position, num_rows)."""
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
    `max_rows` must bound the rows (any-fit: at most one open row is <= half full, so
    2*ceil(total/L) + 1 + ceil(n/max_docs) is enough). Returns (row int64[n], num_rows)."""
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
