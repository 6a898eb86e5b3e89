"""What to do with the data, as numbers: --len, --overflow and the strategy. Pure Python + numpy; a
function of a ProfileResult (duck-typed: stats does not import the profiler). The words that say
why, and the `packtool pack` command, are stats/advice.py's.

    lengths, loss counts ──cuts_by_len──▶ cuts {L: what drop / truncate / split take at --len L}
                                                │  (profiler: ProfileResult.cuts)
    cuts, Totals (+ sweep points) ──pick_len──▶ LenPick   pack_len, overflow, rule and the facts
                                                          the rule looked at (whole, within)
    a ProfileResult's simulated costs ──evidence, pick_strategy──▶ StrategyPick

The rules (constants below; docs/ARCHITECTURE.md, "Semantics", Overflow, for what each policy does):

    ok(L)       dropping the examples longer than L loses <= MAX_LOST_SHARE of the tokens
                (and of the loss tokens, when they are known)
    outliers(L) at most OUTLIER_SHARE of the examples are longer than L

    one --len L0   ok(L0)                        → L0, drop (no --overflow flag: drop is pack's default)
                   outliers(L0)                  → L0, split (a few long examples do not move --len)
                   the smallest power of two P ok, L0 < P <= MAX_LEN_RAISE·L0
                                                 → P, drop
                   otherwise                     → L0, split
    a sweep        the smallest swept L with ok(L), and among those the smallest whose packed BFD
                   FLOPs are within FLAT of the best; else the same among outliers(L), with split;
                   else the longest swept L, with split (it splits the fewest; one --len alone
                   keeps L0 in that case: the reasons of both say so)

    strategy       packed BFD + varlen kernel (rows of exactly --len, position_ids / cu_seqlens)
                   unless length-grouped batches cost fewer FLOPs; "nearly as good" when
                   length-grouped is within NEARLY of it; the dense-mask cost is always said
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

MAX_LOST_SHARE = 0.01  # drop may lose at most 1 % of the tokens (and of the loss tokens)
OUTLIER_SHARE = 0.01  # at most 1 % of the examples longer than --len: split them, keep --len
MAX_LEN_RAISE = 4  # one --len: raise it at most two doublings
NEARLY = 0.05  # length-grouped within 5 % of packed BFD + varlen: "nearly as good"
FLAT = 0.02  # a sweep: the smallest --len whose packing is within 2 % of the best swept one
MAX_POW2 = 1 << 23  # the largest power of two <= config.MAX_PACK_LEN (64**4 - 1)
PACKED = "packed_bfd_varlen"
DENSE = "packed_bfd_dense"
GROUPED = "length_grouped"
WITHOUT_VARLEN = (
    "length_grouped",
    "packed_bfd_dense",
    "packed_ffd_dense",
    "random_padded",
    "pad_to_len",
)


# --------------------------------------------------------------------------------------------
# what each policy takes at each --len


def candidate_lens(longest: int, given: list[int] | tuple[int, ...]) -> list[int]:
    """The given lengths and every power of two above the shortest of them, up to the first one
    that holds the longest example (at most MAX_POW2):

        longest 11,540, given [4096]   →  [4096, 8192, 16384]
    """
    out = {int(g) for g in given}
    p = 1 << min(out).bit_length()  # the smallest power of two above the shortest
    while p <= MAX_POW2:
        out.add(p)
        if p >= longest:
            break
        p <<= 1
    return sorted(out)


def cuts_by_len(
    lengths: np.ndarray, loss_counts: np.ndarray | None, lens
) -> dict[int, dict[str, Any]]:
    """Per --len L, from the lengths alone (examples with 0 tokens are left out by the caller):

        examples_over     #{n > L}
        tokens_over       Σ n over them          what --overflow drop takes
        tokens_truncated  Σ (n - L) over them    what --overflow truncate takes
        loss_tokens_over  their loss tokens      what drop takes from the loss (None: unknown)
        split_parts       Σ ceil(n / L)          the documents --overflow split makes of them

    One pass over the lengths for the shortest L, then over the shrinking tail for each longer
    one (no sort: 10M lengths take about as long as one comparison each per L)."""
    lens = sorted({int(x) for x in lens})
    n = np.asarray(lengths)
    loss = None if loss_counts is None else np.asarray(loss_counts)
    out: dict[int, dict[str, Any]] = {}
    if not lens:
        return out
    keep = n > lens[0]
    tail = n[keep]
    tail_loss = None if loss is None else loss[keep]
    for L in lens:
        if tail.size and L != lens[0]:
            keep = tail > L
            tail = tail[keep]
            tail_loss = None if tail_loss is None else tail_loss[keep]
        over = int(tail.size)
        tokens_over = int(tail.sum(dtype=np.int64))
        out[L] = {
            "len": L,
            "examples_over": over,
            "tokens_over": tokens_over,
            "tokens_truncated": tokens_over - L * over,
            "loss_tokens_over": None if tail_loss is None else int(tail_loss.sum(dtype=np.int64)),
            "split_parts": int(((tail.astype(np.int64) + (L - 1)) // L).sum()),
        }
    return out


# --------------------------------------------------------------------------------------------
# choosing --len and --overflow


@dataclass(frozen=True)
class Totals:
    examples: int  # with at least one token
    tokens: int
    loss_tokens: int | None
    longest: int
    empty: int = 0
    pairs: bool = False  # preference pairs: what keeps every example is truncate (split is refused)


def share(part: int | None, whole: int | None) -> float | None:
    if part is None or whole is None:
        return None
    return part / whole if whole else 0.0


def ok(c: dict, t: Totals) -> bool:
    loss = share(c["loss_tokens_over"], t.loss_tokens)
    return share(c["tokens_over"], t.tokens) <= MAX_LOST_SHARE and (
        loss is None or loss <= MAX_LOST_SHARE
    )


def outliers(c: dict, t: Totals) -> bool:
    return share(c["examples_over"], t.examples) <= OUTLIER_SHARE


@dataclass(frozen=True)
class LenPick:
    """--len and --overflow, the rule that decided (fits | drop | raise | outliers | split |
    sweep-ok | sweep-outliers | sweep-split) and what it looked at: `given` the one --len or the
    shortest swept one; `whole` (one --len) the smallest power of two above it, within
    --pad-to-multiple, that keeps all but MAX_LOST_SHARE of tokens, or None; `within` (a sweep)
    (pick's FLOPs ÷ padding-free, the shortest candidate, its FLOPs ÷ padding-free or None) when
    the FLAT rule picked a longer --len than the shortest candidate."""

    pack_len: int
    overflow: str  # drop | split
    rule: str
    given: int
    whole: int | None = None
    within: tuple[float, int, float | None] | None = None


def _smallest_within(lens: list[int], points: dict | None):
    """The smallest of `lens` whose packed BFD + varlen FLOPs (÷ padding-free) are within FLAT of
    the best of them, and LenPick.within when that is not simply the smallest; without sweep
    points, the smallest."""
    rel = {}
    if points:
        rel = {L: points[L].relative_flops(PACKED) for L in lens if L in points and points[L].rows}
        rel = {L: v for L, v in rel.items() if v is not None}
    if not rel:
        return lens[0], None
    best = min(rel.values())
    pick = min(L for L, v in rel.items() if v <= best * (1 + FLAT))
    if pick == lens[0]:
        return pick, None
    return pick, (rel[pick], lens[0], rel.get(lens[0]))


def pick_len(
    cuts: dict[int, dict],
    totals: Totals,
    given: list[int],
    points: dict | None = None,
    multiple: int = 1,
) -> LenPick:
    """--len and --overflow by the rules of the module docstring. `cuts` must hold every given
    length and, for one given length, the powers of two above it (candidate_lens); with
    --pad-to-multiple N (`multiple`) only the lengths pack takes with it (multiples of N)."""
    pick = _pick_len(cuts, totals, given, points, multiple)
    if totals.pairs and pick.overflow == "split":  # a pair cannot be split: its answers are cut
        return dataclasses.replace(pick, overflow="truncate")
    return pick


def _pick_len(cuts, totals, given, points, multiple) -> LenPick:
    given = sorted({int(g) for g in given})
    t = totals
    if len(given) == 1:
        L0 = given[0]
        c0 = cuts[L0]
        if c0["examples_over"] == 0:
            return LenPick(L0, "drop", "fits", L0)
        if ok(c0, t):
            return LenPick(L0, "drop", "drop", L0)
        above = [L for L in sorted(cuts) if L > L0 and L & (L - 1) == 0 and L % multiple == 0]
        whole = next((L for L in above if ok(cuts[L], t)), None)
        if outliers(c0, t):
            return LenPick(L0, "split", "outliers", L0, whole)
        if whole is not None and whole <= MAX_LEN_RAISE * L0:
            return LenPick(whole, "drop", "raise", L0, whole)
        return LenPick(L0, "split", "split", L0, whole)
    fine = [L for L in given if ok(cuts[L], t)]
    if fine:
        pick, within = _smallest_within(fine, points)
        return LenPick(pick, "drop", "sweep-ok", given[0], within=within)
    few = [L for L in given if outliers(cuts[L], t)]
    if few:
        pick, within = _smallest_within(few, points)
        return LenPick(pick, "split", "sweep-outliers", given[0], within=within)
    return LenPick(given[-1], "split", "sweep-split", given[0])


def cut_of_pack(pk: dict, t: Totals, over: int) -> dict[str, Any]:
    """cut_at's figures from a simulated pack (predict.at_len's `pack` dict, the manifest's
    counts): exact for every --overflow, pairs' truncate included (the pairs it drops when a
    prompt leaves no trained token, and the loss tokens it cuts). `over`: the examples over --len."""
    return {
        **({"unit": "pair"} if t.pairs else {}),
        "examples_over": over,
        "tokens": pk["tokens_cut"],
        "tokens_share": share(pk["tokens_cut"], t.tokens),
        "examples_dropped": pk["examples_dropped"],
        "examples_empty": pk["examples_dropped_empty"],
        "examples_split": pk["examples_split"],
        "split_parts": pk["split_parts"],
        "examples_truncated": pk["examples_truncated"],
        "loss_tokens": pk["loss_tokens_cut"],
        "loss_tokens_share": share(pk["loss_tokens_cut"], t.loss_tokens),
    }


def cut_at(c: dict, t: Totals, overflow: str) -> dict[str, Any]:
    """What pack cuts at one --len (c: its cuts_by_len entry) with --overflow drop or split, or
    truncate for pairs, from the lengths alone: there Σ (n - L) is only a lower bound (a pair
    truncate drops loses all its tokens) and the loss cut is unknown; cut_of_pack is exact."""
    over = c["examples_over"]
    if overflow == "truncate":
        return {
            "unit": "pair",
            "examples_over": over,
            "tokens": c["tokens_truncated"],
            "tokens_share": share(c["tokens_truncated"], t.tokens),
            "examples_dropped": t.empty,
            "examples_empty": t.empty,
            "examples_split": 0,
            "split_parts": 0,
            "examples_truncated": over,
            "loss_tokens": None,
            "loss_tokens_share": None,
        }
    split = overflow == "split"
    return {
        **({"unit": "pair"} if t.pairs else {}),
        "examples_over": over,
        "tokens": 0 if split else c["tokens_over"],
        "tokens_share": 0.0 if split else share(c["tokens_over"], t.tokens),
        "examples_dropped": (0 if split else over) + t.empty,
        "examples_empty": t.empty,
        "examples_split": over if split else 0,
        "split_parts": c["split_parts"] if split else 0,
        "loss_tokens": 0 if split else c["loss_tokens_over"],
        "loss_tokens_share": 0.0 if split else share(c["loss_tokens_over"], t.loss_tokens),
    }


# --------------------------------------------------------------------------------------------
# the strategy, from a ProfileResult's simulations


def totals_of(r) -> Totals:
    c = r.counts
    return Totals(
        examples=c["examples"],
        tokens=c["tokens"],
        loss_tokens=c["loss_tokens"],
        longest=r.lengths["max"],
        empty=c["examples_empty"],
        pairs=r.source.get("task") == "preference",
    )


def evidence(r, pack_len: int, overflow: str, nothing_over: bool):
    """The case the FLOP figures come from: of every simulated case of `r` (the profile itself,
    its advice point, its sweep points), the first at (pack_len, overflow), else the profile
    itself. Returns (len, overflow, rows or None, per-strategy costs, packed fill, the case's
    pack dict or None: what pack writes there)."""
    own = (r.config.pack_len, r.config.overflow, r.pack["rows"], r.costs, r.pack["fill"], r.pack)
    points = [r.advice_point, *(r.sweep or [])]
    for L, ov, rows, costs, fill, pk in [own] + [
        (p.pack_len, p.overflow, p.rows, p.strategies, p.fill, p.pack)
        for p in points
        if p and p.rows
    ]:
        if L == pack_len and (ov == overflow or nothing_over):
            return L, ov, rows, costs, fill, pk
    return own[0], own[1], None, own[3], own[4], None


@dataclass(frozen=True)
class StrategyPick:
    strategy: str  # PACKED | GROUPED
    nearly: bool  # length-grouped within NEARLY of packed BFD + varlen
    without_varlen: str  # the cheapest strategy that needs no varlen kernel
    flops: dict[str, float]  # per strategy
    relative: dict[str, float]  # per strategy, ÷ padding-free


def pick_strategy(ev: dict[str, dict[str, Any]]) -> StrategyPick:
    """Packed BFD + varlen unless length-grouped batches cost fewer FLOPs (`ev`: per-strategy
    costs of one simulation)."""
    f = {n: float(c["flops"]) for n, c in ev.items()}
    rel = {n: float(c["relative_flops"]) for n, c in ev.items()}
    pv, lg = f[PACKED], f[GROUPED]
    no_varlen = min(
        (n for n in WITHOUT_VARLEN if n in f), key=lambda n: (f[n], WITHOUT_VARLEN.index(n))
    )
    return StrategyPick(
        GROUPED if lg < pv else PACKED, bool(lg <= pv * (1 + NEARLY)), no_varlen, f, rel
    )


def pow2_below(x: int) -> int:
    """The largest power of two <= x (1 for x < 2)."""
    return 1 << (max(1, x).bit_length() - 1)
