"""Batching strategies for preference pairs, in the units of strategies.py (tokens, slots,
attention work), on the pieces `pack` would write (pack/pairs.apply_pair_overflow).

    pairs       (c, r) = (3, 5) (6, 2) (4, 4)          B = 2 pairs a batch, L = 12
    pair_padded         TRL's preference collator: a batch's chosen and rejected sequences
                        padded together to the longest of both
                        shuffled [(6,2) (3,5)] [(4,4)]  → slots 4·6 + 2·4 = 32, work 4·6² + 2·4²
    pair_packed_varlen  rows of L holding whole pairs (plan.plan_pairs, pack's defaults),
                        each document attended alone: slots R·L, work Σ e²
    pair_packed_dense   the same rows under one dense mask per row: work R·L²
"""

from __future__ import annotations

import numpy as np

from packtool.stats.strategies import PACK_MAX_DOCS, PACK_ORDER, PACK_SEED, StrategyResult

PAIR_LABELS = {
    "pair_padded": "pair batches, padded (TRL)",
    "pair_packed_varlen": "packed pairs + varlen",
    "pair_packed_dense": "packed pairs + dense mask",
}


def simulate_pairs(
    lengths: np.ndarray, pack_len: int, batch_size: int, seed: int = 0
) -> dict[str, StrategyResult]:
    """The strategies over pieces in pairs: `lengths` int[2n], chosen at 2k, rejected at 2k+1
    (each <= pack_len, a pair's sum <= pack_len); `batch_size` pairs a padded batch, rows a
    packed one; `seed` shuffles the padded batches (profile's --seed)."""
    from packtool.plan import plan_pairs

    e = np.asarray(lengths, dtype=np.int64)
    n = e.size // 2
    tokens, own = int(e.sum()), int((e * e).sum())
    out: dict[str, StrategyResult] = {}
    longest = np.maximum(e[0::2], e[1::2])[np.random.default_rng(seed).permutation(n)]
    starts = np.arange(0, n, batch_size)
    pairs = np.diff(np.append(starts, n))
    m = np.maximum.reduceat(longest, starts) if n else np.zeros(0, np.int64)
    out["pair_padded"] = StrategyResult(
        "pair_padded",
        rows=2 * n,
        steps=int(starts.size),
        tokens=tokens,
        slots=int((2 * pairs * m).sum()),
        attention_work=int((2 * pairs * m * m).sum()),
        own_work=own,
    )
    rows = plan_pairs(e, pack_len, "bfd", PACK_ORDER, PACK_MAX_DOCS, PACK_SEED).num_rows if n else 0
    common = dict(
        rows=rows,
        steps=-(-rows // batch_size),
        tokens=tokens,
        slots=rows * pack_len,
        own_work=own,
        docs_per_row=(2 * n / rows) if rows else None,
    )
    out["pair_packed_varlen"] = StrategyResult("pair_packed_varlen", attention_work=own, **common)
    out["pair_packed_dense"] = StrategyResult(
        "pair_packed_dense", attention_work=rows * pack_len * pack_len, **common
    )
    return out
