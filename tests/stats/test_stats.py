"""packtool.stats: every metric by hand on tiny cases, then against a brute-force oracle."""

from __future__ import annotations

import math

import numpy as np
import pytest

from packtool import stats
from packtool.errors import PacktoolError, UsageError

IDENTITY4 = np.arange(4)


# ---------------------------------------------------------------------------------------------
# by hand: lengths [1, 2, 3, 4], batch size 2, --len 4   (own work Σ n² = 1 + 4 + 9 + 16 = 30)


def test_truncate_by_hand():
    e, over, cut = stats.truncate(np.array([1, 2, 3, 9, 6]), 4)
    assert e.tolist() == [1, 2, 3, 4, 4]
    assert (over, cut) == (2, 5 + 2)


def test_pad_to_len_by_hand():
    e = np.array([1, 2, 3, 4])
    s = stats.pad_to_len(e, 4, 2, own_work=30)
    assert (s.rows, s.steps, s.tokens, s.slots, s.attention_work) == (4, 2, 10, 16, 64)  # 4 rows × 4², 4 × 4 slots
    assert s.occupancy == pytest.approx(10 / 16)
    assert s.padding_fraction == pytest.approx(6 / 16)
    assert s.attention_waste == pytest.approx(64 / 30)


def test_random_padded_by_hand():
    e = np.array([1, 2, 3, 4])
    # order as given: batches [1 2] [3 4] → padded to 2 and 4: slots 2·2 + 2·4, work 2·2² + 2·4²
    s = stats.random_padded(e, 2, IDENTITY4, own_work=30)
    assert (s.steps, s.slots, s.attention_work) == (2, 12, 40)
    assert s.occupancy == pytest.approx(10 / 12)
    assert s.attention_waste == pytest.approx(40 / 30)
    assert s.extra["batch_waste"].tolist() == pytest.approx([8 / 5, 32 / 25])
    # order [1 4] [2 3]: slots 2·4 + 2·3 = 14, work 2·16 + 2·9 = 50
    s = stats.random_padded(e, 2, np.array([0, 3, 1, 2]), own_work=30)
    assert (s.slots, s.attention_work) == (14, 50)


def test_random_padded_short_last_batch():
    # [5 1] [2]: the last batch has one row: slots 2·5 + 1·2, work 2·25 + 4
    s = stats.random_padded(np.array([5, 1, 2]), 2, np.arange(3), own_work=30)
    assert (s.steps, s.slots, s.attention_work) == (2, 12, 54)


def test_length_grouped_by_hand():
    e = np.array([1, 2, 3, 4])
    # one window of 4 sorted longest first: [4 3] [2 1] → slots 2·4 + 2·2, work 2·16 + 2·4
    s = stats.length_grouped(e, 2, 4, IDENTITY4, own_work=30)
    assert (s.steps, s.slots, s.attention_work) == (2, 12, 40)
    # windows of 2 over the order [1 4 2 3]: [4 1] [3 2] → slots 8 + 6, work 32 + 18
    s = stats.length_grouped(e, 2, 2, np.array([0, 3, 1, 2]), own_work=30)
    assert (s.steps, s.slots, s.attention_work) == (2, 14, 50)
    # windows of 3: [1 2 3] [4] → [3 2] [1] | [4]: batches never cross windows
    s = stats.length_grouped(e, 2, 3, IDENTITY4, own_work=30)
    assert (s.steps, s.slots, s.attention_work) == (3, 6 + 1 + 4, 18 + 1 + 16)
    # a window larger than the data is one window (and allocates nothing more)
    s = stats.length_grouped(e, 2, 10**12, IDENTITY4, own_work=30)
    assert (s.steps, s.slots, s.attention_work) == (2, 12, 40)


def test_padding_free_by_hand():
    s = stats.padding_free(np.array([1, 2, 3, 4]), 2, own_work=30)
    assert (s.rows, s.steps, s.slots, s.attention_work) == (4, 2, 10, 30)
    assert s.occupancy == 1.0 and s.attention_waste == 1.0


def test_packed_by_hand():
    # --len 5, longest first: 4 → row 0; 3 → row 1; 2 → row 1 (full); 1 → row 0 (full): 2 rows
    e = np.array([1, 2, 3, 4])
    for algo in ("bfd", "ffd"):
        varlen, dense = stats.packed(e, 5, 2, algo, own_work=30)
        assert varlen.name == f"packed_{algo}_varlen" and dense.name == f"packed_{algo}_dense"
        assert (varlen.rows, varlen.steps, varlen.slots, varlen.attention_work) == (2, 1, 10, 30)
        assert (dense.rows, dense.slots, dense.attention_work) == (2, 10, 2 * 25)
        assert varlen.occupancy == 1.0 and varlen.docs_per_row == 2.0
        assert dense.attention_waste == pytest.approx(50 / 30)


def test_simulate_truncates_for_every_strategy():
    out = stats.simulate(np.array([1, 2, 3, 9]), 4, 2, 2, seed=0)
    assert list(out) == list(stats.STRATEGY_LABELS)
    for s in out.values():
        assert s.tokens == 1 + 2 + 3 + 4
        assert s.own_work == 30
        assert s.slots >= s.tokens
    assert out["pad_to_len"].slots == 16


