"""The rows the isolation check runs on: a seeded choice made during the integrity scan, and the
two-document rows built from one-document rows when no row holds two."""

from __future__ import annotations

import numpy as np

from packtool import schema
from packtool.verify import integrity as integ
from packtool.verify import sampling


def test_sampler_is_deterministic_and_prefers_multi_doc_rows(clean_pack):
    _, a = integ.check_integrity(str(clean_pack), sample_rows=3, seed=1)
    _, b = integ.check_integrity(str(clean_pack), sample_rows=3, seed=1)
    _, c = integ.check_integrity(str(clean_pack), sample_rows=3, seed=2)
    key = lambda s: [(x.shard, x.row) for x in s["samples"]]  # noqa: E731
    assert key(a) == key(b) and len(key(a)) == 3
    assert key(a) != key(c)
    assert all(len(x.seq_lengths) >= 2 for x in a["samples"])


def test_sampler_choice_does_not_depend_on_batches():
    """Offered in one batch or row by row, the same rows are kept (keys come from global rows)."""
    R, L = 40, 8
    cols = {
        c: np.arange(R * L, dtype=np.int32).reshape(R, L)
        for c in ("input_ids", "labels", "position_ids")
    }
    cols["seq_off"], cols["seq_val"] = np.arange(R + 1), np.full(R, L)
    whole, rows = sampling.Sampler(5, seed=3), sampling.Sampler(5, seed=3)
    whole.offer(np.ones(R, bool), np.arange(R, dtype=np.uint64), cols, "s", 0)
    for r in range(R):
        one = {c: v[r : r + 1] for c, v in cols.items() if c not in ("seq_off", "seq_val")}
        one["seq_off"], one["seq_val"] = np.array([0, 1]), np.array([L])
        rows.offer(np.ones(1, bool), np.array([r], np.uint64), one, "s", r)
    assert [s.row for s in whole.rows()] == [s.row for s in rows.rows()] and len(whole.rows()) == 5


def _single(row: int, n: int, L: int, shard: str = "data/s.parquet") -> sampling.Sample:
    ids = np.arange(1, L + 1, dtype=np.int32) + 100 * row
    lab = ids.copy()
    lab[0] = schema.IGNORE_INDEX
    lab[n:] = schema.IGNORE_INDEX
    return sampling.Sample(shard, row, ids, lab, schema.position_ids([n], L), np.array([n]))


def test_synthesized_rows_follow_the_row_layout():
    L = 32
    (s,) = sampling.synthesize([_single(0, 20, L), _single(1, 30, L)], L, rows=4)
    na, nb = (int(x) for x in s.seq_lengths)
    assert (
        s.synthetic
        and na == 16
        and nb == 16
        and s.shard == "synthetic from data/s.parquet row 0"
        and s.row == 1
    )
    assert np.array_equal(s.position_ids, schema.position_ids([na, nb], L))
    assert s.labels[0] == s.labels[na] == schema.IGNORE_INDEX
    (h,) = sampling.synthesize([_single(0, 9, L)], L, rows=4)  # the only document: its two halves
    assert [int(x) for x in h.seq_lengths] == [4, 5]
    assert (h.labels[9:] == schema.IGNORE_INDEX).all() and np.array_equal(
        h.position_ids, schema.position_ids([4, 5], L)
    )
    assert sampling.synthesize([_single(0, 1, L)], L, rows=4) == []


def _row(row: int, lens: list[int], L: int) -> sampling.Sample:
    """A packed row of documents `lens` (pad tail after them), laid out by the contract."""
    n = sum(lens)
    ids = np.arange(L, dtype=np.int32) + 1000 * row
    lab = ids.copy()
    lab[np.cumsum([0, *lens[:-1]])] = schema.IGNORE_INDEX
    lab[n:] = schema.IGNORE_INDEX
    pos = schema.position_ids(lens, L).astype(np.int32)
    return sampling.Sample("data/s.parquet", row, ids, lab, pos, np.array(lens))


def test_crop_keeps_the_first_two_documents_whole_as_the_packs_own_bytes():
    """A batch's rows share one prefix length P: the budget, or more where a row's second document
    ends later; every row keeps its first two documents whole, a document cut at P as its prefix."""
    L = 32
    rows = [_row(0, [20, 5, 4], L), _row(1, [3, 4, 10, 9], L), _row(2, [6, 6, 6, 6], L)]
    a, b, c = sampling.crop(rows, tokens=8, batch_rows=2)
    assert len(a.input_ids) == len(b.input_ids) == 25  # row 0's second document ends at 25
    assert a.seq_lengths.tolist() == [20, 5] and b.seq_lengths.tolist() == [3, 4, 10, 8]
    assert len(c.input_ids) == 12 and c.seq_lengths.tolist() == [6, 6]  # its own batch
    for orig, cut in zip(rows, (a, b, c), strict=True):
        n = len(cut.input_ids)
        for col in ("input_ids", "labels", "position_ids"):
            assert np.array_equal(getattr(cut, col), getattr(orig, col)[:n])
        assert cut.bounds[:2] == orig.bounds[:2]
    (whole,) = sampling.crop([rows[2]], tokens=100, batch_rows=2)  # budget above the row: all of it
    assert len(whole.input_ids) == L and whole.seq_lengths.tolist() == [6, 6, 6, 6]
    (tail,) = sampling.crop([_row(3, [4, 5], L)], tokens=12, batch_rows=1)  # P in the pad tail
    assert tail.seq_lengths.tolist() == [4, 5] and len(tail.input_ids) == 12
