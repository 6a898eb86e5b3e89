"""The rows the isolation check runs on (`Sample`): chosen during the integrity scan, or built when none fits.

Choosing: every valid row gets a seeded pseudo-random key from its global index (its place over all
shards, not within a batch), and a `Sampler` keeps the `n` rows with the smallest keys seen so far,
so the choice does not depend on how the shards were cut into batches:

    global row     0    1    2    3    4    5   ...
    key            splitmix64(row ^ splitmix64(seed))
    candidates     rows with >= 2 documents (else, in a second sampler, rows with one)
    kept           the n smallest keys, as Samples (copies: shard, row, the token columns, seq_lengths)
                   (seq_lengths: the documents' slots, a padded document's padding included, the
                   empty entries of fixed docs left out)

Building (`synthesize`): when no row holds two documents, rows of two are made from the pack's own
documents (the heads of two one-document rows, or the two halves of the only document), laid out
by the contract (docs/ARCHITECTURE.md, "Schema"); the report says the rows are synthetic.

    [A A A A | B B B | pad pad]      labels IGNORE_INDEX at 0 and at B's first token, and on the pad tail

Cropping (`crop`, on CPU): a row is run as its first P slots, the pack's own bytes. Isolation is
about a document seeing its neighbour, so what a row must keep is two whole adjacent documents;
P is the same for the rows of one batch (they stack), at least the budget and the end of each
row's second document:

    row        [A A A A | B B B | C C C C C C | D D D D | pad]
    P = 9      [A A A A | B B B | C C]          C cut: a document's prefix sees only itself
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from packtool import schema


@dataclass
class Sample:
    """One packed row to test: its documents' lengths and the token columns (int32 [L])."""

    shard: str
    row: int
    input_ids: np.ndarray
    labels: np.ndarray
    position_ids: np.ndarray
    seq_lengths: np.ndarray
    synthetic: bool = False

    @property
    def bounds(self) -> list[tuple[int, int]]:
        cs = np.concatenate(([0], np.cumsum(self.seq_lengths)))
        return [(int(a), int(b)) for a, b in zip(cs[:-1], cs[1:], strict=True)]


def mix(x: np.ndarray) -> np.ndarray:
    """splitmix64: a seeded pseudo-random key per global row, independent of batch boundaries."""
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


class Sampler:
    """Keeps the `n` candidate rows with the smallest seeded keys seen so far (copies, tiny)."""

    def __init__(self, n: int, seed: int):
        self.n = n
        self.salt = mix(np.array([seed], dtype=np.uint64))[0]
        self.kept: list[tuple[int, Sample]] = []

    def offer(self, cand: np.ndarray, gidx: np.ndarray, cols: dict, shard: str, row0: int) -> None:
        """Rows of a scanned batch: `cand` (R,) which may be kept, `gidx` (R,) uint64 their global
        indices, `cols` the batch's columns (see scan.py), the batch's first row `row0` in `shard`."""
        if self.n <= 0 or not cand.any():
            return
        local = np.flatnonzero(cand)
        with np.errstate(over="ignore"):
            keys = mix(gidx[local] ^ self.salt)
        order = np.argsort(keys)[: self.n]
        for i in order:
            r = int(local[i])
            key = int(keys[i])
            if len(self.kept) >= self.n and key >= self.kept[-1][0]:
                break
            # the documents' slots: seq_lengths less the empty entries of fixed docs (a padded
            # document runs alone as its slots, its padding included)
            lens = np.asarray(
                cols["seq_val"][cols["seq_off"][r] : cols["seq_off"][r + 1]], np.int64
            )
            ids, lab, pos = (cols[c][r].copy() for c in ("input_ids", "labels", "position_ids"))
            self.kept.append((key, Sample(shard, row0 + r, ids, lab, pos, lens[lens > 0])))
            self.kept.sort(key=lambda kv: kv[0])
            del self.kept[self.n :]

    def rows(self) -> list[Sample]:
        return sorted((s for _, s in self.kept), key=lambda s: (s.shard, s.row))


def synthesize(singles: list[Sample], pack_len: int, rows: int):
    """No row holds two documents: up to `rows` isolation Samples of two documents built from the
    one-document rows `singles` (Sampler.rows()). Token slots keep the row's layout rules."""
    docs = [(s.input_ids[: s.bounds[0][1]], s.labels[: s.bounds[0][1]], s) for s in singles]
    pairs = list(zip(docs[0::2], docs[1::2], strict=False))
    if len(docs) == 1 and len(docs[0][0]) >= 2:
        ids, lab, d = docs[0]
        h = len(ids) // 2
        pairs = [((ids[:h], lab[:h], d), (ids[h:], lab[h:], d))]
    out = []
    for (ia, la_, da), (ib, lb_, db) in pairs[:rows]:
        na = min(len(ia), pack_len // 2)
        nb = min(len(ib), pack_len - na)
        docs = [(ia[:na], la_[:na]), (ib[:nb], lb_[:nb])]
        shard = f"synthetic from {da.shard} row {da.row}"
        out.append(packed(shard, db.row, docs, pack_len, synthetic=True))
    return out


def packed(shard: str, row: int, docs, length: int, synthetic: bool = False) -> Sample:
    """A row laid out by the contract: the documents (ids, labels) back to back, each first label
    IGNORE_INDEX, then a pad tail up to `length` (id 0, label IGNORE_INDEX, positions restarting)."""
    lens = [len(ids) for ids, _ in docs]
    tail = length - sum(lens)
    ids = np.concatenate([*(d[0] for d in docs), np.zeros(tail)]).astype(np.int32)
    lab = np.concatenate([*(d[1] for d in docs), np.full(tail, schema.IGNORE_INDEX)])
    lab[np.cumsum([0, *lens[:-1]])] = schema.IGNORE_INDEX
    pos = schema.position_ids(lens, length).astype(np.int32)
    return Sample(shard, row, ids, lab.astype(np.int32), pos, np.array(lens), synthetic)


def crop(samples: list[Sample], tokens: int, batch_rows: int) -> list[Sample]:
    """Each row cut to its first P slots, the same P for the `batch_rows` rows of a batch: at
    least `tokens` (or the whole row) and the end of every row's second document, so every row
    keeps its first two documents whole; a document cut at P stays as its prefix."""
    out = []
    for b0 in range(0, len(samples), batch_rows):
        chunk = samples[b0 : b0 + batch_rows]
        p = max(min(len(s.input_ids), max(tokens, s.bounds[:2][-1][1])) for s in chunk)
        for s in chunk:
            ends = np.cumsum(s.seq_lengths)
            starts = ends - s.seq_lengths
            keep = starts < p
            cut = {c: getattr(s, c)[:p] for c in ("input_ids", "labels", "position_ids")}
            lens = np.minimum(ends[keep], p) - starts[keep]
            out.append(dataclasses.replace(s, **cut, seq_lengths=lens))
    return out
