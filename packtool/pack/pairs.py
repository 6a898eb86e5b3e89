"""Preference pairs for the planner: --overflow decided per pair, a pair planned as one unit.

Tokenized pairs sit side by side, chosen first: dataset rows 2k (chosen) and 2k+1 (rejected) are
pair k, both from the same record. Each side is prompt (labels -100) + answer.

    lengths       [9, 6,   5, 3,   12, 12]      pack_len 12, prompts [4, 4,  2, 2,  10, 10]
    pairs         k=0 (15) k=1 (8) k=2 (24)
    drop          pieces (2,0,5) (3,0,3)           dropped rows [0, 1, 4, 5]: longer than --len
    truncate      each side of a pair too long is cut to min(n, m), m the largest cut with
                  min(n_c, m) + min(n_r, m) <= pack_len (the longer answer loses tokens first);
                  k=0: m = 6 → (0,0,6) (1,0,6);  k=2: m = 6 <= prompt 10 → dropped: no trained
                  token would be left on a side
    split, error  refused: a pair split across rows cannot be trained; error names the first pair

    plan.plan_pairs(slots, ...) then plans pair k as one unit of slots[2k] + slots[2k+1]

Pure numpy: profile uses the same functions to predict what pack will do.
"""

from __future__ import annotations

import numpy as np

from packtool.errors import PacktoolError, UsageError
from packtool.pack.overflow import Outcomes, Pieces, loss_warning

TOO_LONG = "pair longer than --len"
NO_ROOM = "prompt too long: truncating to --len leaves no trained token on a side"
EMPTY = "empty"


