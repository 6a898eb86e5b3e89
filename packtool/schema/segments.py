"""Segments of a packed row: the one definition of where attention may look.

A row of `pack_len` slots holds k documents back to back, then (when they do not fill it) a pad
tail. Every document is a segment, and the pad tail is one more segment of its own:

    seq_lengths  [4, 3]                 pack_len 9
    segments     [4, 3, 2]              documents, then the pad tail (absent when the row is full)
    position_ids  0 1 2 3 | 0 1 2 | 0 1  restart at every segment
    document_id   0 0 0 0 | 1 1 1 |-1 -1 pad tail: PAD_DOCUMENT_ID
    cu_seqlens   [0, 4, 7, 9]           int32, over rows laid end to end (B * pack_len slots)

Fixed docs (--fixed-docs, K = --max-docs): seq_lengths holds exactly K entries, empty ones (0) at
the end, and the pad tail is a segment even when it is empty, so every row has K + 1 segments and a
batch of B rows B*(K+1)+1 cu_seqlens entries, whatever the rows hold:

    seq_lengths  [4, 3, 0]   K = 3     segments [4, 3, 0, 2]   cu_seqlens [0, 4, 7, 7, 9]

Padded documents (--pad-to-multiple N): seq_lengths are the padded slot counts, so the rule above is
unchanged; `cu_seqlens_unpadded` gives the same segments counted in real tokens (a document's
own tokens, 0 for the pad tail), TransformerEngine's cu_seqlens beside its cu_seqlens_padded.

The writer's numba kernel (`kernels.layout_rows`) lays rows out by this rule at speed; verify's
row scan, the isolation check and the trainer-side collator build their segments with these
functions, and tests compare the kernel's rows with them. A varlen kernel given whole rows must see
the pad tail as a segment: leaving it out would put those slots in no segment at all.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from packtool.schema.columns import PAD_DOCUMENT_ID


def row_segments(seq_lengths: Sequence[int], pack_len: int, fixed: bool = False) -> list[int]:
    """The row's segment lengths: its documents, then the pad tail when there is one; `fixed`
    (fixed docs: seq_lengths already K long, empty entries last) keeps the tail even when empty."""
    lengths = [int(n) for n in seq_lengths]
    used = sum(lengths)
    if used > pack_len:
        raise ValueError(f"seq_lengths sum to {used} > pack_len {pack_len}")
    if fixed:
        nonzero = [i for i, n in enumerate(lengths) if n]
        if nonzero and nonzero[-1] + 1 != len(nonzero) or any(n < 0 for n in lengths):
            raise ValueError(f"seq_lengths {lengths}: empty entries must come last (fixed docs)")
    if used < pack_len or fixed:
        lengths.append(pack_len - used)
    return lengths


def cu_seqlens(rows: Iterable[Sequence[int]], pack_len: int, fixed: bool = False) -> np.ndarray:
    """int32 cumulative segment boundaries over `rows` laid end to end, starting with 0 (`fixed`:
    K + 1 segments per row, see row_segments)."""
    segs = [n for lens in rows for n in row_segments(lens, pack_len, fixed)]
    return np.concatenate(([0], np.cumsum(segs, dtype=np.int64))).astype(np.int32)


def cu_seqlens_unpadded(
    rows: Iterable[Sequence[int]],
    unpadded: Iterable[Sequence[int]],
    pack_len: int,
    fixed: bool = False,
) -> np.ndarray:
    """The segments of `cu_seqlens(rows, pack_len, fixed)` counted in real tokens: each document's
    unpadded length, 0 for the pad tail (same number of entries; int32, starting with 0)."""
    segs: list[int] = []
    for lens, real in zip(rows, unpadded, strict=True):
        real = [int(n) for n in real]
        if len(real) != len(lens):
            raise ValueError(f"seq_lengths {list(lens)} and unpadded {real} differ in length")
        segs += real + [0] * (len(row_segments(lens, pack_len, fixed)) - len(real))
    return np.concatenate(([0], np.cumsum(segs, dtype=np.int64))).astype(np.int32)


def position_ids(seq_lengths: Sequence[int], pack_len: int) -> np.ndarray:
    """int32 [pack_len]: 0, 1, ... restarting at every segment (the pad tail included)."""
    runs = [np.arange(n, dtype=np.int32) for n in row_segments(seq_lengths, pack_len)]
    return np.concatenate(runs or [np.zeros(0, np.int32)])


def document_ids(seq_lengths: Sequence[int], pack_len: int) -> np.ndarray:
    """int32 [pack_len]: the document's index in the row, PAD_DOCUMENT_ID on the pad tail."""
    out = np.full(pack_len, PAD_DOCUMENT_ID, dtype=np.int32)
    at = 0
    for d, n in enumerate(int(x) for x in seq_lengths):
        out[at : at + n] = d
        at += n
    return out


def segment_starts(
    row_starts: np.ndarray, doc_starts: np.ndarray, pad_starts: np.ndarray, n: int
) -> np.ndarray:
    """For `n` slots of rows laid end to end, the flat index where each slot's segment starts, from
    the flat start indices of rows, documents and pad tails (the bulk form of `position_ids`:
    position = slot - segment start)."""
    idx_t = row_starts.dtype
    seg = np.zeros(n, idx_t)
    seg[row_starts] = row_starts
    seg[doc_starts] = doc_starts
    seg[pad_starts] = pad_starts
    np.maximum.accumulate(seg, out=seg)
    return seg
