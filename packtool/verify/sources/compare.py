"""Shard documents against their expected pieces, all at once, and the message naming a difference.

    shard side (match.py)                 Doc j: row, k (document in row), col (first slot), length, src
        got_ids/got_lab flat (R*L,)       document j is got_*[got_start[j] : got_start[j] + length[j]]
    expected side (pieces.py)             pieces[j]: Expected.gather ──▶ e_ids/e_lab flat, e_off
        e_lab[e_off[j]] = schema.IGNORE_INDEX       as kernels.copy_rows stores it: no document's first
                                                    token is trained (docs/ARCHITECTURE.md, "Semantics")
    one vector compare over min(length, piece length) tokens per document
        first differing token t per document, or t = min(...) when only the lengths differ

    a difference ──▶ Compare.fail, one line naming everything a person needs:
        chats.jsonl:12 (source_index 11, part 2 of 3: record tokens 512..1023) -> data/train-00000-of-00004.parquet
        row 3 position 40 (document 1, token 5): input_id 813, expected 812; label 813, expected 812;
        row positions 37..43: input_ids got [...] expected [...], labels got [...] expected [...]
    or, lengths: "... row 3 document 1: document 1 holds 90 tokens, the record gives 40 when tokenized
        again (documents merged or tokens added)"

`Compare` also gathers what match finds (strays: documents of no record, dropped, repeated,
lost); failures and strays are each a scan.Failures: the first few kept as evidence, the rest counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from packtool import schema
from packtool.verify.scan import MAX_EXAMPLES, Failures
from packtool.verify.sources.load import Provenance
from packtool.verify.sources.pieces import Expected, segments

WINDOW = 3  # tokens shown on each side of a difference


@dataclass
class Doc:
    """Documents of one batch of shard rows, flat: shard row, index in row, first column, length."""

    row: np.ndarray
    k: np.ndarray
    col: np.ndarray
    length: np.ndarray
    src: np.ndarray


@dataclass
class Compare:
    exp: Expected
    where: Provenance
    docs_compared: int = 0
    tokens_compared: int = 0
    first_token_loss: int = 0  # pieces whose first label carried loss before the packer masked it
    failed: Failures = field(default_factory=Failures)  # documents that differ from their piece
    stray: Failures = field(default_factory=Failures)  # of no record, dropped, repeated, lost
    seen: np.ndarray | None = None  # per piece: how many shard documents matched it
    deferred: list[tuple] = field(default_factory=list)  # split parts without a hash match

    def fail(self, message: str, **ev) -> None:
        self.failed.add(1, [{"message": message, **ev}])

    def strays(self, n: int, messages: list[str]) -> None:
        """`n` strays: the messages of the first few (at most MAX_EXAMPLES), the rest counted."""
        self.stray.add(n, [{"message": m} for m in messages])


def piece_note(exp: Expected, p: int) -> str:
    """What piece `p` is of its record, for messages: ', part 2 of 3: record tokens 512..1023',
    ', truncated to 512 of 700 tokens', or '' (the whole record)."""
    r = int(exp.piece_row[p])
    n, parts = int(exp.lengths[r]), int(exp.num_pieces[r])
    if parts > 1:
        s = int(exp.piece_start[p])
        return f", part {p - int(exp.first_piece[r]) + 1} of {parts}: record tokens {s}..{s + int(exp.piece_len[p]) - 1}"
    if n > exp.pack_len:
        return f", truncated to {exp.pack_len} of {n} tokens"
    return ""


def _window(a: np.ndarray, t: int, stop: int) -> list[int]:
    return a[max(0, t - WINDOW) : stop].tolist()


def compare_docs(
    cmp: Compare,
    shard: str,
    row0: int,
    docs: Doc,
    pieces: np.ndarray,
    got_ids: np.ndarray,
    got_lab: np.ndarray,
    got_start: np.ndarray,
) -> None:
    """Compare shard documents with their pieces, all at once. got_* are flat token buffers;
    document j is got_*[got_start[j]:+docs.length[j]]."""
    exp = cmp.exp
    if not pieces.size:
        return
    elen = exp.piece_len[pieces]
    e_ids, e_lab, e_off = exp.gather(exp.piece_row[pieces], exp.piece_start[pieces], elen)
    cmp.first_token_loss += int(np.count_nonzero(e_lab[e_off[:-1]] != schema.IGNORE_INDEX))
    # as kernels.copy_rows stores it: no document's first token is trained
    e_lab[e_off[:-1]] = schema.IGNORE_INDEX
    m = np.minimum(docs.length, elen)
    seg, intra = segments(m)
    gi = got_start[seg] + intra
    ei = e_off[:-1][seg] + intra
    diff = (got_ids[gi] != e_ids[ei]) | (got_lab[gi] != e_lab[ei])
    cmp.docs_compared += int(pieces.size)
    cmp.tokens_compared += int(m.sum())
    bad_at = np.full(pieces.size, -1, np.int64)
    hits = np.flatnonzero(diff)
    if hits.size:
        d, first = np.unique(seg[hits], return_index=True)
        bad_at[d] = intra[hits[first]]
    longer = (bad_at < 0) & (docs.length != elen)
    bad_at[longer] = m[longer]
    bad = np.flatnonzero(bad_at >= 0)
    if not bad.size:
        return
    cmp.where.resolve(docs.src[bad[:MAX_EXAMPLES]])
    for j in bad.tolist():
        if len(cmp.failed.examples) >= MAX_EXAMPLES:
            cmp.failed.count += 1
            continue
        p, t = int(pieces[j]), int(bad_at[j])
        row, k, c = row0 + int(docs.row[j]), int(docs.k[j]), int(docs.col[j])
        s = int(docs.src[j])
        head = f"{cmp.where(s)} (source_index {s}{piece_note(exp, p)}) -> {shard} row {row}"
        g0, e0 = int(got_start[j]), int(e_off[j])
        gl, el = int(docs.length[j]), int(elen[j])
        g_ids, g_lab = got_ids[g0 : g0 + gl], got_lab[g0 : g0 + gl]
        x_ids, x_lab = e_ids[e0 : e0 + el], e_lab[e0 : e0 + el]
        at = {"shard": shard, "row": row, "document": k, "position": c + t, "source_index": s}
        if t >= min(gl, el):
            what = (
                f"document {k} holds {gl} tokens, the record gives {el} when tokenized again "
                f"({'documents merged or tokens added' if gl > el else 'tokens lost'})"
            )
            cmp.fail(f"{head} document {k}: {what}", **at, got_length=gl, expected_length=el)
            continue
        parts = []
        if g_ids[t] != x_ids[t]:
            parts.append(f"input_id {int(g_ids[t])}, expected {int(x_ids[t])}")
        if g_lab[t] != x_lab[t]:
            why = (
                " (a prompt token trained)"
                if x_lab[t] == schema.IGNORE_INDEX
                else " (a trained token masked)"
                if g_lab[t] == schema.IGNORE_INDEX
                else ""
            )
            parts.append(f"label {int(g_lab[t])}, expected {int(x_lab[t])}{why}")
        a, b = max(0, t - WINDOW), min(gl, el, t + WINDOW + 1)
        msg = (
            f"{head} position {c + t} (document {k}, token {t}): {'; '.join(parts)}; "
            f"row positions {c + a}..{c + b - 1}: input_ids got {_window(g_ids, t, b)} expected "
            f"{_window(x_ids, t, b)}, labels got {_window(g_lab, t, b)} expected {_window(x_lab, t, b)}"
        )
        cmp.fail(
            msg,
            **at,
            got={"input_id": int(g_ids[t]), "label": int(g_lab[t])},
            expected={"input_id": int(x_ids[t]), "label": int(x_lab[t])},
        )
