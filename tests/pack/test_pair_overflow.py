"""--overflow on preference pairs (pack/pairs.py): decided per pair, never per side; a pair is one
unit for the planner, its two documents adjacent in one row, chosen first."""

from __future__ import annotations

import numpy as np
import pytest

from packtool.errors import PacktoolError, UsageError
from packtool.pack.pairs import NO_ROOM, TOO_LONG, apply_pair_overflow, pair_cut
from packtool.plan import plan_pairs

LENGTHS = np.array([9, 6, 5, 3, 12, 12])  # pairs: (9, 6) (5, 3) (12, 12)
PROMPTS = np.array([4, 4, 2, 2, 10, 10])
SOURCE = np.array([0, 0, 1, 1, 2, 2])


def test_drop_drops_a_too_long_pair_whole():
    p = apply_pair_overflow(LENGTHS, PROMPTS, SOURCE, 12, "drop")
    assert p.row.tolist() == [2, 3] and p.length.tolist() == [5, 3]
    assert p.dropped.tolist() == [0, 1, 4, 5] and set(p.dropped_reason) == {TOO_LONG}
    assert p.truncated.size == 0


def test_truncate_cuts_the_longer_answer_first_and_keeps_a_trained_token_on_each_side():
    p = apply_pair_overflow(LENGTHS, PROMPTS, SOURCE, 12, "truncate")
    assert p.row.tolist() == [0, 1, 2, 3] and p.length.tolist() == [6, 6, 5, 3]
    assert p.truncated.tolist() == [0]  # only the chosen side lost tokens
    assert p.dropped.tolist() == [4, 5] and p.dropped_reason == [NO_ROOM, NO_ROOM]


def test_every_row_is_a_piece_or_dropped_and_pairs_stay_whole():
    rng = np.random.default_rng(7)
    n = 500
    lengths = rng.integers(1, 60, 2 * n)
    prompts = np.repeat(rng.integers(0, 20, n), 2)
    lengths = np.maximum(lengths, prompts + 1)
    src = np.repeat(np.arange(n), 2)
    for overflow in ("drop", "truncate"):
        p = apply_pair_overflow(lengths, prompts, src, 40, overflow)
        assert sorted(p.row.tolist() + p.dropped.tolist()) == list(range(2 * n))
        assert (p.row[0::2] % 2 == 0).all() and (p.row[1::2] == p.row[0::2] + 1).all()
        assert (p.length[0::2] + p.length[1::2] <= 40).all()
        assert (p.length > prompts[p.row]).all()  # a trained token left on each side
        assert (p.length <= lengths[p.row]).all()


def test_pair_cut_is_the_largest_fitting_cut():
    for a in range(12):
        for b in range(12):
            for L in (1, 5, 8, 13):
                m = int(pair_cut(np.array([a]), np.array([b]), L)[0])
                best = max(x for x in range(30) if min(a, x) + min(b, x) <= L)
                assert (min(a, m), min(b, m)) == (min(a, best), min(b, best)), (a, b, L)


def test_split_is_refused_and_error_names_the_pair():
    with pytest.raises(UsageError, match="split would put a pair"):
        apply_pair_overflow(LENGTHS, PROMPTS, SOURCE, 12, "split")
    with pytest.raises(PacktoolError, match=r"pair 0 has 15 tokens \(chosen 9 \+ rejected 6\)"):
        apply_pair_overflow(LENGTHS, PROMPTS, SOURCE, 12, "error")


def test_plan_pairs_keeps_each_pair_adjacent_in_one_row():
    rng = np.random.default_rng(3)
    slots = rng.integers(1, 30, 400)
    for strategy in ("bfd", "ffd"):
        for order in ("sorted", "random"):
            plan = plan_pairs(slots, 64, strategy, order, 6, seed=1)
            assert sorted(plan.doc_order.tolist()) == list(range(400))
            for r in range(plan.num_rows):
                docs = plan.doc_order[plan.row_offsets[r] : plan.row_offsets[r + 1]]
                assert len(docs) % 2 == 0 and len(docs) <= 6
                assert (docs[0::2] % 2 == 0).all() and (docs[1::2] == docs[0::2] + 1).all()
                assert slots[docs].sum() <= 64
    with pytest.raises(ValueError, match="max_docs 1 cannot hold a pair"):
        plan_pairs(slots, 64, "bfd", "sorted", 1, seed=1)  # halved, 1 was once 0: no cap
