"""The segment rule (documents, then the pad tail as its own segment) against the writer's kernel.

The kernel lays rows out at speed; `schema.segments` states the rule. Over a grid of rows they must
agree slot for slot, and the closed forms below (sums, counts) must hold for every row."""

from __future__ import annotations

import numpy as np
import pytest

from packtool import kernels, schema


def _kernel_row(seq_lengths: list[int], pack_len: int):
    """position_ids and document_id of one row as kernels.layout_rows writes them."""
    k = len(seq_lengths)
    row_offsets = np.array([0, k], dtype=np.int64)
    doc_order = np.arange(k, dtype=np.int64)
    piece_len = np.array(seq_lengths, dtype=np.int64)
    bufs = [np.zeros((1, pack_len), dtype=np.int32) for _ in range(4)]
    kernels.layout_rows(
        np.zeros(1, np.int64), row_offsets, doc_order, piece_len, *bufs, 7, schema.IGNORE_INDEX
    )
    ids, labels, pos, doc = (b[0] for b in bufs)
    return pos, doc, ids, labels


GRID = [([4, 3], 9), ([9], 9), ([1], 9), ([2, 2, 2, 2], 8), ([1, 1, 1], 5), ([5, 1], 64), ([3], 3)]


@pytest.mark.parametrize("seq_lengths,pack_len", GRID)
def test_kernel_lays_rows_out_by_the_rule(seq_lengths, pack_len):
    pos, doc, ids, labels = _kernel_row(seq_lengths, pack_len)
    assert pos.tolist() == schema.position_ids(seq_lengths, pack_len).tolist()
    assert doc.tolist() == schema.document_ids(seq_lengths, pack_len).tolist()
    tail = pack_len - sum(seq_lengths)
    assert ids[pack_len - tail :].tolist() == [7] * tail
    assert labels[pack_len - tail :].tolist() == [schema.IGNORE_INDEX] * tail


def test_random_rows_closed_forms():
    rng = np.random.default_rng(3)
    for _ in range(300):
        pack_len = int(rng.integers(1, 200))
        lens, left = [], pack_len
        while left and rng.random() < 0.8:
            n = int(rng.integers(1, left + 1))
            lens.append(n)
            left -= n
        if not lens:
            lens = [pack_len]
        segs = schema.row_segments(lens, pack_len)
        assert sum(segs) == pack_len and segs[: len(lens)] == lens
        assert len(segs) == len(lens) + (sum(lens) < pack_len)
        pos = schema.position_ids(lens, pack_len)
        assert int((pos == 0).sum()) == len(segs)  # a segment starts at every 0
        assert int(pos.sum()) == sum(n * (n - 1) // 2 for n in segs)
        doc = schema.document_ids(lens, pack_len)
        assert int((doc == schema.PAD_DOCUMENT_ID).sum()) == pack_len - sum(lens)
        kpos, kdoc, _, _ = _kernel_row(lens, pack_len)
        assert np.array_equal(kpos, pos) and np.array_equal(kdoc, doc)


def test_cu_seqlens_over_rows_includes_each_pad_tail():
    cu = schema.cu_seqlens([[4, 3], [9], [2]], 9)
    assert cu.dtype == np.int32
    assert cu.tolist() == [0, 4, 7, 9, 18, 20, 27]
    assert cu[-1] == 3 * 9  # every slot of the batch is in exactly one segment


def test_segment_starts_is_the_bulk_form_of_position_ids():
    rows = [([4, 3], 9), ([9], 9), ([2, 5], 9)]
    L = 9
    flat = np.arange(len(rows) * L, dtype=np.int64)
    doc_starts, pad_starts = [], []
    for r, (lens, _) in enumerate(rows):
        at = r * L
        for n in lens:
            doc_starts.append(at)
            at += n
        if at < (r + 1) * L:
            pad_starts.append(at)
    seg = schema.segment_starts(
        np.arange(0, len(rows) * L, L, dtype=np.int64),
        np.array(doc_starts, np.int64),
        np.array(pad_starts, np.int64),
        len(rows) * L,
    )
    got = (flat - seg).reshape(len(rows), L)
    for r, (lens, _) in enumerate(rows):
        assert got[r].tolist() == schema.position_ids(lens, L).tolist()


def test_overfull_row_is_refused():
    with pytest.raises(ValueError, match="sum to 10 > pack_len 9"):
        schema.row_segments([5, 5], 9)
