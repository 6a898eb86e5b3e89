"""profile's strategies for preference pairs (stats/strategies.simulate_pairs) against a direct count."""

from __future__ import annotations

import numpy as np
import pytest

from packtool.plan import plan_pairs
from packtool.stats.strategies import STRATEGY_LABELS, length_grouped, simulate_pairs


def test_random_pair_batches_pad_both_sides_to_the_longest_of_the_batch():
    rng = np.random.default_rng(0)
    e = rng.integers(1, 50, 2 * 101)
    got = simulate_pairs(e, 100, batch_size=8, group_window=64, seed=3)
    assert list(got) == list(STRATEGY_LABELS)  # the SFT names, so the report reads them alike
    order = np.random.default_rng(3).permutation(101)
    slots = work = 0
    for b in range(0, 101, 8):
        batch = order[b : b + 8]
        sides = np.concatenate([e[2 * batch], e[2 * batch + 1]])
        slots += sides.size * sides.max()
        work += sides.size * sides.max() ** 2
    padded = got["random_padded"]
    assert (padded.slots, padded.attention_work, padded.tokens) == (slots, work, int(e.sum()))
    assert padded.steps == 13 and padded.rows == 202
    assert padded.label == "random pair batches, padded (TRL)"
    grouped = got["length_grouped"]
    assert grouped.tokens == padded.tokens and grouped.slots <= padded.slots


def test_packed_pairs_are_the_rows_pack_plans():
    e = np.random.default_rng(1).integers(1, 60, 2 * 300)
    got = simulate_pairs(e, 128, batch_size=8, group_window=64)
    for algo in ("bfd", "ffd"):
        rows = plan_pairs(e, 128, algo, "sorted", 0, 0).num_rows
        varlen, dense = got[f"packed_{algo}_varlen"], got[f"packed_{algo}_dense"]
        assert varlen.rows == dense.rows == rows and varlen.slots == rows * 128
        assert varlen.attention_work == int((e * e).sum()) == got["padding_free"].attention_work
        assert dense.attention_work == rows * 128 * 128
    assert got["packed_bfd_varlen"].occupancy > got["random_padded"].occupancy


@pytest.mark.parametrize("n, window, batch_size", [(1000, 512, 8), (101, 20, 8), (64, 64, 8)])
def test_length_grouped_pairs_batch_as_sft_windows_do(n, window, batch_size):
    """Pairs whose two sides are equal batch as SFT length-grouped batches of those lengths: windows
    of `group_window` consecutive shuffled pairs, batches never crossing one (np.array_split made
    [500, 500] of 1000 at window 512, and a batch straddled the two)."""
    e = np.random.default_rng(5).integers(1, 300, n)
    pairs = simulate_pairs(np.repeat(e, 2), 1024, batch_size, window, seed=2)["length_grouped"]
    perm = np.random.default_rng(2).permutation(n)
    sft = length_grouped(e.astype(np.int32), batch_size, window, perm, int((e * e).sum()))
    assert pairs.steps == sft.steps
    assert (pairs.slots, pairs.attention_work) == (2 * sft.slots, 2 * sft.attention_work)
