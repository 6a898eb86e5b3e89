"""Batching strategies over one epoch, each reduced to three integers. Pure numpy (+ the packer).

Every strategy is computed on the *documents pack would pack*: the pieces that `--overflow` makes
of the examples (packtool.pack.overflow.apply_overflow; the profiler applies it, docs/ARCHITECTURE.md,
"Semantics", Overflow), each of 1..L tokens e_i:

    examples  [3, 9, 0, 5]   L 4      drop      e = [3]             9, 5 and 0 left out
                                      truncate  e = [3, 4, 4]       9 → 4, 5 → 4
                                      split     e = [3, 4, 4, 1, 4, 1]

    tokens          Σ e_i                        real tokens, the same for all strategies
    slots           token positions computed     real + pad; what the linear layers pay for
    attention_work  Σ (query, key) pairs         what the attention kernel pays for

Attention work counts the *full* score matrix: a sequence of n positions costs n² pairs, a batch
padded to m with b rows costs b·m², a packed row of L with a dense mask costs L², a document under
a varlen kernel costs n² (docs/ARCHITECTURE.md, "Semantics"). A causal kernel that skips masked
blocks does about half of every one of these, so the ratios between strategies do not change.

    batch of 2 padded to 4      packed row, L = 8, varlen      packed row, L = 8, dense mask
    a a a .  ← 2 pads           a a a b b b b .                a a a b b b b .
    b b b b                     work 3² + 4² = 25              work 8² = 64
    slots 8, work 2·4² = 32     slots 8                        slots 8

Packed rows are planned by plan.plan_packs with pack's own defaults (PACK_ORDER sorted,
PACK_MAX_DOCS 0, PACK_SEED 0): packed_bfd_* rows are the rows `packtool pack` writes for the
same pieces.

simulate(lengths, --len, --batch-size, --group-window, --seed) returns, in STRATEGY_LABELS order:

    pad_to_len  random_padded  length_grouped  padding_free  packed_{bfd,ffd}_{varlen,dense}
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# what every strategy does with the examples longer than --len, per --overflow (pack's policy)
OVERFLOW_NOTES: dict[str, str] = {
    "drop": "examples longer than --len are left out of every strategy (--overflow drop, as pack)",
    "truncate": "examples longer than --len are truncated to --len for every strategy",
    "split": "examples longer than --len are split into parts of --len, each a document of its own",
    "error": "no example is longer than --len (--overflow error)",
}


def overflow_note(overflow: str, pairs: bool = False) -> str:
    """OVERFLOW_NOTES[overflow], for preference pairs under truncate their own rule."""
    if pairs and overflow == "truncate":
        return (
            "pairs longer than --len are cut or dropped for every strategy, as pack: their answers "
            "cut to fit, or the pair dropped when a prompt leaves no trained token"
        )
    return OVERFLOW_NOTES[overflow]


# pack's planner options that the packed strategies use: config.PackConfig's defaults
PACK_ORDER, PACK_MAX_DOCS, PACK_SEED = "sorted", 0, 0


STRATEGY_LABELS: dict[str, str] = {
    "pad_to_len": "pad to --len",
    "random_padded": "random batches, padded",
    "length_grouped": "length-grouped batches",
    "padding_free": "padding-free (varlen)",
    "packed_bfd_varlen": "packed BFD + varlen",
    "packed_bfd_dense": "packed BFD + dense mask",
    "packed_ffd_varlen": "packed FFD + varlen",
    "packed_ffd_dense": "packed FFD + dense mask",
}


@dataclass(frozen=True)
class StrategyResult:
    """One batching strategy over the whole epoch (see the module docstring for the units)."""

    name: str
    rows: int  # sequences fed to the model: padded rows, varlen sequences or packed rows
    steps: int  # micro-batches of --batch-size rows
    tokens: int  # Σ e_i
    slots: int  # positions computed, pad included
    attention_work: int  # Σ pairs, full-n² convention
    own_work: int  # Σ e_i², the work of every example attended alone
    docs_per_row: float | None = None  # packed strategies only
    extra: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        return self.extra.get("label") or STRATEGY_LABELS.get(self.name, self.name)

    @property
    def occupancy(self) -> float:
        return self.tokens / self.slots if self.slots else 1.0

    @property
    def padding_fraction(self) -> float:
        return 1.0 - self.occupancy

    @property
    def attention_waste(self) -> float:
        return self.attention_work / self.own_work if self.own_work else 1.0


def _total(e: np.ndarray) -> int:
    return int(e.sum(dtype=np.int64))


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def pad_to_len(e: np.ndarray, pack_len: int, batch_size: int, own_work: int) -> StrategyResult:
    n = int(e.size)
    return StrategyResult(
        "pad_to_len",
        rows=n,
        steps=_ceil_div(n, batch_size),
        tokens=_total(e),
        slots=n * pack_len,
        attention_work=n * pack_len * pack_len,
        own_work=own_work,
    )


def padded_batches(
    x: np.ndarray, batch_size: int, sq: np.ndarray | None = None, starts: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut `x` (lengths in batch order) into consecutive batches of `batch_size` (the last may be
    short), or at `starts` (each batch's first item). Returns per batch (rows, longest, Σ e²) as
    int64, via ufunc.reduceat (no padding copy); `sq` gives each item's own Σ e² where it is not
    x² (a pair: both sides).

        x        5 1 | 2 7 | 3       batch_size 2
        rows     2     2     1
        longest  5     7     3
        Σ e²     26    53    9
    """
    n = x.size
    starts = np.arange(0, n, batch_size) if starts is None else starts
    rows = np.diff(np.append(starts, n))
    longest = np.maximum.reduceat(x, starts).astype(np.int64)
    if sq is None:
        sq = x.astype(np.int64)
        np.multiply(sq, sq, out=sq)
    return rows, longest, np.add.reduceat(sq, starts)


