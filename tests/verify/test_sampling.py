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
    key = lambda s: [(x["shard"], x["row"]) for x in s["samples"]]  # noqa: E731
    assert key(a) == key(b) and len(key(a)) == 3
    assert key(a) != key(c)
    assert all(len(x["seq_lengths"]) >= 2 for x in a["samples"])


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
    assert [d["row"] for d in whole.rows()] == [d["row"] for d in rows.rows()] and len(
        whole.rows()
    ) == 5


def _single(row: int, n: int, L: int, shard: str = "data/s.parquet") -> dict:
    ids = np.arange(1, L + 1, dtype=np.int32) + 100 * row
    lab = ids.copy()
    lab[0] = schema.IGNORE_INDEX
    lab[n:] = schema.IGNORE_INDEX
    return {
        "shard": shard,
        "row": row,
        "seq_lengths": np.array([n]),
        "input_ids": ids,
        "labels": lab,
        "position_ids": schema.position_ids([n], L),
    }


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
