"""Overflow policies (examples → pieces), PackConfig validation, pad id choice."""

from __future__ import annotations

import numpy as np
import pytest

from packtool.errors import PacktoolError, UsageError
from packtool.io import shards
from packtool.pack import PackConfig, apply_overflow, pad_id_of

LENGTHS = np.array([3, 0, 9, 4, 20, 8], dtype=np.int64)  # pack_len 8: rows 2 and 4 are too long
SRC = np.array([10, 11, 12, 13, 14, 15], dtype=np.int64)


def test_drop_lists_empty_and_long():
    p = apply_overflow(LENGTHS, SRC, 8, "drop")
    assert p.row.tolist() == [0, 3, 5]
    assert p.length.tolist() == [3, 4, 8] and p.start.tolist() == [0, 0, 0]
    assert p.dropped.tolist() == [1, 2, 4]
    assert p.dropped_reason == ["empty", "longer than --len 8", "longer than --len 8"]
    assert p.truncated.size == 0 and p.split.size == 0


def test_truncate_keeps_the_head():
    p = apply_overflow(LENGTHS, SRC, 8, "truncate")
    assert p.row.tolist() == [0, 2, 3, 4, 5]
    assert p.length.tolist() == [3, 8, 4, 8, 8] and not p.start.any()
    assert p.truncated.tolist() == [2, 4] and p.dropped.tolist() == [1]


def test_split_cuts_into_parts_of_at_most_len():
    p = apply_overflow(LENGTHS, SRC, 8, "split")
    assert p.row.tolist() == [0, 2, 2, 3, 4, 4, 4, 5]
    assert p.start.tolist() == [0, 0, 8, 0, 0, 8, 16, 0]
    assert p.length.tolist() == [3, 8, 1, 4, 8, 8, 4, 8]
    assert p.split.tolist() == [2, 4] and p.split_parts.tolist() == [2, 3]
    assert p.dropped.tolist() == [1]
    # every token of every non-empty example is covered exactly once
    for r in (0, 2, 3, 4, 5):
        sel = p.row == r
        assert p.length[sel].sum() == LENGTHS[r]


def test_error_names_example_length_len_and_fix():
    with pytest.raises(
        PacktoolError,
        match=r"^example 12 has 9 tokens > --len 8; use --overflow truncate\|split "
        r"or raise --len \(2 examples are longer than --len; the longest has 20",
    ):
        apply_overflow(LENGTHS, SRC, 8, "error")
    p = apply_overflow(
        LENGTHS[:2], SRC[:2], 8, "error"
    )  # nothing too long: the empty one is dropped
    assert p.row.tolist() == [0] and p.dropped.tolist() == [1]


@pytest.mark.parametrize("policy", ["drop", "truncate", "split"])
def test_pieces_always_fit(policy):
    rng = np.random.default_rng(0)
    lengths = rng.integers(0, 50, 1000)
    p = apply_overflow(lengths, np.arange(1000), 16, policy)
    assert p.length.min() >= 1 and p.length.max() <= 16
    assert np.all(p.start + p.length <= lengths[p.row])


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"pack_len": 1}, r"--len 1 is too small: a row needs at least 2 tokens"),
        ({"pack_len": -5}, r"--len -5 is too small"),
        ({"pack_len": 64**4}, r"--len 16777216 exceeds the maximum 16777215"),
        ({"strategy": "nfd"}, r"--strategy 'nfd' is not one of bfd\|ffd"),
        ({"order": "desc"}, r"--order 'desc' is not one of sorted\|random"),
        ({"overflow": "wrap"}, r"--overflow 'wrap' is not one of drop\|truncate\|split\|error"),
        ({"max_docs": -1}, r"--max-docs -1 must be >= 0"),
        ({"seed": -3}, r"--seed -3 must be >= 0"),
        ({"shard_rows": -2}, r"--shard-rows -2 must be >= 1"),
    ],
)
def test_bad_options(kw, match):
    with pytest.raises(UsageError, match=match):
        PackConfig(**{"pack_len": 16, **kw})


def test_default_shard_rows_by_bytes():
    assert shards.rows_per_shard(4096, 0) == 8192
    assert shards.rows_per_shard(4096, 10) == 10


def test_pad_id_falls_back_to_eos_then_zero():
    assert pad_id_of({"pad_id": 5, "eos_id": 2}) == (5, "tokenizer pad_id")
    assert pad_id_of({"pad_id": None, "eos_id": 2}) == (2, "tokenizer eos_id")
    assert pad_id_of({})[0] == 0