def random_padded(
    e: np.ndarray, batch_size: int, perm: np.ndarray, own_work: int
) -> StrategyResult:
    """Shuffle, cut into batches of B, pad each batch to its longest member: slots b·m, work b·m².

    extra["batch_waste"] holds each batch's own waste ratio b·m² / Σ e² (for the plot)."""
    rows, m, sq = padded_batches(e[perm], batch_size)
    return StrategyResult(
        "random_padded",
        rows=int(e.size),
        steps=int(rows.size),
        tokens=_total(e),
        slots=int((rows * m).sum()),
        attention_work=int((rows * m * m).sum()),
        own_work=own_work,
        extra={"batch_waste": (rows * m * m) / np.maximum(sq, 1)},
    )


def length_grouped(
    e: np.ndarray, batch_size: int, window: int, perm: np.ndarray, own_work: int
) -> StrategyResult:
    """Shuffle, take windows of `window` consecutive examples, sort each window by length
    (longest first), cut each window into batches of B (a window's last batch may be short;
    batches never cross windows), pad each batch to its longest member.

        shuffled  5 1 4 2 | 3 6        window 4, B 2
        sorted    5 4 2 1 | 6 3        batches [5 4] [2 1] [6 3]
    """
    x = e[perm]
    n = x.size
    window = max(1, min(window, n))  # one window holding everything is the same as a larger one
    nw = _ceil_div(n, window)
    grid = np.zeros(nw * window, dtype=np.int32)  # e <= --len < 2**31
    grid[:n] = x
    grid = grid.reshape(nw, window)
    grid.sort(axis=1)  # ascending, in place; zeros (the last window's padding) come first
    grid = grid[:, ::-1]  # longest first, zeros last
    per_window = _ceil_div(window, batch_size) * batch_size
    if per_window != window:
        grid = np.pad(grid, ((0, 0), (0, per_window - window)))
    batches = np.ascontiguousarray(grid).reshape(-1, batch_size).astype(np.int64)
    m = batches[:, 0]
    rows = (batches > 0).sum(axis=1)
    keep = rows > 0
    m, rows = m[keep], rows[keep]
    return StrategyResult(
        "length_grouped",
        rows=int(n),
        steps=int(rows.size),
        tokens=_total(e),
        slots=int((rows * m).sum()),
        attention_work=int((rows * m * m).sum()),
        own_work=own_work,
    )


def padding_free(e: np.ndarray, batch_size: int, own_work: int) -> StrategyResult:
    """Batches of B examples concatenated without pad (TRL padding_free, DataCollatorWithFlattening)."""
    n = int(e.size)
    tokens = _total(e)
    return StrategyResult(
        "padding_free",
        rows=n,
        steps=_ceil_div(n, batch_size),
        tokens=tokens,
        slots=tokens,
        attention_work=own_work,
        own_work=own_work,
    )


def packed(
    e: np.ndarray,
    pack_len: int,
    batch_size: int,
    algo: str,
    own_work: int,
    seed: int = 0,
    pairs: bool = False,
) -> tuple[StrategyResult, StrategyResult]:
    """Rows of --len planned by the same packer as `packtool pack`; (varlen, dense-mask) results.

    plan_packs(e, L, algo, PACK_ORDER, PACK_MAX_DOCS, seed) as pack/run.py calls it (plan_pairs
    with `pairs`: sides 2k, 2k+1 a pair kept in one row); `seed` is pack's --seed (0 by default,
    unused by order "sorted"), not profile's batch-shuffle seed.
    varlen: each document attends only to itself (cu_seqlens over the documents; the pad tail
    is not attended), work Σ e². dense: the whole row is one L×L score matrix, work R·L²."""
    from packtool.plan import plan_packs, plan_pairs

    n = int(e.size)
    plan = plan_pairs if pairs else plan_packs
    num_rows = int(plan(e, pack_len, algo, PACK_ORDER, PACK_MAX_DOCS, seed).num_rows) if n else 0
    tokens = _total(e)
    common = dict(
        rows=num_rows,
        steps=_ceil_div(num_rows, batch_size),
        tokens=tokens,
        slots=num_rows * pack_len,
        own_work=own_work,
        docs_per_row=(n / num_rows) if num_rows else None,
    )
    return (
        StrategyResult(f"packed_{algo}_varlen", attention_work=own_work, **common),
        StrategyResult(
            f"packed_{algo}_dense", attention_work=num_rows * pack_len * pack_len, **common
        ),
    )


