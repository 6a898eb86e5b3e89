"""--overflow: examples → pieces, the documents a row can hold (1..pack_len tokens each).

    example lengths   [3, 9, 0, 5]          pack_len 4
    drop      pieces  (0,0,3)                dropped [1, 3 (longer than --len), 2 (empty)]
    truncate  pieces  (0,0,3) (1,0,4) (3,0,4)  truncated [1, 3]: tokens past pack_len are cut
    split     pieces  (0,0,3) (1,0,4) (1,4,4) (1,8,1) (3,0,4) (3,4,1)   split [1, 3], parts [3, 2]
    error     PacktoolError naming the first example longer than --len
                      piece = (dataset row, first token, length); an empty example is dropped
                      under every mode (2 above)

Pure numpy: profile uses the same function to predict what pack will do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from packtool.errors import PacktoolError


@dataclass(frozen=True)
class Pieces:
    """Documents as packed.  Piece p = tokens [start[p], start[p] + length[p]) of dataset row row[p]."""

    row: np.ndarray  # int64
    start: np.ndarray  # int64
    length: np.ndarray  # int64
    dropped: np.ndarray  # dataset rows dropped (int64)
    dropped_reason: list[str]
    truncated: np.ndarray  # dataset rows truncated
    split: np.ndarray  # dataset rows split
    split_parts: np.ndarray  # parts per split row


def apply_overflow(
    lengths: np.ndarray, source_index: np.ndarray, pack_len: int, overflow: str
) -> Pieces:
    """Examples as pieces of 1..pack_len tokens under --overflow; empty ones always dropped."""
    n = lengths.shape[0]
    rows = np.arange(n, dtype=np.int64)
    over = lengths > pack_len
    empty = lengths == 0
    if overflow == "error" and over.any():
        bad = np.flatnonzero(over)
        i = int(bad[0])
        more = f" ({bad.size} examples are longer than --len; the longest has {int(lengths[bad].max())} tokens)"
        raise PacktoolError(
            f"example {int(source_index[i])} has {int(lengths[i])} tokens > --len {pack_len}; "
            f"use --overflow truncate|split or raise --len{more if bad.size > 1 else ''}"
        )
    truncated = split = parts_of_split = np.zeros(0, dtype=np.int64)
    drop_mask = empty | over if overflow == "drop" else empty
    keep = ~drop_mask
    if overflow == "split":
        parts = np.where(keep, -(-lengths // pack_len), 0)
        split = np.flatnonzero(over)
        parts_of_split = parts[split]
        row = np.repeat(rows, parts)
        first = np.cumsum(parts) - parts  # index of each row's first part
        part_no = np.arange(row.shape[0], dtype=np.int64) - np.repeat(first, parts)
        start = part_no * pack_len
        length = np.minimum(pack_len, lengths[row] - start)
    else:
        row = rows[keep]
        start = np.zeros(row.shape[0], dtype=np.int64)
        length = np.minimum(lengths[row], pack_len)
        if overflow == "truncate":
            truncated = np.flatnonzero(over)
    dropped = np.flatnonzero(drop_mask)
    reasons = [
        "empty" if lengths[i] == 0 else f"longer than --len {pack_len}" for i in dropped.tolist()
    ]
    return Pieces(
        row=row,
        start=start,
        length=length.astype(np.int64),
        dropped=dropped,
        dropped_reason=reasons,
        truncated=truncated,
        split=split,
        split_parts=parts_of_split,
    )


LOSS_SHARE = 0.01  # above this share of the examples or tokens lost to --overflow, say so loudly


def overflow_loss(lengths: np.ndarray, pieces: Pieces, pack_len: int, overflow: str) -> str | None:
    """The warning when --overflow drop or truncate loses more than LOSS_SHARE of the examples or
    of the tokens (empty examples lose nothing and are not counted), with the fix; None when less
    is lost. profile predicts with the same function, so both say the same.

        "--overflow drop drops 95 of 150 examples (63.3%) and 34,200 of 38,000 tokens (90.0%):
         longer than --len 256; use --overflow split|truncate to keep them, or --len 512 (fits 99%
         of the examples) / --len 1024 (fits the longest, 812 tokens)"
    """
    if overflow == "drop":
        lost = pieces.dropped[lengths[pieces.dropped] > 0]
        cut, keep = int(lengths[lost].sum()), "--overflow split|truncate to keep them"
    elif overflow == "truncate":
        lost = pieces.truncated
        cut, keep = int((lengths[lost] - pack_len).sum()), "--overflow split to keep every token"
    else:
        return None
    return loss_warning(overflow, int(lost.size), cut, lengths, pack_len, "example", keep)


def loss_warning(
    overflow: str,
    k: int,
    cut: int,
    lengths: np.ndarray,
    pack_len: int,
    unit: str,
    keep: str = "",
    dropped: int = 0,
) -> str | None:
    """overflow_loss's (unit "example") and pack.pairs.pair_overflow_loss's (unit "pair") warning:
    `k` of the `lengths` lost, `cut` tokens; None when both shares are at most LOSS_SHARE.
    `dropped`: of the k, the pairs truncate drops (their prompts leave no trained token)."""
    n, total = int(lengths.shape[0]), int(lengths.sum())
    if not n or not k or (k / n <= LOSS_SHARE and cut / max(total, 1) <= LOSS_SHARE):
        return None
    fits = " / ".join(fitting_lens(lengths, pack_len, unit))
    what = f"{'drops' if overflow == 'drop' else 'truncates'} {k:,}"
    if dropped:  # pairs under truncate: "truncates 5 and drops 3 of 10 pairs"
        what = f"truncates {k - dropped:,} and drops {dropped:,}" if k > dropped else f"drops {k:,}"
    tokens = "tokens cut" if overflow == "truncate" and unit == "example" else "tokens"
    longer = "chosen + rejected longer" if unit == "pair" else "longer"
    no_room = f", the {dropped:,} dropped as a prompt leaves no trained token" if dropped else ""
    return (
        f"--overflow {overflow} {what} of {n:,} {unit}s "
        f"({100 * k / n:.1f}%) and {cut:,} of {total:,} {tokens} ({100 * cut / max(total, 1):.1f}%): "
        f"{longer} than --len {pack_len}{no_room}; use {f'{keep}, or {fits}' if keep else fits}"
    )


def fitting_lens(lengths: np.ndarray, pack_len: int, unit: str = "example") -> list[str]:
    """The --len that fits 99% of the `unit`s (when above pack_len and short of the next) and the
    one that fits the longest: the fixes overflow's warnings name."""
    fits = []
    p99 = int(np.ceil(np.percentile(lengths, 99)))  # linear, as stats.lengths.describe's p99
    longest = int(lengths.max())
    if p99 > pack_len and _round_len(p99) < _round_len(longest):
        fits.append(f"--len {_round_len(p99)} (fits 99% of the {unit}s)")
    the = "the longest" if unit == "example" else f"the longest {unit}"
    fits.append(f"--len {_round_len(longest)} (fits {the}, {longest:,} tokens)")
    return fits


