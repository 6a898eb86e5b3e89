"""Which expected piece each shard document is, batch by batch, the pieces no document matched,
and every document compared token by token with its piece.

shard batch of R rows (~BATCH_TOKENS token slots), row layout of docs/ARCHITECTURE.md, "Schema":
    input_ids, labels (R, L)   seq_lengths [n_0, n_1, ...]   source_index [s_0, s_1, ...]
    document k of a row starts at col = cumsum(seq_lengths)[k-1] (0 for k = 0), holds n_k tokens
row whose seq_lengths and source_index cannot be paired ──▶ stray (the integrity checks say why)
layouts (`schema.Layout`): seq_lengths are slots, so they place the documents; a padded pack's
seq_lengths_unpadded say how many of those slots are the document's own tokens, and only those are
compared (the padding is the integrity scan's); the empty entries of fixed docs (0, -1) are no
documents and are left out

s_k ──Expected.record_of──▶ record r
    r = -1                 no record tokenized again (skipped, or beyond the input)  ──▶ stray
    num_pieces[r] = 0      dropped by --overflow, yet in a row                        ──▶ stray
    num_pieces[r] = 1      its one piece
    num_pieces[r] > 1      split: the unused part with the same hash (Expected.part_hashes)
                           and length; none (a damaged part): deferred, then settle_deferred
                           compares it with a leftover part of the record
──▶ compare_docs: Doc j (row, k, col, length, src) is got_*[got_start[j] :+ length[j]] (flat R*L);
    pieces[j] ──Expected.gather──▶ e_ids/e_lab flat, e_off, first label IGNORE_INDEX; one vector
    compare over min(length, piece length) tokens per document; a difference ──▶ Compare.fail:
        chats.jsonl:12 (source_index 11, part 2 of 3: record tokens 512..1023) -> data/train-00000-of-00004.parquet
        row 3 position 40 (document 1, token 5): input_id 813, expected 812; label 813, expected 812;
        row positions 37..43: input_ids got [...] expected [...], labels got [...] expected [...]

after every shard, missing_pieces: seen[p] == 0 (lost, or merged into another document), seen[p] > 1
(packed twice), over every piece (or the sampled records' pieces only)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from packtool import schema
from packtool.schema.rows import flat_fixed, flat_list
from packtool.verify.scan import MAX_EXAMPLES, Failures
from packtool.verify.sources.load import Provenance
from packtool.verify.sources.pieces import Expected, hashes, pair_keys, segments

BATCH_TOKENS = 1 << 22
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


def compare_docs(cmp: Compare, shard, row0, docs: Doc, pieces, got_ids, got_lab, got_start):
    """Compare shard documents with their pieces, all at once. got_* are flat token buffers;
    document j is got_*[got_start[j]:+docs.length[j]]."""
    exp = cmp.exp
    if not pieces.size:
        return
    elen = exp.piece_len[pieces]
    e_ids, e_lab, e_off = exp.gather(exp.piece_row[pieces], exp.piece_start[pieces], elen)
    cmp.first_token_loss += int(np.count_nonzero(e_lab[e_off[:-1]] != schema.IGNORE_INDEX))
    # as pack.gather.copy_rows stores it: no document's first token is trained
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
        s = int(docs.src[j])  # the document's key (a pair's side: pieces.pair_keys)
        i = int(exp.source_index(s))  # what the row's source_index holds
        head = f"{cmp.where(s)} (source_index {i}{piece_note(exp, p)}) -> {shard} row {row}"
        g0, e0 = int(got_start[j]), int(e_off[j])
        gl, el = int(docs.length[j]), int(elen[j])
        g_ids, g_lab = got_ids[g0 : g0 + gl], got_lab[g0 : g0 + gl]
        x_ids, x_lab = e_ids[e0 : e0 + el], e_lab[e0 : e0 + el]
        at = {"shard": shard, "row": row, "document": k, "position": c + t, "source_index": i}
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


def _without_empty_entries(seq_off, seq, src_off, src, real):
    """The lists less the empty entries of fixed docs (seq_lengths 0 with source_index -1), in the
    rows where seq_lengths and source_index pair up (the others stay as they are: strays)."""
    if not (seq == 0).any():
        return seq_off, seq, src_off, src, real
    nd = np.diff(seq_off)
    at_src = np.repeat(src_off[:-1] - seq_off[:-1], nd) + np.arange(seq.size)  # the paired entry
    drop = np.repeat(nd == np.diff(src_off), nd) & (seq == 0)
    drop[drop] = src[at_src[drop]] == -1
    drop_src = np.zeros(src.size, bool)
    drop_src[at_src[drop]] = True
    # entries dropped before each row: the same in both lists (only paired rows lose any)
    gone = np.concatenate(
        ([0], np.cumsum(np.bincount(np.repeat(np.arange(nd.size), nd)[drop], minlength=nd.size)))
    )
    return seq_off - gone, seq[~drop], src_off - gone, src[~drop_src], real[~drop]


def scan_shard(cmp: Compare, pack: str, shard: str, wanted: np.ndarray | None) -> None:
    """Every document of `shard` (or those whose source_index is in `wanted`) matched to its piece
    and compared; what matches no piece is a stray."""
    import pyarrow.parquet as pq

    exp = cmp.exp
    L = exp.pack_len
    pf = pq.ParquetFile(os.path.join(pack, shard))
    row0 = 0
    cols = ["input_ids", "labels", "seq_lengths", "source_index"]
    padded = schema.UNPADDED_COLUMN in pf.schema_arrow.names
    cols += [schema.UNPADDED_COLUMN] if padded else []
    sided = schema.SIDE_COLUMN in pf.schema_arrow.names  # a preference pack: documents by pair_keys
    cols += [schema.SIDE_COLUMN] if sided else []
    for batch in pf.iter_batches(batch_size=max(1, BATCH_TOKENS // L), columns=cols):
        R = batch.num_rows
        if not R:
            continue
        seq_off, seq = flat_list(batch.column("seq_lengths"))
        src_off, src = flat_list(batch.column("source_index"))
        keyed = False  # src holds pair keys: messages halve them back to the rows' source_index
        if sided:
            side_off, side = flat_list(batch.column(schema.SIDE_COLUMN))
            if np.array_equal(side_off, src_off):  # else the rows are strays: integrity says why
                src, keyed = np.where(src >= 0, pair_keys(src, side), src), True
        seq = seq.astype(np.int64)
        unp_ok = np.ones(R, bool)
        real = seq  # the documents' own tokens per entry
        if padded:
            unp_off, unp = flat_list(batch.column(schema.UNPADDED_COLUMN))
            unp_ok = np.diff(unp_off) == np.diff(seq_off)
            real = seq.copy()
            own = unp.astype(np.int64)[np.repeat(unp_ok, np.diff(unp_off))]
            real[np.repeat(unp_ok, np.diff(seq_off))] = own
        seq_off, seq, src_off, src, real = _without_empty_entries(seq_off, seq, src_off, src, real)
        nd, ns = np.diff(seq_off), np.diff(src_off)
        cs = np.concatenate(([0], np.cumsum(seq)))
        shortest = np.minimum.reduceat(
            np.concatenate((seq, [1])), np.minimum(seq_off[:-1], seq.size)
        )
        ok_row = unp_ok & (nd == ns) & (cs[seq_off[1:]] - cs[seq_off[:-1]] <= L) & (shortest >= 1)
        bad_rows = np.flatnonzero(~ok_row)
        cmp.strays(
            bad_rows.size,
            [
                f"{shard} row {row0 + r}: seq_lengths {seq[seq_off[r] : seq_off[r + 1]].tolist()} with "
                f"source_index {(src[src_off[r] : src_off[r + 1]] // (1 + keyed)).tolist()} cannot be matched (see the integrity "
                "checks): its documents are not compared"
                for r in bad_rows[:MAX_EXAMPLES].tolist()
            ],
        )
        keep = np.repeat(ok_row, nd)
        row = np.repeat(np.arange(R), nd)[keep]
        lens = np.clip(real, 0, seq)[keep]  # the document's own tokens (not its padding)
        col = (cs[:-1] - np.repeat(cs[seq_off[:-1]], nd))[keep]
        k = (np.arange(seq.size) - np.repeat(seq_off[:-1], nd))[keep]
        s = src.astype(np.int64)[np.repeat(ok_row, ns)]
        if wanted is not None:
            sel = np.isin(s, wanted)
            row, lens, col, k, s = row[sel], lens[sel], col[sel], k[sel], s[sel]
        if not s.size:
            row0 += R
            continue
        ids = flat_fixed(batch.column("input_ids"), R, L).reshape(-1)
        lab = flat_fixed(batch.column("labels"), R, L).reshape(-1)
        start = row * L + col
        rec = exp.record_of(s)
        pieces = np.full(s.size, -1, np.int64)
        one = (rec >= 0) & (exp.num_pieces[np.maximum(rec, 0)] == 1)
        pieces[one] = exp.first_piece[rec[one]]
        unknown = np.flatnonzero(rec < 0)
        cmp.strays(
            unknown.size,
            [
                f"{shard} row {row0 + int(row[j])} document {int(k[j])}: source_index "
                f"{int(exp.source_index(s[j]))} is no "
                "record of the sources tokenized again (skipped, or beyond the input)"
                for j in unknown[:MAX_EXAMPLES].tolist()
            ],
        )
        dropped = np.flatnonzero((rec >= 0) & (exp.num_pieces[np.maximum(rec, 0)] == 0))
        cmp.where.resolve(s[dropped[:MAX_EXAMPLES]])
        cmp.strays(
            dropped.size,
            [
                f"{cmp.where(int(s[j]))} (source_index {int(exp.source_index(s[j]))}, "
                f"{int(exp.lengths[rec[j]])} tokens) is "
                f"dropped by --overflow {exp.overflow} at --len {L}, but {shard} row {row0 + int(row[j])} "
                f"document {int(k[j])} holds it"
                for j in dropped[:MAX_EXAMPLES].tolist()
            ],
        )
        claimed: set[int] = set()  # parts matched in this batch (seen counts them after it)
        for j in np.flatnonzero((rec >= 0) & (exp.num_pieces[np.maximum(rec, 0)] > 1)).tolist():
            doc = (shard, row0 + int(row[j]), int(k[j]), int(col[j]), int(s[j]))
            a, b = int(start[j]), int(start[j]) + int(lens[j])
            pieces[j] = _match_part(cmp, claimed, int(rec[j]), ids[a:b], lab[a:b], doc)
        use = np.flatnonzero(pieces >= 0)
        np.add.at(cmp.seen, pieces[use], 1)
        docs = Doc(row[use], k[use], col[use], lens[use], s[use])
        compare_docs(cmp, shard, row0, docs, pieces[use], ids, lab, start[use])
        row0 += R


def _match_part(cmp: Compare, claimed: set[int], record: int, ids, lab, doc: tuple) -> int:
    """The part of split record `record` that this shard document (its `ids` and `lab`; `doc`:
    shard, row, k, col, src) is: the unused part with the same hash, else -1 (deferred: matched to a
    leftover part after the scan). Parts with equal tokens and labels (a long run of one token) are
    interchangeable: each is taken once."""
    exp = cmp.exp
    h = hashes(ids, lab, np.array([0, ids.size]), exp.pack_len)[0]
    p0 = int(exp.first_piece[record])
    for i in np.flatnonzero(exp.part_hashes(record) == h).tolist():
        if cmp.seen[p0 + i] == 0 and p0 + i not in claimed and exp.piece_len[p0 + i] == ids.size:
            claimed.add(p0 + i)
            return p0 + i
    cmp.deferred.append((record, ids.copy(), lab.copy(), *doc))
    return -1


def settle_deferred(cmp: Compare) -> None:
    """Split parts that matched no part by hash (damaged ones): compared with a leftover part of
    their record, one of the same length first."""
    exp = cmp.exp
    for record, g_ids, g_lab, shard, row, k, col, src in cmp.deferred:
        p0, n = int(exp.first_piece[record]), int(exp.num_pieces[record])
        free = [p for p in range(p0, p0 + n) if cmp.seen[p] == 0]
        same = [p for p in free if exp.piece_len[p] == g_ids.size]
        if not free:
            cmp.strays(
                1,
                [
                    f"{cmp.where(src)} (source_index {exp.source_index(src)}) is split into {n} "
                    f"parts, but {shard} "
                    f"row {row} document {k} is one more"
                ],
            )
            continue
        p = (same or free)[0]
        cmp.seen[p] += 1
        docs = Doc(*(np.array([x], np.int64) for x in (0, k, col, g_ids.size, src)))
        compare_docs(cmp, shard, row, docs, np.array([p]), g_ids, g_lab, np.zeros(1, np.int64))


def missing_pieces(cmp: Compare, wanted_records: np.ndarray | None) -> None:
    """Pieces no shard document matched (merged away, lost), and pieces matched twice."""
    exp = cmp.exp
    if wanted_records is None:
        pieces = np.arange(exp.piece_row.size)
    else:  # the sampled records' pieces, record by record
        seg, intra = segments(exp.num_pieces[wanted_records])
        pieces = exp.first_piece[wanted_records][seg] + intra
    lost = pieces[cmp.seen[pieces] == 0]
    twice = pieces[cmp.seen[pieces] > 1]
    cmp.where.resolve(
        exp.src[exp.piece_row[np.concatenate([lost[:MAX_EXAMPLES], twice[:MAX_EXAMPLES]])]]
    )

    def piece(p: int) -> str:
        s = int(exp.src[exp.piece_row[p]])
        return f"{cmp.where(s)} (source_index {exp.source_index(s)}{piece_note(exp, p)}"

    cmp.strays(
        lost.size,
        [
            f"{piece(p)}, {int(exp.piece_len[p])} tokens) is in no row and not dropped: lost, or "
            "merged into another document"
            for p in lost[:MAX_EXAMPLES].tolist()
        ],
    )
    cmp.strays(
        twice.size,
        [f"{piece(p)}) is packed {int(cmp.seen[p])} times" for p in twice[:MAX_EXAMPLES].tolist()],
    )