def simulate(
    lengths: np.ndarray,
    pack_len: int,
    batch_size: int,
    group_window: int,
    seed: int = 0,
    on_stage=None,
) -> dict[str, StrategyResult]:
    """All strategies on `lengths`: the documents to batch, normally the pieces of
    pack.overflow.apply_overflow (1..pack_len each; anything longer is truncated to `pack_len`
    first). Random and length-grouped batching share one shuffle seeded with `seed` (profile's
    --seed); the packed rows use pack's planner defaults (PACK_ORDER, PACK_MAX_DOCS, PACK_SEED)."""
    say = on_stage or (lambda _s: None)
    e = np.minimum(np.asarray(lengths, dtype=np.int64), pack_len)
    own = int((e * e).sum())
    e = e.astype(np.int32)  # <= --len < 2**24: half the memory traffic; products are taken in int64
    out: dict[str, StrategyResult] = {}
    out["pad_to_len"] = pad_to_len(e, pack_len, batch_size, own)
    say("random batches")
    perm = np.random.default_rng(seed).permutation(e.size)
    out["random_padded"] = random_padded(e, batch_size, perm, own)
    say("length-grouped batches")
    out["length_grouped"] = length_grouped(e, batch_size, group_window, perm, own)
    del perm
    out["padding_free"] = padding_free(e, batch_size, own)
    for algo in ("bfd", "ffd"):
        say(f"packing ({algo.upper()})")
        for s in packed(e, pack_len, batch_size, algo, own, seed=PACK_SEED):
            out[s.name] = s
    return out


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


def _pair_batches(
    longest: np.ndarray, sq: np.ndarray, name: str, batch_size: int, common: dict, starts=None
):
    """Batches of `batch_size` consecutive pairs (longest side, Σ e² of both sides, in batch
    order), or cut at `starts`, both sides padded to the batch's longest."""
    pairs, m, own = padded_batches(longest, batch_size, sq, starts)
    return StrategyResult(
        name,
        steps=int(pairs.size),
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
    """The strategies of `simulate` for preference pairs, as a preference trainer does each on the
    pieces `pack` would write (pack/pairs.apply_pair_overflow: sides 2k, 2k+1 of pair k, each
    pair's sum <= pack_len); `batch_size` pairs a padded batch, rows a packed one.

        pairs (c, r)   (3, 5) (6, 2) (4, 4)            B = 2 pairs a batch, L = 12

        pad_to_len       every side padded to L: slots 6·12
        random_padded    TRL's preference collator: B shuffled pairs a batch, chosen and rejected
                         padded together to the batch's longest side
                         [(6,2) (3,5)] [(4,4)] → slots 4·6 + 2·4, work 4·6² + 2·4²
        length_grouped   the same, the pairs of each window of `group_window` sorted by longest side
        padding_free     every side attended alone, no pad (what TRL's padding_free would do for DPO)
        packed_{bfd,ffd}_{varlen,dense}
                         rows of L holding whole pairs (plan.plan_pairs with pack's defaults)
    """
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
    # as length_grouped: windows of `window` consecutive shuffled pairs (the last may be short),
    # each sorted and cut into batches of B (a window's last batch may be short): none crosses one
    window = max(1, min(group_window, n))
    order = np.concatenate(
        [
            w[np.argsort(-longest[w], kind="stable")]
            for w in np.split(perm, range(window, n, window))
        ]
    )
    at = np.arange(n)
    starts = at[at % window % batch_size == 0]
    grouped = _pair_batches(longest[order], sq[order], "length_grouped", batch_size, common, starts)
    grouped.extra.pop("batch_waste")
    out["length_grouped"] = grouped
    out["padding_free"] = padding_free(e, 2 * batch_size, own)
    for algo in ("bfd", "ffd"):
        say(f"packing pairs ({algo.upper()})")
        for s in packed(e, pack_len, batch_size, algo, own, PACK_SEED, pairs=True):
            out[s.name] = s
    for s in out.values():
        s.extra["label"] = PAIR_LABELS[s.name]
    return out
