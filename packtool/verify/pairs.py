"""The pair rules of a preference pack, on a batch of rows (numpy only).

A preference pack's row holds whole pairs, each two adjacent documents, chosen (side 0) first:

    documents      c0 r0 | c1 r1 | pad         side [0, 1, 0, 1]   source_index [7, 7, 3, 3]
    labels (c0)    -100 -100 -100 a a a        the leading -100 run is the prompt (p tokens);
    labels (r0)    -100 -100 -100 b b          both sides: the same p and the same p prompt ids

    PAIR_SIDES    a row lists its documents as chosen, rejected, chosen, rejected, ...: an even
                  count, side j % 2 at the j-th document (a side missing, sides swapped, a pair
                  split across rows all break it)
    PAIR_SOURCE   both documents of a pair carry the same source_index
    PAIR_PROMPT   both sides start with the same prompt: equal leading -100 runs, equal ids there
    PAIR_TRAINED  each side trains at least one token

Which prompt tokens a side should have is only known from the input: `verify --sources` tokenizes
the records again and compares every token (what proves nothing is trained inside the prompt);
here the rules need only the pack. Empty entries of --fixed-docs rows (source_index -1) are no
documents. `pair_checks` returns, per rule, (count of failing documents, first failures as
(row in batch, position in row or -1, message)).
"""

from __future__ import annotations

import numpy as np

from packtool.data.labels import leading_untrained, prompts_differ

PAIR_SIDES = "pair sides"
PAIR_SOURCE = "pair source"
PAIR_PROMPT = "pair prompt"
PAIR_TRAINED = "pair trained"
PAIR_CHECKS = (PAIR_SIDES, PAIR_SOURCE, PAIR_PROMPT, PAIR_TRAINED)
PASSED = {
    PAIR_SIDES: "every row: whole pairs, chosen then rejected, adjacent",
    PAIR_SOURCE: "both sides of every pair come from one record",
    PAIR_PROMPT: "both sides of every pair start with the same untrained prompt tokens",
    PAIR_TRAINED: "every side trains at least one token",
}
MAX_SHOWN = 5


def pair_checks(
    input_ids: np.ndarray,
    labels: np.ndarray,
    seq_val: np.ndarray,
    seq_off: np.ndarray,
    src_val: np.ndarray,
    side_val: np.ndarray,
    ignore: int = -100,
) -> dict[str, tuple[int, list[tuple[int, int, str]]]]:
    """The pair rules over a batch of B rows of L slots: `input_ids`, `labels` [B, L]; the list
    columns flat with their row offsets (seq_val/src_val/side_val share seq_off, int64[B+1])."""
    B, L = labels.shape
    seq_val = np.asarray(seq_val, dtype=np.int64)
    seq_off = np.asarray(seq_off, dtype=np.int64)
    src_val = np.asarray(src_val, dtype=np.int64)
    side_val = np.asarray(side_val, dtype=np.int64)
    row = np.repeat(np.arange(B), np.diff(seq_off))
    start = np.cumsum(seq_val) - seq_val  # flat start, then made per row
    start -= np.repeat(start[seq_off[:-1]] if B else start[:0], np.diff(seq_off))
    keep = src_val >= 0  # fixed docs' empty entries are no documents
    row, start, length = row[keep], start[keep], seq_val[keep]
    src, side = src_val[keep], side_val[keep]
    counts = np.bincount(row, minlength=B)
    first = np.concatenate(([0], np.cumsum(counts)[:-1]))
    j = np.arange(row.size) - first[row]  # the document's place in its row
    out: dict[str, tuple[int, list[tuple[int, int, str]]]] = {}

    bad = side != j % 2
    odd_rows = np.flatnonzero(counts % 2)
    shown = [
        (int(row[d]), int(start[d]), f"document {int(j[d])} is side {int(side[d])}, expected "
         f"{'chosen (0)' if j[d] % 2 == 0 else 'rejected (1)'}: sides swapped, or a side missing")
        for d in np.flatnonzero(bad)[:MAX_SHOWN]
    ]  # fmt: skip
    shown += [
        (
            int(r),
            -1,
            f"{int(counts[r])} documents: a pair's side is missing or split to another row",
        )
        for r in odd_rows[: MAX_SHOWN - len(shown)]
    ]
    out[PAIR_SIDES] = (int(bad.sum()) + int(odd_rows.size), shown)

    # well-formed pairs: a rejected document at an odd place, a chosen one before it
    rej = np.flatnonzero((j % 2 == 1) & (side == 1))
    rej = rej[side[rej - 1] == 0]
    cho = rej - 1
    bad = src[rej] != src[cho]
    out[PAIR_SOURCE] = (
        int(bad.sum()),
        [
            (int(row[d]), int(start[d]), f"pair at documents {int(j[d]) - 1}, {int(j[d])}: "
             f"source_index {int(src[d - 1])} and {int(src[d])}")
            for d in rej[bad][:MAX_SHOWN]
        ],
    )  # fmt: skip

    flat_ids = input_ids.reshape(-1)
    pos = row * L + start  # flat slot of each document's first token
    # the prompt: each document's leading untrained run (its length: nothing trained)
    prompt = leading_untrained((labels != ignore).reshape(-1), pos, length)
    none = np.flatnonzero(prompt == length)
    out[PAIR_TRAINED] = (
        int(none.size),
        [(int(row[d]), int(start[d]), f"document {int(j[d])} (side {int(side[d])}) trains no token")
         for d in none[:MAX_SHOWN]],
    )  # fmt: skip

    p_c, p_r = prompt[cho], prompt[rej]
    bad = prompts_differ(flat_ids, pos[cho], pos[rej], p_c, p_r)
    shown = []
    for i in np.flatnonzero(bad)[:MAX_SHOWN]:
        c, r = int(pos[cho[i]]), int(pos[rej[i]])
        if p_c[i] != p_r[i]:
            what = f"prompts of {int(p_c[i])} and {int(p_r[i])} untrained tokens"
        else:
            m = int(p_c[i])
            at = int(np.flatnonzero(flat_ids[c : c + m] != flat_ids[r : r + m])[0])
            what = f"prompt token {at} is {int(flat_ids[c + at])} and {int(flat_ids[r + at])}"
        d = rej[i]
        shown.append(
            (int(row[d]), int(start[d]), f"pair at documents {int(j[d]) - 1}, {int(j[d])}: {what}")
        )
    out[PAIR_PROMPT] = (int(bad.sum()), shown)
    return out
