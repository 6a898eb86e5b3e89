"""Encoded pairs are checked side against side (tokenization/pairs.py): the same untrained prompt
on both sides, a trained token on each; otherwise the whole pair is refused, saying why."""

from __future__ import annotations

import numpy as np

from packtool.tokenization.pairs import check_pairs


def _encoded(sides):
    ids = np.concatenate([np.array(p + a, np.int32) for p, a in sides])
    labels = np.concatenate([np.array([-100] * len(p) + a, np.int32) for p, a in sides])
    offsets = np.concatenate([[0], np.cumsum([len(p) + len(a) for p, a in sides])])
    return ids, labels, offsets


def test_a_sound_pair_and_three_refused_ones():
    sides = [
        ([1, 2, 3], [4, 5]), ([1, 2, 3], [6]),  # sound
        ([1, 2], [7]), ([1, 9], [8]),  # a prompt token differs
        ([5], [1]), ([5, 1], []),  # the rejected side trains nothing
        ([4, 4], [2]), ([4, 4, 4], [3]),  # prompts of different lengths (a merge at the boundary)
    ]  # fmt: skip
    prompt, why = check_pairs(*_encoded(sides), [None] * 8)
    assert prompt.tolist() == [3, 3, 2, 2, 1, 2, 2, 3]
    assert why[0] is None
    assert "first different at token 1" in why[1]
    assert why[2].startswith("'rejected' trains no token")
    assert "untrained runs of 2 and 3 tokens" in why[3]


def test_a_side_that_did_not_encode_refuses_its_pair():
    sides = [([1], [2]), ([1], [3]), ([1], [2]), ([1], [3])]
    _, why = check_pairs(*_encoded(sides), [None, None, "template drops content", None])
    assert why == [None, "chosen: template drops content"]