def pair_cut(n_c: np.ndarray, n_r: np.ndarray, pack_len: int) -> np.ndarray:
    """The largest m with min(n_c, m) + min(n_r, m) <= pack_len, per pair (int64): no cut when both
    fit; else the shorter side whole and the longer cut to the rest, when the rest is not shorter;
    else both cut to pack_len // 2."""
    lo, hi = np.minimum(n_c, n_r), np.maximum(n_c, n_r)
    m = np.where(2 * lo <= pack_len, pack_len - lo, pack_len // 2)
    return np.where(lo + hi <= pack_len, hi, m).astype(np.int64)


def apply_pair_overflow(
    lengths: np.ndarray,
    prompt_lengths: np.ndarray,
    source_index: np.ndarray,
    pack_len: int,
    overflow: str,
) -> Pieces:
    """Pieces of pairs under --overflow (drop | truncate; split refused, error raises): a pair is
    packed whole, truncated on both sides by one cut, or dropped with both its rows."""
    n = lengths.shape[0]
    if n % 2:
        raise PacktoolError(f"preference data holds {n} sequences: pairs need an even count")
    if overflow == "split":
        raise UsageError(
            "--overflow split would put a pair's parts in different rows, where no pair loss can see "
            "both; use --overflow truncate (cuts both answers, keeps a trained token on each side) or drop"
        )
    n_c, n_r = lengths[0::2].astype(np.int64), lengths[1::2].astype(np.int64)
    total = n_c + n_r
    over = total > pack_len
    if overflow == "error" and over.any():
        k = int(np.flatnonzero(over)[0])
        raise PacktoolError(
            f"pair {int(source_index[2 * k])} has {int(total[k])} tokens (chosen {int(n_c[k])} + "
            f"rejected {int(n_r[k])}) > --len {pack_len}; use --overflow truncate|drop or raise --len"
        )
    empty = (n_c == 0) | (n_r == 0)
    keep_c, keep_r = n_c.copy(), n_r.copy()
    reason = np.full(n_c.shape[0], "", dtype=object)
    reason[empty] = EMPTY
    cut = over & ~empty
    if overflow == "truncate":
        m = pair_cut(n_c, n_r, pack_len)
        keep_c = np.where(cut, np.minimum(n_c, m), n_c)
        keep_r = np.where(cut, np.minimum(n_r, m), n_r)
        p_c, p_r = prompt_lengths[0::2], prompt_lengths[1::2]
        no_room = cut & ((keep_c <= p_c) | (keep_r <= p_r))
        reason[no_room] = NO_ROOM
    else:
        reason[cut] = TOO_LONG
    dropped_pairs = np.flatnonzero(reason != "")
    kept = np.flatnonzero(reason == "")
    truncated_pairs = kept[(keep_c[kept] < n_c[kept]) | (keep_r[kept] < n_r[kept])]
    rows = np.stack([2 * kept, 2 * kept + 1], axis=1).ravel().astype(np.int64)
    length = np.stack([keep_c[kept], keep_r[kept]], axis=1).ravel().astype(np.int64)
    dropped = np.stack([2 * dropped_pairs, 2 * dropped_pairs + 1], axis=1).ravel().astype(np.int64)
    truncated = np.stack([2 * truncated_pairs, 2 * truncated_pairs + 1], axis=1).ravel()
    truncated = truncated[length[np.searchsorted(rows, truncated)] < lengths[truncated]]
    none = np.zeros(0, dtype=np.int64)
    return Pieces(
        row=rows,
        start=np.zeros(rows.shape[0], dtype=np.int64),
        length=length,
        dropped=dropped,
        dropped_reason=[str(reason[i // 2]) for i in dropped.tolist()],
        truncated=truncated.astype(np.int64),
        split=none,
        split_parts=none,
    )


def nothing_to_pack(
    lengths: np.ndarray,
    prompt_lengths: np.ndarray,
    source_index: np.ndarray,
    pack_len: int,
    overflow: str,
    would: bool = False,
) -> str:
    """pack's (and profile's, `would`) error when --overflow drops every pair: each cause counted,
    and only the fixes that can work: truncate when it would keep a pair, else a longer --len
    (split never does for a pair)."""
    args = (lengths, prompt_lengths, source_index, pack_len)
    reasons = apply_pair_overflow(*args, overflow).dropped_reason[0::2]
    count = {r: reasons.count(r) for r in (TOO_LONG, NO_ROOM, EMPTY)}
    causes = {
        TOO_LONG: f"chosen + rejected longer than --len {pack_len:,}",
        NO_ROOM: f"a prompt too long: cut to --len {pack_len:,}, a side keeps no trained token",
        EMPTY: "a side without tokens",
    }
    said = "; ".join(f"{count[r]:,} with {causes[r]}" for r in causes if count[r])
    if count[EMPTY] == len(reasons):
        fix = "check the data: every pair has an empty side"
    elif overflow == "drop" and apply_pair_overflow(*args, "truncate").row.size:
        fix = "use --overflow truncate (it cuts the answers) or raise --len"
    elif overflow == "drop":
        fix = "raise --len (--overflow truncate keeps no pair either: a prompt leaves no room)"
    else:
        fix = "raise --len: each side must keep a trained token after its prompt"
    verb = "would be" if would else "were"
    return f"nothing to pack: all {len(reasons):,} pairs {verb} dropped ({said}); {fix}"


def pair_outcomes(lengths: np.ndarray, source: np.ndarray, pieces: Pieces) -> Outcomes:
    """One example a pair (rows 2e, 2e + 1): its length both sides', a truncated pair's cut both
    sides' cuts."""
    length = lengths[0::2] + lengths[1::2]
    kept = np.zeros(lengths.shape[0], dtype=np.int64)
    kept[pieces.row] = pieces.length
    truncated = np.unique(pieces.truncated // 2)
    cut = length[truncated] - kept[2 * truncated] - kept[2 * truncated + 1]
    dropped, none = pieces.dropped[0::2] // 2, np.zeros(0, dtype=np.int64)
    return Outcomes(
        length, source[0::2], dropped, pieces.dropped_reason[0::2], truncated, cut, none, none
    )


def pair_manifest(pieces: Pieces, data) -> dict:
    """The manifest's `preference` object: pairs packed, the layout, the sides' codes, and
    `unlike_trl`: the pairs whose ids TRL's DPOTrainer would tokenize otherwise, as the tokenize
    run counted them (data.tokenizer["pairs_unlike_trl"]: not an option verify --sources reuses)."""
    out = {
        "pairs": int(pieces.row.shape[0] // 2),
        "layout": "each pair two adjacent documents in one row, chosen first; both carry the "
        "record's source_index",
        "sides": {"chosen": 0, "rejected": 1},
    }
    unlike = (data.tokenizer or {}).get("pairs_unlike_trl")
    if unlike is not None:
        out["unlike_trl"] = unlike
    return out


def pair_overflow_lost(oc: Outcomes, overflow: str) -> np.ndarray:
    """The pairs --overflow loses tokens of: drop's dropped ones (empty ones lose nothing), or
    truncate's truncated ones and those it drops (NO_ROOM: a prompt leaves no trained token)."""
    reasons = np.array(oc.dropped_reason + [""], dtype=object)[:-1]  # 1-D even when empty
    if overflow == "drop":
        return oc.dropped[reasons != EMPTY]
    return np.union1d(oc.truncated, oc.dropped[reasons == NO_ROOM]).astype(np.int64)


def pair_overflow_loss(oc: Outcomes, pack_len: int, overflow: str) -> str | None:
    """The warning when --overflow loses more than LOSS_SHARE of the pairs or their tokens, with
    the --len that fits 99% of the pairs and the one that fits the longest (as overflow_loss).
    Under truncate the pairs it drops (NO_ROOM) count, with all their tokens: what pack writes as
    counts.dropped and tokens.cut."""
    if overflow not in ("drop", "truncate"):
        return None
    lost = pair_overflow_lost(oc, overflow)
    if overflow == "drop":
        cut = int(oc.length[lost].sum())
        return loss_warning(overflow, int(lost.size), cut, oc.length, pack_len, "pair")
    no_room = np.setdiff1d(lost, oc.truncated)
    cut = int(oc.cut.sum()) + int(oc.length[no_room].sum())
    return loss_warning(
        overflow, int(lost.size), cut, oc.length, pack_len, "pair", dropped=int(no_room.size)
    )
