"""The batching strategies of strategies.py for preference pairs: the same names, units (tokens,
slots, attention work) and report, each done as a preference trainer does it with pairs, on the
pieces `pack` would write (pack/pairs.apply_pair_overflow: sides 2k, 2k+1 of pair k).

    pairs (c, r)   (3, 5) (6, 2) (4, 4)            B = 2 pairs a batch, L = 12

    pad_to_len       every side padded to L: slots 6·12
    random_padded    TRL's preference collator: B shuffled pairs a batch, chosen and rejected
                     padded together to the batch's longest side
                     [(6,2) (3,5)] [(4,4)] → slots 4·6 + 2·4, work 4·6² + 2·4²
    length_grouped   the same, the pairs of each window of `group_window` sorted by longest side
    padding_free     every side attended alone, no pad (what TRL's padding_free would do for DPO)
    packed_{bfd,ffd}_{varlen,dense}
                     rows of L holding whole pairs (plan.plan_pairs with pack's defaults: the rows
                     pack writes), documents attended alone (varlen) or one mask a row (dense)
"""

from __future__ import annotations

import numpy as np

from packtool.stats.strategies import (
    PACK_MAX_DOCS,
    PACK_ORDER,
    PACK_SEED,
    StrategyResult,
    pad_to_len,
    padding_free,
)

PAIR_LABELS = {
    "pad_to_len": "sides padded to --len",
    "random_padded": "random pair batches, padded (TRL)",
    "length_grouped": "length-grouped pair batches",
    "padding_free": "padding-free sides (varlen)",
    "packed_bfd_varlen": "packed pairs BFD + varlen",
    "packed_bfd_dense": "packed pairs BFD + dense mask",
    "packed_ffd_varlen": "packed pairs FFD + varlen",
    "packed_ffd_dense": "packed pairs FFD + dense mask",
}


def _labelled(s: StrategyResult) -> StrategyResult:
    s.extra["label"] = PAIR_LABELS[s.name]
    return s


def _pair_batches(longest: np.ndarray, sq: np.ndarray, name: str, batch_size: int, common: dict):
    """Batches of `batch_size` consecutive pairs (longest side, Σ e² of both sides, in batch
    order), both sides padded to the batch's longest."""
    n = longest.size
    starts = np.arange(0, n, batch_size)
    pairs = np.diff(np.append(starts, n))
    m = np.maximum.reduceat(longest, starts)
    own = np.add.reduceat(sq, starts)
    return StrategyResult(
        name,
        steps=int(starts.size),
        slots=int((2 * pairs * m).sum()),
        attention_work=int((2 * pairs * m * m).sum()),
        extra={"batch_waste": (2 * pairs * m * m) / np.maximum(own, 1)},
        **common,
    )


def simulate_pairs(
    slots: np.ndarray,
    pack_len: int,
    batch_size: int,
    group_window: int,
    seed: int = 0,
    on_stage=None,
) -> dict[str, StrategyResult]:
    """Every strategy on pieces in pairs (`slots` int[2n], each pair's sum <= pack_len);
    `batch_size` pairs a padded batch, rows a packed one; random and length-grouped batches share
    one shuffle seeded with `seed` (profile's --seed)."""
    from packtool.plan import plan_pairs

    say = on_stage or (lambda _s: None)
    e = np.asarray(slots, dtype=np.int64)
    n = e.size // 2
    tokens, own = int(e.sum()), int((e * e).sum())
    out: dict[str, StrategyResult] = {}
    out["pad_to_len"] = pad_to_len(e, pack_len, 2 * batch_size, own)
    say("random pair batches")
    longest, sq = np.maximum(e[0::2], e[1::2]), e[0::2] ** 2 + e[1::2] ** 2
    perm = np.random.default_rng(seed).permutation(n)
    common = dict(rows=2 * n, tokens=tokens, own_work=own)
    out["random_padded"] = _pair_batches(
        longest[perm], sq[perm], "random_padded", batch_size, common
    )
    say("length-grouped pair batches")
    window = -(-max(1, min(group_window, n)) // batch_size) * batch_size  # batches stay inside
    order = np.concatenate(
        [w[np.argsort(-longest[w], kind="stable")] for w in np.array_split(perm, -(-n // window))]
    )
    grouped = _pair_batches(longest[order], sq[order], "length_grouped", batch_size, common)
    grouped.extra.pop("batch_waste")
    out["length_grouped"] = grouped
    out["padding_free"] = padding_free(e, 2 * batch_size, own)
    for algo in ("bfd", "ffd"):
        say(f"packing pairs ({algo.upper()})")
        rows = plan_pairs(e, pack_len, algo, PACK_ORDER, PACK_MAX_DOCS, PACK_SEED).num_rows
        packed = dict(
            rows=rows,
            steps=-(-rows // batch_size),
            tokens=tokens,
            slots=rows * pack_len,
            own_work=own,
            docs_per_row=(2 * n / rows) if rows else None,
        )
        out[f"packed_{algo}_varlen"] = StrategyResult(
            f"packed_{algo}_varlen", attention_work=own, **packed
        )
        out[f"packed_{algo}_dense"] = StrategyResult(
            f"packed_{algo}_dense", attention_work=rows * pack_len * pack_len, **packed
        )
    return {name: _labelled(s) for name, s in out.items()}
