"""What the shards must hold: the records tokenized again, cut into pieces the way the packer cuts
them; and the manifest's counts and lists against those records (the ACCOUNT check).

    TokenizedData (load.py)             record r: input_ids, labels, length n_r, source_index (increasing;
                                        a preference pack's sides: pair_keys, 2 * source_index + side)
        │ packtool.pack.overflow.apply_overflow(lengths, source_index, pack_len L, overflow)
        ▼                               the packer's own function: the same cut, by construction
    pieces  (row = record, start, length), grouped by record; num_pieces per record:
        n_r = 0         none (dropped as empty)                                        0
        n_r <= L        [0, n_r)                                                       1
        n_r > L  drop       none                                                       0
                 truncate   [0, L)                                                     1
                 split      [0, L), [L, 2L), ..., [kL, n_r)                            k + 1
                 error      as drop (pack refused such a record: none is in the shards)

    account_check: manifest.json                 from the sources (TokenizedData, Expected.pieces)
      counts.examples_read, .skipped, .tokenized   num_read, the records skipped, records tokenized
      counts.truncated, .split, .split_parts, .dropped, and the lists {source_index, length}
                                                   what apply_overflow made of them
      tokens.in, .loss_in, .loss_first_token       sums of lengths, of loss tokens, of first labels
                                                   that carried loss (not known under --sample)

The labels here are the record's own; the packer also sets each piece's first label to
schema.IGNORE_INDEX, and compare does the same before comparing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from packtool.data.labels import take_labels
from packtool.errors import PacktoolError
from packtool.schema import IGNORE_INDEX
from packtool.schema.rows import flat_list
from packtool.verify import Check
from packtool.verify.audit import listed, section
from packtool.verify.sampling import mix
from packtool.verify.sources.load import ACCOUNT, TOKENS, Stop


@dataclass
class Expected:
    """The re-tokenized records and, per record, its pieces as the packer cuts them."""

    ids_col: object  # ChunkedArray list<int32>, per tokenized record
    table: object  # the tokenized table: its labels through packtool.data.labels (maybe a mask)
    src: np.ndarray  # source_index per record (sorted)
    lengths: np.ndarray
    piece_row: np.ndarray  # record of each piece
    piece_start: np.ndarray
    piece_len: np.ndarray
    first_piece: np.ndarray  # per record: its pieces are first_piece[r] .. + num_pieces[r] - 1
    num_pieces: np.ndarray  # per record: 0 (dropped), 1, or the parts of a split record
    pack_len: int
    overflow: str
    pieces: object = None  # the packer's Pieces (dropped, truncated, split lists)
    hashes: dict[int, np.ndarray] = field(default_factory=dict)  # record -> its parts' hashes
    pairs: bool = False  # a preference pack: `src` holds pair_keys, a record is one side

    def source_index(self, key):
        """The source_index the rows hold for document key(s) `key`: a pair's 2 * source_index +
        side halved, else the key itself (int or array alike)."""
        return key // 2 if self.pairs else key

    def record_of(self, source_index: np.ndarray) -> np.ndarray:
        """Record (row of the tokenized table) of each source index, -1 if it is not one."""
        if not self.src.size:
            return np.full(source_index.shape, -1)
        pos = np.minimum(np.searchsorted(self.src, source_index), self.src.size - 1)
        return np.where(self.src[pos] == source_index, pos, -1)

    def gather(self, records: np.ndarray, starts: np.ndarray, lengths: np.ndarray):
        """(ids, labels, offsets): the pieces [start, start + length) of `records`, back to back."""
        import pyarrow as pa

        uniq, inv = np.unique(records, return_inverse=True)
        take = pa.array(uniq.astype(np.int64))
        off_i, ids = flat_list(self.ids_col.take(take).combine_chunks())
        _, lab = flat_list(take_labels(self.table, take))
        base = off_i[:-1][inv] + starts
        seg, intra = segments(lengths)
        at = base[seg] + intra
        out_off = np.concatenate(([0], np.cumsum(lengths)))
        return ids[at].astype(np.int32, copy=False), lab[at].astype(np.int32, copy=False), out_off

    def part_hashes(self, record: int) -> np.ndarray:
        """uint64 per part of split record `record` (which part a shard document is)."""
        if record not in self.hashes:
            p0, n = int(self.first_piece[record]), int(self.num_pieces[record])
            sl = slice(p0, p0 + n)
            ids, lab, off = self.gather(
                self.piece_row[sl], self.piece_start[sl], self.piece_len[sl]
            )
            self.hashes[record] = hashes(ids, lab, off, self.pack_len)
        return self.hashes[record]


def segments(lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(segment, index within it) of every element of segments of `lengths` laid back to back.

    lengths [2, 3]  ──▶  segment 0 0 1 1 1,  index 0 1 0 1 2
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    seg = np.repeat(np.arange(lengths.size, dtype=np.int64), lengths)
    intra = np.arange(total, dtype=np.int64) - np.repeat(np.cumsum(lengths) - lengths, lengths)
    return seg, intra


_MULT: dict[int, np.ndarray] = {}


def hashes(ids: np.ndarray, labels: np.ndarray, off: np.ndarray, pack_len: int) -> np.ndarray:
    """A uint64 hash of each segment off[i]:off[i+1] of (ids, trained) (position-weighted sum,
    wrapping): tells the parts of a split record apart. Trained = label not IGNORE_INDEX, after a
    segment's first token (which a pack never trains), so that two parts with the same tokens, one
    in a prompt and one in a reply (a long run of one token), are told apart too. Equal hash ->
    compared anyway, token by token."""
    if pack_len not in _MULT:
        _MULT[pack_len] = mix(np.arange(pack_len, dtype=np.uint64)) | np.uint64(1)
    lens = np.diff(off)
    if not lens.size:
        return np.zeros(0, np.uint64)
    _, intra = segments(lens)
    with np.errstate(over="ignore"):
        trained = (labels != IGNORE_INDEX) & (intra > 0)
        key = (ids.astype(np.uint64) + np.uint64(1)) * np.uint64(2) + trained.astype(np.uint64)
        terms = key * _MULT[pack_len][np.minimum(intra, pack_len - 1)]
    return np.add.reduceat(terms, off[:-1].astype(np.int64))


def pair_keys(source_index: np.ndarray, side: np.ndarray) -> np.ndarray:
    """A preference pack's document key: 2 * source_index + side (0 chosen, 1 rejected), unique
    per document and increasing in the tokenized order, as a record's source_index is for SFT."""
    return 2 * np.asarray(source_index, dtype=np.int64) + np.asarray(side, dtype=np.int64)


