"""packtool.stats.lengths: describe by hand and against numpy; histograms cover every length."""

from __future__ import annotations

import numpy as np
import pytest

from packtool.stats import lengths

# ---------------------------------------------------------------------------------------------
# describe


def test_describe_by_hand():
    d = lengths.describe(np.array([1, 2, 3, 4]))
    assert d == {
        "count": 4,
        "sum": 10,
        "min": 1,
        "mean": 2.5,
        "median": 2.5,
        "p90": pytest.approx(3.7),
        "p95": pytest.approx(3.85),
        "p99": pytest.approx(3.97),
        "max": 4,
    }
    assert lengths.describe(np.array([], dtype=np.int32))["median"] is None


@pytest.mark.parametrize("case", range(10))
def test_describe_matches_numpy(case):
    v = np.random.default_rng(case).integers(1, 10_000, 1 + 37 * case)
    d = lengths.describe(v)
    assert d["median"] == pytest.approx(np.median(v))
    assert d["p99"] == pytest.approx(np.percentile(v, 99))
    assert d["mean"] == pytest.approx(v.mean()) and d["sum"] == v.sum()


# ---------------------------------------------------------------------------------------------
# histogram


def test_histogram_covers_everything():
    v = np.random.default_rng(0).integers(1, 5000, 10_000)
    h = lengths.length_histogram(v, 4096, bins=24)
    assert h.counts.sum() == v.size and not h.overflow
    assert h.edges[0] <= v.min() and h.edges[-1] > v.max()
    assert len(h.counts) <= 25
    for i in range(len(h.counts)):  # every bin holds exactly the values in [edge_i, edge_i+1)
        assert h.counts[i] == ((v >= h.edges[i]) & (v < h.edges[i + 1])).sum()


def test_histogram_folds_a_long_tail():
    v = np.concatenate([np.full(990, 100), np.arange(200, 210), [100_000]])
    h = lengths.length_histogram(v, 4096, bins=24)
    assert h.overflow and h.counts.sum() == v.size
    assert h.edges[-1] == 100_001 and h.counts[-1] >= 1
    assert h.edges[-2] <= 4096  # --len 4096 > 2·p99 (~209), so the tail starts right after p99


def test_nice_step():
    assert lengths.nice_step(24, 24) == 1
    assert lengths.nice_step(4096, 24) == 200
    assert lengths.nice_step(1000, 10) == 100


def test_nice_step_is_the_smallest_nice_width():
    """The smallest integer 1, 2, 2.5, 5 × 10^k of at least span / bins (and at least 1)."""
    nice = sorted(
        m * 10**k for k in range(7) for m in (1, 2, 2.5, 5) if float(m * 10**k).is_integer()
    )
    for span in (1, 7, 24, 95, 99, 100, 101, 999, 1000, 4096, 12_345, 999_999):
        for bins in (1, 3, 10, 24, 80):
            raw = max(span / bins, 1.0)
            want = min(s for s in nice if s >= raw)
            assert lengths.nice_step(span, bins) == want, (span, bins)
    assert lengths.nice_step(95, 10) == 10  # past 5 × 10^0: the next power of ten