def test_describe_by_hand():
    d = stats.describe(np.array([1, 2, 3, 4]))
    assert d == {"count": 4, "sum": 10, "min": 1, "mean": 2.5, "median": 2.5, "p90": pytest.approx(3.7),
                 "p95": pytest.approx(3.85), "p99": pytest.approx(3.97), "max": 4}
    assert stats.describe(np.array([], dtype=np.int32))["median"] is None


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

    random_batches = [shuffled[i:i + batch_size] for i in range(0, len(e), batch_size)]
    grouped = []
    for w in range(0, len(e), window):
        win = sorted(shuffled[w:w + window], reverse=True)
        grouped += [win[i:i + batch_size] for i in range(0, len(win), batch_size)]
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
    out = stats.simulate(lengths, pack_len, batch_size, window, seed)
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


@pytest.mark.parametrize("case", range(10))
def test_describe_matches_numpy(case):
    v = np.random.default_rng(case).integers(1, 10_000, 1 + 37 * case)
    d = stats.describe(v)
    assert d["median"] == pytest.approx(np.median(v))
    assert d["p99"] == pytest.approx(np.percentile(v, 99))
    assert d["mean"] == pytest.approx(v.mean()) and d["sum"] == v.sum()


# ---------------------------------------------------------------------------------------------
# histogram


def test_histogram_covers_everything():
    v = np.random.default_rng(0).integers(1, 5000, 10_000)
    h = stats.length_histogram(v, 4096, bins=24)
    assert h.counts.sum() == v.size and not h.overflow
    assert h.edges[0] <= v.min() and h.edges[-1] > v.max()
    assert len(h.counts) <= 25
    for i in range(len(h.counts)):  # every bin holds exactly the values in [edge_i, edge_i+1)
        assert h.counts[i] == ((v >= h.edges[i]) & (v < h.edges[i + 1])).sum()


def test_histogram_folds_a_long_tail():
    v = np.concatenate([np.full(990, 100), np.arange(200, 210), [100_000]])
    h = stats.length_histogram(v, 4096, bins=24)
    assert h.overflow and h.counts.sum() == v.size
    assert h.edges[-1] == 100_001 and h.counts[-1] >= 1
    assert h.edges[-2] <= 4096  # --len 4096 > 2·p99 (~209), so the tail starts right after p99


def test_nice_step():
    assert stats.nice_step(24, 24) == 1
    assert stats.nice_step(4096, 24) == 200
    assert stats.nice_step(1000, 10) == 100


# ---------------------------------------------------------------------------------------------
# FLOP model


LLAMA2_7B = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
             "num_key_value_heads": 32, "intermediate_size": 11008, "vocab_size": 32000,
             "tie_word_embeddings": False}


def test_model_from_llama_config():
    m = stats.model_from_config(LLAMA2_7B)
    per_layer = 4 * 4096**2 + 3 * 4096 * 11008
    assert m.total_params == 32 * per_layer + 2 * 32000 * 4096 == 6_738_149_376  # HF: 6,738,415,616 with norms
    assert m.matmul_params == 32 * per_layer + 32000 * 4096  # LM head counted once, embedding lookup not
    assert (m.layers, m.d_attn) == (32, 4096)


def test_model_gqa_tied_and_moe():
    gqa = dict(LLAMA2_7B, num_key_value_heads=8, tie_word_embeddings=True, head_dim=128)
    m = stats.model_from_config(gqa)
    attn = 4096 * 4096 * 2 + 2 * 4096 * 8 * 128
    assert m.total_params == 32 * (attn + 3 * 4096 * 11008) + 32000 * 4096
    moe = dict(LLAMA2_7B, num_local_experts=8, num_experts_per_tok=2)
    mm = stats.model_from_config(moe)
    assert mm.matmul_params == 32 * (4 * 4096**2 + 2 * 3 * 4096 * 11008) + 32000 * 4096
    assert any("MoE" in n for n in mm.notes)
    gpt2 = {"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257}
    g = stats.model_from_config(gpt2)
    assert g.matmul_params == 12 * (4 * 768**2 + 2 * 768 * 3072) + 50257 * 768


def test_model_config_errors():
    with pytest.raises(PacktoolError, match="no hidden size"):
        stats.model_from_config({"num_hidden_layers": 2, "num_attention_heads": 2, "vocab_size": 10})
    with pytest.raises(PacktoolError, match="num_hidden_layers=-1"):
        stats.model_from_config(dict(LLAMA2_7B, num_hidden_layers=-1))
    with pytest.raises(UsageError, match="--layers 0"):
        stats.model_from_params(7e9, 0, 4096)


def test_training_flops_by_hand():
    m = stats.model_from_params(1e9, 2, 8)
    lin, att = stats.training_flops(m, slots=10, attention_work=30)
    assert lin == 6 * 1e9 * 10
    assert att == 12 * 2 * 8 * 30


def test_gpu_hours_and_specs():
    h100 = stats.gpu_spec("H100")
    assert h100.peak_tflops == 989.4
    assert stats.gpu_hours(989.4e12 * 0.4 * 3600, h100, 0.4) == pytest.approx(1.0)
    assert stats.gpu_spec("600").peak_tflops == 600
    with pytest.raises(UsageError, match="not a known GPU"):
        stats.gpu_spec("h1000")
    with pytest.raises(UsageError, match="positive"):
        stats.gpu_spec("-5")