def expected_pieces(tokenized, manifest: dict) -> Expected:
    """The pieces of every record at the manifest's pack_len and overflow; Stop(TOKENS) when the
    records are not in source order or the packer's cut refuses them."""
    from packtool.pack.overflow import apply_overflow

    # a datasets.Dataset: its Arrow table
    table = getattr(getattr(tokenized.table, "data", None), "table", tokenized.table)
    L, overflow = int(manifest["pack_len"]), str(manifest.get("overflow", "drop"))
    lengths = np.ascontiguousarray(tokenized.lengths, dtype=np.int64)
    src = np.ascontiguousarray(tokenized.source_index, dtype=np.int64)
    pairs = manifest.get("task") == "preference"
    if pairs:
        if getattr(tokenized, "task", "sft") != "preference":
            raise Stop(TOKENS, "the pack holds preference pairs; its sources read as no pairs now")
        src = pair_keys(src, np.arange(src.size) % 2)
    if src.size > 1 and np.any(np.diff(src) <= 0):
        raise Stop(
            TOKENS,
            "the re-tokenized records are not in source order: cannot match them to the shards",
        )
    try:
        policy = overflow if overflow != "error" else "drop"
        if pairs:
            from packtool.pack.pairs import apply_pair_overflow

            prompts = np.asarray(tokenized.prompt_lengths, dtype=np.int64)
            pieces = apply_pair_overflow(lengths, prompts, src // 2, L, policy)
        else:
            pieces = apply_overflow(lengths, src, L, policy)
    except PacktoolError as e:
        raise Stop(TOKENS, f"--overflow {overflow}: {e}") from None
    num = np.bincount(pieces.row, minlength=lengths.size).astype(np.int64)
    first = np.searchsorted(pieces.row, np.arange(lengths.size))
    ids, p = table.column("input_ids"), pieces
    return Expected(
        ids, table, src, lengths, p.row, p.start, p.length, first, num, L, overflow, p, pairs=pairs
    )


def account_check(manifest: dict, tokenized, exp: Expected, cmp, where) -> Check:
    """Check ACCOUNT; `cmp` is None under --sample (first-token loss is then not known)."""
    pieces = exp.pieces
    counts, tokens = section(manifest, "counts"), section(manifest, "tokens")
    problems = []
    # an example: a record's document(s), or a preference pair (its two sides, keyed
    # 2 * source_index + side in exp: pieces.pair_keys), listed by its record's source_index
    if manifest.get("task") == "preference":
        from packtool.pack.pairs import pair_outcomes

        oc = pair_outcomes(exp.lengths, exp.src // 2, pieces)
        src, lengths, where = oc.source, oc.length, getattr(where, "records", where)
        rec_rows = {"dropped": oc.dropped, "truncated": oc.truncated, "split": oc.split}
        record_of = lambda keys: exp.record_of(2 * keys) // 2  # noqa: E731
    else:
        src, lengths, record_of = exp.src, exp.lengths, exp.record_of
        rec_rows = {"dropped": pieces.dropped, "truncated": pieces.truncated, "split": pieces.split}
    have = {
        "examples_read": int(tokenized.num_read),
        "skipped": len(tokenized.skipped),
        "tokenized": len(src),
        "truncated": int(rec_rows["truncated"].size),
        "split": int(rec_rows["split"].size),
        "split_parts": int(pieces.split_parts.sum()),
        "dropped": int(rec_rows["dropped"].size),
    }
    t_have = {"in": int(exp.lengths.sum())}
    t_have["loss_in"] = int(np.asarray(tokenized.loss_counts, np.int64).sum())
    if cmp is not None:  # every piece compared: first-token loss is known exactly
        t_have["loss_first_token"] = cmp.first_token_loss
    for group, rec, now in (("counts", counts, have), ("tokens", tokens, t_have)):
        for key, v in now.items():
            if key in rec and rec[key] != v:
                problems.append(
                    f"{group}.{key} is {rec[key]} in the manifest, {v} from the sources"
                )
    for key, rows in rec_rows.items():
        if not isinstance(manifest.get(key), list):
            continue
        lst = {int(x.get("source_index", -1)): x for x in listed(manifest, key)}
        now = {int(src[r]): int(lengths[r]) for r in rows.tolist()}
        extra, absent = sorted(set(lst) - set(now)), sorted(set(now) - set(lst))
        where.resolve(extra[:1] + absent[:1])
        if absent:
            i = absent[0]
            problems.append(
                f"{where(i)} (source_index {i}, {now[i]} tokens) is {key} at --len {exp.pack_len} "
                f"(--overflow {exp.overflow}) but not listed under {key} in the manifest"
            )
        if extra:
            i = extra[0]
            r = record_of(np.array([i]))[0]
            has = f"{where(i)} has {int(lengths[r])} tokens when tokenized again"
            has = has if r >= 0 else "is no tokenized record"
            problems.append(f"source_index {i} is listed under {key} in the manifest, but {has}")
        for i in sorted(set(lst) & set(now)):
            if lst[i].get("length") != now[i]:
                problems.append(
                    f"{where(i)} (source_index {i}) is listed under {key} with {lst[i].get('length')} "
                    f"tokens; tokenized again it has {now[i]}"
                )
                break
    sk = manifest.get("skipped")
    if isinstance(sk, list):
        rec = sorted(int(x.get("source_index", -1)) for x in sk if isinstance(x, dict))
        now = sorted(int(s.source_index) for s in tokenized.skipped)
        if rec != now:
            problems.append(
                f"skipped records differ: the manifest lists source indices {rec[:5]}, the sources give "
                f"{now[:5]}"
            )
    msg = "; ".join(problems) or (
        f"{have['tokenized']} records tokenized again: counts, dropped, truncated, split and skipped "
        "agree with the manifest"
    )
    return Check(ACCOUNT, not problems, msg, dict(have))
