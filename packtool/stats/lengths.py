"""Length distributions: summary statistics and histograms of tokens per example. Pure numpy.

    lengths  int[n]  tokens per example
       │
       ├─ describe ──────────▶ {count, sum, min, mean, median, p90, p95, p99, max}
       │
       └─ length_histogram ──▶ Histogram
                                 edges   int64[k+1]   e0    e1    e2   …   e(k-1)   e(k)
                                 counts  int64[k]       c0    c1   …        c(k-1)
                                 counts[i] = #{ e(i) <= length < e(i+1) }

With a long tail (`overflow`) the regular bins stop near p99 (or --len) and the last bin holds
everything from e(k-1) to the longest example, e(k) = max + 1:

    ▁▃▇█▆▄▂▁▁ ▂     ← the last bar is the folded tail [e(k-1), max]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

PERCENTILES = (50, 90, 95, 99)


def describe(values: np.ndarray) -> dict:
    """count, sum, min, mean, median, p90, p95, p99, max (numpy's linear percentiles)."""
    v = np.asarray(values)
    if v.size == 0:
        return {
            "count": 0,
            "sum": 0,
            **dict.fromkeys(("min", "mean", "median", "p90", "p95", "p99", "max")),
        }
    p50, p90, p95, p99 = (float(x) for x in np.percentile(v, PERCENTILES))
    return {
        "count": int(v.size),
        "sum": int(v.sum(dtype=np.int64)),
        "min": int(v.min()),
        "mean": float(v.mean(dtype=np.float64)),
        "median": p50,
        "p90": p90,
        "p95": p95,
        "p99": p99,
        "max": int(v.max()),
    }


def nice_step(span: float, bins: int) -> int:
    """The smallest of 1, 2, 2.5, 5 × 10^k that covers `span` in at most `bins` bins."""
    raw = max(span / max(bins, 1), 1.0)
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5):
        step = m * mag
        if step >= raw and float(step).is_integer():
            return int(step)
    return int(10 * mag)  # raw < 10·mag by the choice of mag


@dataclass(frozen=True)
class Histogram:
    """counts[i] examples with edges[i] <= length < edges[i+1]; the last bin also holds
    everything >= edges[-2] when `overflow` (a long tail folded into one bar)."""

    edges: np.ndarray  # int64[k+1]
    counts: np.ndarray  # int64[k]
    overflow: bool

    def to_json(self) -> dict:
        return {
            "edges": self.edges.tolist(),
            "counts": self.counts.tolist(),
            "overflow": self.overflow,
        }


def length_histogram(
    lengths: np.ndarray, pack_len: int, bins: int = 24, p99: float | None = None
) -> Histogram:
    """About `bins` linear bins of a "nice" width from the shortest to the longest length. With a
    long tail (max > 1.5 × top, top = p99, or --len when --len <= 2·p99) the bins stop at top and
    one last bin holds the tail. O(n) via bincount."""
    v = np.asarray(lengths, dtype=np.int64)
    if v.size == 0:
        return Histogram(np.array([0, 1], dtype=np.int64), np.zeros(1, dtype=np.int64), False)
    vmin, vmax = int(v.min()), int(v.max())
    p99 = float(np.percentile(v, 99)) if p99 is None else p99
    top = int(p99)
    if pack_len < vmax and pack_len <= 2 * p99:  # show where --len cuts when it is near the bulk
        top = max(top, pack_len)
    overflow = vmax > 1.5 * top
    if not overflow:
        top = vmax
    step = nice_step(top - vmin + 1, bins - 1 if overflow else bins)
    lo = (vmin // step) * step
    nb = (top - lo) // step + 1  # regular bins cover [lo, lo + nb·step)
    idx = (v - lo) // step
    if overflow:
        idx = np.minimum(idx, nb)
    counts = np.bincount(idx, minlength=nb + overflow).astype(np.int64)
    edges = lo + np.arange(counts.size + 1, dtype=np.int64) * step
    if overflow:
        edges[-1] = vmax + 1
    return Histogram(edges, counts, bool(overflow))
