"""packtool.stats.strategies: every metric by hand on tiny cases, then against a brute-force oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest

from packtool.stats import strategies

IDENTITY4 = np.arange(4)


# ---------------------------------------------------------------------------------------------
# by hand: lengths [1, 2, 3, 4], batch size 2, --len 4   (own work Σ n² = 1 + 4 + 9 + 16 = 30)


def test_pad_to_len_by_hand():
    e = np.array([1, 2, 3, 4])
    s = strategies.pad_to_len(e, 4, 2, own_work=30)
    assert (s.rows, s.steps, s.tokens, s.slots, s.attention_work) == (
        4,
        2,
        10,
        16,
        64,
    )  # 4 rows × 4², 4 × 4 slots
    assert s.occupancy == pytest.approx(10 / 16)
    assert s.padding_fraction == pytest.approx(6 / 16)
    assert s.attention_waste == pytest.approx(64 / 30)


def test_random_padded_by_hand():
    e = np.array([1, 2, 3, 4])
    # order as given: batches [1 2] [3 4] → padded to 2 and 4: slots 2·2 + 2·4, work 2·2² + 2·4²
    s = strategies.random_padded(e, 2, IDENTITY4, own_work=30)
    assert (s.steps, s.slots, s.attention_work) == (2, 12, 40)
    assert s.occupancy == pytest.approx(10 / 12)
    assert s.attention_waste == pytest.approx(40 / 30)
    assert s.extra["batch_waste"].tolist() == pytest.approx([8 / 5, 32 / 25])
    # order [1 4] [2 3]: slots 2·4 + 2·3 = 14, work 2·16 + 2·9 = 50
    s = strategies.random_padded(e, 2, np.array([0, 3, 1, 2]), own_work=30)
    assert (s.slots, s.attention_work) == (14, 50)


def test_random_padded_short_last_batch():
    # [5 1] [2]: the last batch has one row: slots 2·5 + 1·2, work 2·25 + 4
    s = strategies.random_padded(np.array([5, 1, 2]), 2, np.arange(3), own_work=30)
    assert (s.steps, s.slots, s.attention_work) == (2, 12, 54)


def test_length_grouped_by_hand():
    e = np.array([1, 2, 3, 4])
    # one window of 4 sorted longest first: [4 3] [2 1] → slots 2·4 + 2·2, work 2·16 + 2·4
    s = strategies.length_grouped(e, 2, 4, IDENTITY4, own_work=30)
    assert (s.steps, s.slots, s.attention_work) == (2, 12, 40)
    # windows of 2 over the order [1 4 2 3]: [4 1] [3 2] → slots 8 + 6, work 32 + 18
    s = strategies.length_grouped(e, 2, 2, np.array([0, 3, 1, 2]), own_work=30)
    assert (s.steps, s.slots, s.attention_work) == (2, 14, 50)
    # windows of 3: [1 2 3] [4] → [3 2] [1] | [4]: batches never cross windows
    s = strategies.length_grouped(e, 2, 3, IDENTITY4, own_work=30)
    assert (s.steps, s.slots, s.attention_work) == (3, 6 + 1 + 4, 18 + 1 + 16)
    # a window larger than the data is one window (and allocates nothing more)
    s = strategies.length_grouped(e, 2, 10**12, IDENTITY4, own_work=30)
    assert (s.steps, s.slots, s.attention_work) == (2, 12, 40)


def test_padding_free_by_hand():
    s = strategies.padding_free(np.array([1, 2, 3, 4]), 2, own_work=30)
    assert (s.rows, s.steps, s.slots, s.attention_work) == (4, 2, 10, 30)
    assert s.occupancy == 1.0 and s.attention_waste == 1.0


def test_packed_by_hand():
    # --len 5, longest first: 4 → row 0; 3 → row 1; 2 → row 1 (full); 1 → row 0 (full): 2 rows
    e = np.array([1, 2, 3, 4])
    for algo in ("bfd", "ffd"):
        varlen, dense = strategies.packed(e, 5, 2, algo, own_work=30)
        assert varlen.name == f"packed_{algo}_varlen" and dense.name == f"packed_{algo}_dense"
        assert (varlen.rows, varlen.steps, varlen.slots, varlen.attention_work) == (2, 1, 10, 30)
        assert (dense.rows, dense.slots, dense.attention_work) == (2, 10, 2 * 25)
        assert varlen.occupancy == 1.0 and varlen.docs_per_row == 2.0
        assert dense.attention_waste == pytest.approx(50 / 30)


def test_simulate_truncates_for_every_strategy():
    out = strategies.simulate(np.array([1, 2, 3, 9]), 4, 2, 2, seed=0)
    assert list(out) == list(strategies.STRATEGY_LABELS)
    for s in out.values():
        assert s.tokens == 1 + 2 + 3 + 4
        assert s.own_work == 30
        assert s.slots >= s.tokens
    assert out["pad_to_len"].slots == 16


# ---------------------------------------------------------------------------------------------
# brute force over random cases


def oracle(lengths, pack_len, batch_size, window, seed):
    """Each strategy written the slow, obvious way from its definition."""
    e = [min(int(n), pack_len) for n in lengths]
    perm = np.random.default_rng(seed).permutation(len(e)).tolist()
    shuffled = [e[i] for i in perm]
    own = sum(x * x for x in e)

    def batches_cost(batches):
        slots = sum(len(b) * max(b) for b in batches)
        work = sum(len(b) * max(b) ** 2 for b in batches)
        return len(batches), slots, work

    random_batches = [shuffled[i : i + batch_size] for i in range(0, len(e), batch_size)]
    grouped = []
    for w in range(0, len(e), window):
        win = sorted(shuffled[w : w + window], reverse=True)
        grouped += [win[i : i + batch_size] for i in range(0, len(win), batch_size)]
    waste = [len(b) * max(b) ** 2 / sum(x * x for x in b) for b in random_batches]
    return {
        "own": own,
        "tokens": sum(e),
        "pad_to_len": (math.ceil(len(e) / batch_size), len(e) * pack_len, len(e) * pack_len**2),
        "random_padded": batches_cost(random_batches),
        "length_grouped": batches_cost(grouped),
        "padding_free": (math.ceil(len(e) / batch_size), sum(e), own),
        "batch_waste": waste,
    }


@pytest.mark.parametrize("case", range(40))
def test_against_oracle(case):
    rng = np.random.default_rng(1000 + case)
    n = int(rng.integers(1, 300))
    pack_len = int(rng.choice([8, 64, 100, 512]))
    lengths = rng.integers(1, 2 * pack_len, n)
    batch_size = int(rng.integers(1, 12))
    window = batch_size * int(rng.integers(1, 6)) + int(rng.integers(0, batch_size))
    seed = int(rng.integers(0, 1000))
    out = strategies.simulate(lengths, pack_len, batch_size, window, seed)
    ref = oracle(lengths, pack_len, batch_size, window, seed)
    for name in ("pad_to_len", "random_padded", "length_grouped", "padding_free"):
        s = out[name]
        assert (s.steps, s.slots, s.attention_work) == ref[name], name
        assert s.tokens == ref["tokens"] and s.own_work == ref["own"]
        assert s.occupancy == pytest.approx(ref["tokens"] / ref[name][1])
        assert s.attention_waste == pytest.approx(ref[name][2] / ref["own"])
    np.testing.assert_allclose(out["random_padded"].extra["batch_waste"], ref["batch_waste"])
    e = np.minimum(lengths, pack_len)
    for algo in ("bfd", "ffd"):
        v, d = out[f"packed_{algo}_varlen"], out[f"packed_{algo}_dense"]
        assert v.rows == d.rows >= math.ceil(e.sum() / pack_len)
        assert v.slots == d.slots == v.rows * pack_len
        assert v.attention_work == ref["own"] and d.attention_work == d.rows * pack_len**2
        assert v.steps == math.ceil(v.rows / batch_size)
    # orderings every data set must satisfy
    assert out["padding_free"].slots <= out["length_grouped"].slots
    assert out["random_padded"].slots <= out["pad_to_len"].slots
    assert out["packed_bfd_varlen"].attention_work <= out["packed_bfd_dense"].attention_work


def test_pack_plan_defaults_are_packs():
    from packtool.config import PackConfig

    cfg = PackConfig(pack_len=4096)
    assert (strategies.PACK_ORDER, strategies.PACK_MAX_DOCS, strategies.PACK_SEED) == (
        cfg.order,
        cfg.max_docs,
        cfg.seed,
    )
    assert cfg.strategy == "bfd" and cfg.overflow == "drop"