def _round_len(n: int) -> int:
    """A --len that holds n tokens: the next power of two up to 8192, then the next multiple of 4096."""
    if n <= 8192:
        return 1 << max(int(n - 1).bit_length(), 0)
    return -(-n // 4096) * 4096


@dataclass(frozen=True)
class Outcomes:
    """What became of each example, as the manifest lists it: example e is dataset row e (SFT), or
    pair e, rows 2e and 2e + 1 (preference: pack.pairs.pair_outcomes)."""

    length: np.ndarray  # int64[n]: tokens of each example (a pair: both sides)
    source: np.ndarray  # int64[n]: its source_index
    dropped: np.ndarray  # examples dropped, with dropped_reason
    dropped_reason: list[str]
    truncated: np.ndarray  # examples truncated, each losing cut[i] tokens
    cut: np.ndarray
    split: np.ndarray
    split_parts: np.ndarray


def outcomes(lengths: np.ndarray, source: np.ndarray, pieces: Pieces, pack_len: int) -> Outcomes:
    """One example a dataset row: a truncated one keeps pack_len tokens."""
    p = pieces
    cut = lengths[p.truncated] - pack_len
    return Outcomes(
        lengths, source, p.dropped, p.dropped_reason, p.truncated, cut, p.split, p.split_parts
    )
