"""Plan packed rows from document lengths.

A plan is a CSR assignment of documents to rows of `pack_len` token slots:

    lengths      [5, 3, 7, 2, 4]            pack_len = 8, strategy = "bfd", order = "sorted"
    processing   2(7) 0(5) 4(4) 1(3) 3(2)   longest first, ties by lower index
    rows         row 0: [2]       7/8
                 row 1: [0, 1]    8/8
                 row 2: [4, 3]    6/8
    row_offsets  [0, 1, 3, 5]
    doc_order    [2, 0, 1, 4, 3]

Rows come out in the order the packer opened them (long documents first for "sorted"); the shard
writer shuffles them with the seed.  All lengths must already be in 1..pack_len: the caller applies
`--overflow` (drop, truncate, split, error) before planning.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packtool import kernels
from packtool.config import ORDERS, STRATEGIES  # noqa: F401  (one definition, in config)


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
    """Assign each document to a row of `pack_len` slots.

    strategy  "bfd": best fit (tightest row), "ffd": first fit (lowest row index).
    order     "sorted": longest first (the "decreasing" of FFD/BFD); "random": a shuffle seeded
              with `seed`, so rows are not length-sorted (batches closer to i.i.d.).
    max_docs  at most this many documents per row (0 = no cap).

    Raises ValueError for lengths outside 1..pack_len or bad options.
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy {strategy!r} is not one of {'|'.join(STRATEGIES)}")
    if order not in ORDERS:
        raise ValueError(f"order {order!r} is not one of {'|'.join(ORDERS)}")
    pack_len = int(pack_len)
    if pack_len < 1:
        raise ValueError(f"pack_len {pack_len} must be >= 1")
    if pack_len >= kernels.MAX_BITSET_SIZE:
        raise ValueError(f"pack_len {pack_len} must be < {kernels.MAX_BITSET_SIZE}")
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
        seq, sizes = kernels.decreasing_order(arr, pack_len)
    else:
        seq = np.random.default_rng(seed).permutation(n).astype(np.int64)
        sizes = arr[seq]
    if strategy == "bfd":
        row, num_rows = kernels.best_fit(sizes, pack_len, max_docs)
    else:
        bound = 2 * lower_bound_rows(int(arr.sum()), pack_len) + 1
        if max_docs:
            bound += -(-n // max_docs)
        row, num_rows = kernels.first_fit(sizes, pack_len, max_docs, min(n, bound))
    row_offsets, doc_order = kernels.group_by_row(seq, row, num_rows)
    return PackPlan(row_offsets=row_offsets, doc_order=doc_order, pack_len=pack_len)


def plan_pairs(
    slots: np.ndarray, pack_len: int, strategy: str, order: str, max_docs: int, seed: int
) -> PackPlan:
    """Plan pieces that come in pairs (2u, 2u+1) so that each pair shares a row, chosen first.
    `max_docs` counts documents (a pair is two)."""
    unit = slots[0::2] + slots[1::2]
    plan = plan_packs(unit, pack_len, strategy, order, max_docs // 2, seed)
    doc_order = np.stack([2 * plan.doc_order, 2 * plan.doc_order + 1], axis=1).ravel()
    return PackPlan(plan.row_offsets * 2, doc_order.astype(np.int64), pack_len)
