"""The row check: every slot of a batch of rows against what its `seq_lengths` say, with numpy only
(verify's integrity layer and export both read a pack's rows through it).

A batch of R rows is one flat (R, L) int32 view per token column (the fixed-size-list buffers, zero
copy when possible), the list columns as (offsets from 0, values), the scalars as (R,) arrays:

    cols["input_ids"] ... cols["document_id"]   (R, L) int32
    cols["seq_off"], cols["seq_val"]             row r's documents: seq_val[seq_off[r]:seq_off[r + 1]]
    cols["src_off"], cols["src_val"]             row r's source indices, alike
    cols["num_tokens"], cols["num_loss_tokens"]  (R,)

From `seq_lengths` alone the expected columns are rebuilt with a handful of whole-array passes (the
segment rule of docs/ARCHITECTURE.md, "Schema": `shard.segment_starts`) and compared:

    seq_lengths [4, 3], L = 9     marks at row, document and pad-tail starts, running max
    segment start          0 0 0 0 4 4 4  7  7
    expected position_ids  0 1 2 3 0 1 2  0  1      slot - segment start (the pad tail is its own segment)
    expected document_id   0 0 0 0 1 1 1 -1 -1      cumsum of document-start marks; PAD_DOCUMENT_ID on the tail
    label must be -100     x . . . x . . x  x       IGNORE_INDEX: each document's first token, padding
    label == input_id      . o o o . o o .  .       wherever the label is not IGNORE_INDEX
    input_id               0 <= id < tokenizer.vocab_size in every slot, pad tail included (only
                           id >= 0 when the manifest records no vocab_size)

Layouts (shard.Layout): with --pad-to-multiple N the documents' slots are `seq_lengths` and their
real tokens `seq_lengths_unpadded` (cols["unp_off"], cols["unp_val"]); the slots past a document's
real tokens are its padding (pad id, label -100, same document_id, positions continuing), and
seq_lengths[i] must be ceil(unpadded[i]/N)*N. With fixed docs (K) every row lists exactly K entries,
empty ones (0, source_index -1) only at the end:

    seq_lengths [4, 4, 0], unpadded [3, 4, 0], N = 4, K = 3, L = 12
    document padding       . . . x . . . . . . . .      pad id, label -100 (check "document padding")
    num_tokens             7 (real tokens)

No Python loop runs per row or per token. A failing row is reported once per check, at its first
bad slot; `describe` turns that slot into the one line a person reads.
"""

from __future__ import annotations

import numpy as np

from packtool.schema.shard import (
    COLUMNS,
    IGNORE_INDEX,
    PAD_DOCUMENT_ID,
    TOKEN_COLUMNS,
    UNPADDED_COLUMN,
    Layout,
    segment_starts,
)

# the row checks' names (verify's report and `--json` readers match them; verify/scan.py ROW_CHECKS)
SEQ = "seq_lengths"
DOC = "document_id"
POS = "position_ids"
LAB_MASK = f"labels {IGNORE_INDEX} (doc starts, pad)"
LAB_EQ = "labels == input_ids"
PAD = "pad tokens"
IDS = "token ids"
NTOK = "num_tokens"
NLOSS = "num_loss_tokens"
SRC = "source_index"
UNPAD = "seq_lengths_unpadded"
DOC_PAD = "document padding"
FIXED = "fixed docs"


# --------------------------------------------------------------------------------------------
# one decoded batch -> the arrays the scan reads


def flat_fixed(arr, rows: int, pack_len: int) -> np.ndarray:
    """(rows, pack_len) int32 view of a fixed_size_list<int32> chunk (zero copy when possible)."""
    flat = arr.flatten().to_numpy(zero_copy_only=False)
    return flat.astype(np.int32, copy=False).reshape(rows, pack_len)


def flat_list(arr) -> tuple[np.ndarray, np.ndarray]:
    """(offsets from 0, values) of a list<int> chunk, honouring slices."""
    off = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    off = off - off[0]
    return off, arr.flatten().to_numpy(zero_copy_only=False)


def batch_columns(batch, pack_len: int, row0: int) -> dict[str, np.ndarray]:
    """The scan's `cols` of a decoded Arrow record batch (ValueError on nulls: a corrupt shard)."""
    R = batch.num_rows
    for c in COLUMNS:
        if batch.column(c).null_count:
            raise ValueError(f"column {c} has nulls near row {row0}")
    cols = {c: flat_fixed(batch.column(c), R, pack_len) for c in TOKEN_COLUMNS}
    cols["seq_off"], cols["seq_val"] = flat_list(batch.column("seq_lengths"))
    cols["src_off"], cols["src_val"] = flat_list(batch.column("source_index"))
    if UNPADDED_COLUMN in batch.schema.names:
        cols["unp_off"], cols["unp_val"] = flat_list(batch.column(UNPADDED_COLUMN))
    cols["num_tokens"] = batch.column("num_tokens").to_numpy().astype(np.int64)
    cols["num_loss_tokens"] = batch.column("num_loss_tokens").to_numpy().astype(np.int64)
    return cols


# --------------------------------------------------------------------------------------------
# the vectorized row scan


def _row_fail(r: np.ndarray, got, expected, doc=None, kind=None) -> dict:
    """A failure entry for whole rows `r` (no position)."""
    out = {
        "rows": r,
        "pos": np.full(r.size, -1),
        "got": np.asarray(got),
        "expected": np.asarray(expected),
        "doc": np.full(r.size, -1) if doc is None else np.asarray(doc),
    }
    if kind is not None:
        out["kind"] = np.asarray(kind)
    return out


def _first_per_row(bad_entries: np.ndarray, row_of: np.ndarray, R: int) -> np.ndarray:
    """For each row, the index of its first flagged entry (-1: none)."""
    first = np.full(R, -1, np.int64)
    idx = np.flatnonzero(bad_entries)
    if idx.size:
        rows, at = np.unique(row_of[idx], return_index=True)
        first[rows] = idx[at]
    return first


def scan_rows(
    cols: dict[str, np.ndarray],
    pad_id: int | None = None,
    layout: Layout | None = None,
    vocab_size: int | None = None,
) -> dict[str, dict]:
    """Check a batch of rows (`cols`: the module docstring's; `layout`: the manifest's). Returns
    {check: {"rows", "pos", "got", "expected", "doc"}} for the failing rows only (one entry per
    row: its first bad position), and "_totals". Every input_id, pad tail included, must be >= 0
    and, when `vocab_size` (the manifest's tokenizer.vocab_size) is given, below it."""
    layout = layout or Layout()
    K, N = layout.fixed_docs, layout.pad_to_multiple
    ids, lab, pos, doc = (cols[c] for c in ("input_ids", "labels", "position_ids", "document_id"))
    R, L = ids.shape
    n = R * L
    seq_off, lens = cols["seq_off"], cols["seq_val"].astype(np.int64)
    ndocs = np.diff(seq_off)  # entries per row (fixed docs: empty ones included)
    row_of_doc = np.repeat(np.arange(R), ndocs)
    local = np.arange(lens.size) - np.repeat(seq_off[:-1], ndocs)  # entry index in its row
    cs = np.concatenate(([0], np.cumsum(lens)))
    ntok = cs[seq_off[1:]] - cs[seq_off[:-1]]  # slots declared per row
    nonzero = lens > 0
    nreal = np.bincount(row_of_doc[nonzero], minlength=R)  # documents per row

    def paired(off_key: str, val_key: str):
        """Another list's value per seq_lengths entry (0 in the rows where the two lists do not
        pair up), which rows pair up, and which entries."""
        off, same = cols[off_key], np.diff(cols[off_key]) == ndocs
        ok = same[row_of_doc]
        v = np.zeros(lens.size, np.int64)
        v[ok] = np.asarray(cols[val_key], np.int64)[off[row_of_doc[ok]] + local[ok]]
        return v, same, ok

    out: dict[str, dict] = {}
    # fixed docs: K entries, empty ones only at the end, source_index -1 on them
    fixed_bad = np.zeros(R, bool)
    src_n = np.diff(cols["src_off"])
    src_keep = None
    if K:
        after_empty = nonzero & (local >= nreal[row_of_doc])  # a document after an empty entry
        sv, _, ok_entries = paired("src_off", "src_val")  # each entry's source_index
        src_bad = ok_entries & ((~nonzero & (sv != -1)) | (nonzero & (sv < 0)))
        first_after = _first_per_row(after_empty, row_of_doc, R)
        first_src = _first_per_row(src_bad, row_of_doc, R)
        kind = np.where(
            ndocs != K, 0, np.where(first_after >= 0, 1, np.where(first_src >= 0, 2, -1))
        )
        fixed_bad = kind >= 0
        if fixed_bad.any():
            r = np.flatnonzero(fixed_bad)
            k = kind[r]
            e = np.maximum(np.where(k == 1, first_after[r], first_src[r]), 0)
            got = np.where(k == 0, ndocs[r], np.where(k == 1, lens[e], sv[e]))
            out[FIXED] = _row_fail(r, got, np.full(r.size, K), np.where(k == 0, -1, local[e]), k)
        src_keep = cols["src_val"] >= 0

    # rows whose seq_lengths cannot describe a row: reported once, left out of the slot checks
    nonpos = np.zeros(R, bool)
    nonpos[row_of_doc[lens < 0 if K else lens <= 0]] = True
    seq_bad = nonpos | (ntok > L) | (nreal == 0)
    if seq_bad.any():
        r = np.flatnonzero(seq_bad)
        out[SEQ] = _row_fail(r, ntok[r], np.full(r.size, L), nreal[r])
    valid = ~seq_bad & ~fixed_bad

    # padded documents: real tokens per entry (u) and the check seq_lengths == ceil(u/N)*N
    real = lens.copy()
    if layout.padded and "unp_val" in cols:
        u, same, entry_ok = paired("unp_off", "unp_val")
        unp_n = np.diff(cols["unp_off"])
        wrong = entry_ok & ((u < 0) | (u > lens) | (-(-u // N) * N != lens) | (nonzero & (u < 1)))
        first = _first_per_row(wrong, row_of_doc, R)
        bad_rows = ~same | (first >= 0)
        if bad_rows.any():
            r = np.flatnonzero(bad_rows)
            e = np.maximum(first[r], 0)
            listed = ~same[r]
            out[UNPAD] = _row_fail(
                r,
                np.where(listed, unp_n[r], u[e]),
                np.where(listed, ndocs[r], lens[e]),
                np.where(listed, -1, local[e]),
                np.where(listed, 0, 1),
            )
            out[UNPAD]["n"] = N
        real = np.where(entry_ok & ~wrong, u, lens)

    idx_t = np.int32 if n < 2**31 - 1 else np.int64
    keep_doc = valid[row_of_doc] & nonzero
    local_start = (cs[:-1] - cs[seq_off[:-1]][row_of_doc])[keep_doc]
    doc_start = (row_of_doc[keep_doc] * L + local_start).astype(idx_t)
    vrows = np.flatnonzero(valid & (ntok < L))
    pad_start = (vrows * L + ntok[vrows]).astype(idx_t)

    seg = segment_starts(np.arange(0, n, L, dtype=idx_t), doc_start, pad_start, n)
    exp_pos = (np.arange(n, dtype=idx_t) - seg).reshape(R, L)
    del seg

    # document index: cumsum of doc-start marks, minus the documents of earlier rows
    mark = np.zeros(n, np.int32)
    mark[doc_start] = 1
    cum = np.cumsum(mark, dtype=np.int32).reshape(R, L)
    del mark
    before = np.concatenate(([0], np.cumsum(np.where(valid, nreal, 0))[:-1])).astype(np.int32)
    cov = np.arange(L, dtype=np.int32)[None, :] < ntok[:, None]  # covered by a document
    exp_doc = np.where(cov, cum - before[:, None] - 1, np.int32(PAD_DOCUMENT_ID))
    del cum

    # a document's padding: slots [start + real, start + slots) of every valid document
    pad_in = doc_start + real[keep_doc].astype(idx_t)
    pad_end = doc_start + lens[keep_doc].astype(idx_t)
    if np.any(pad_in != pad_end):
        edge = np.bincount(pad_in, minlength=n + 1) - np.bincount(pad_end, minlength=n + 1)
        docpad = (np.cumsum(edge[:n]) > 0).reshape(R, L)
        del edge
    else:
        docpad = np.zeros((R, L), bool)

    # the label must be IGNORE_INDEX here: pad, or a document's first token
    masked = ~cov | (exp_pos == 0)
    has_loss = lab != IGNORE_INDEX

    def report(name: str, bad: np.ndarray, got: np.ndarray, expected: np.ndarray | int) -> None:
        rows_bad = bad.any(axis=1) & valid
        if not rows_bad.any():
            return
        r = np.flatnonzero(rows_bad)
        p = bad[r].argmax(axis=1)
        e = expected[r, p] if isinstance(expected, np.ndarray) else np.full(r.size, expected)
        out[name] = {"rows": r, "pos": p, "got": got[r, p], "expected": e, "doc": exp_doc[r, p]}

    # token ids: checked on every row, also one whose seq_lengths fail (the ids are wrong either way)
    bad_id = (ids < 0) if vocab_size is None else ((ids < 0) | (ids >= vocab_size))
    r = np.flatnonzero(bad_id.any(axis=1))
    if r.size:
        p = bad_id[r].argmax(axis=1)
        got = ids[r, p]
        out[IDS] = {"rows": r, "pos": p, "got": got, "doc": exp_doc[r, p]}
        out[IDS]["expected"] = np.full(r.size, -1 if vocab_size is None else int(vocab_size))

    report(DOC, doc != exp_doc, doc, exp_doc)
    report(POS, pos != exp_pos, pos, exp_pos)
    report(LAB_MASK, masked & has_loss, lab, IGNORE_INDEX)
    report(LAB_EQ, ~masked & ~docpad & has_loss & (lab != ids), lab, ids)
    if pad_id is not None:
        report(PAD, ~cov & (ids != pad_id), ids, int(pad_id))
    if layout.padded:
        wrong_id = (ids != pad_id) if pad_id is not None else np.zeros_like(has_loss)
        report(
            DOC_PAD,
            docpad & (has_loss | wrong_id),
            np.where(has_loss, lab, ids),
            np.where(has_loss, IGNORE_INDEX, pad_id if pad_id is not None else 0),
        )

    pad_slots = docpad.sum(axis=1)
    counted = (doc != PAD_DOCUMENT_ID).sum(axis=1) - pad_slots
    loss = has_loss.sum(axis=1)
    creal = np.concatenate(([0], np.cumsum(real)))
    nreal_tok = creal[seq_off[1:]] - creal[seq_off[:-1]]
    exp_nt = np.where(valid, nreal_tok, counted)
    for name, got, exp in (
        (NTOK, cols["num_tokens"], exp_nt),
        (NLOSS, cols["num_loss_tokens"], loss),
        (SRC, src_n, ndocs),
    ):
        r = np.flatnonzero(got != exp)
        if r.size:
            out[name] = _row_fail(r, got[r], exp[r])
    out["_totals"] = {
        "valid": valid,
        "ndocs": nreal,
        "tokens": int(counted.sum()),
        "doc_pad": int(pad_slots.sum()),
        "loss_tokens": int(loss.sum()),
        "documents": int(nreal.sum()),
        "num_tokens_sum": int(cols["num_tokens"].sum(dtype=np.int64)),
        "src_keep": src_keep,
    }
    return out


# --------------------------------------------------------------------------------------------
# what a person reads


def describe(
    name: str,
    shard: str,
    row: int,
    pos: int,
    got: int,
    exp: int,
    doc: int,
    kind: int = -1,
    n: int = 1,
) -> str:
    """The one line naming a failing slot (pos -1: the row as a whole; doc -1: the pad tail);
    `kind` tells the layout checks' cases apart, `n` is --pad-to-multiple."""
    at = f"{shard} row {row}"
    ignore = IGNORE_INDEX
    if name == FIXED:
        if kind == 0:
            return f"{at}: {got} seq_lengths entries, fixed docs needs exactly {exp} (--max-docs)"
        if kind == 1:
            return (
                f"{at} document {doc}: {got} slots after an empty entry; with fixed docs the "
                "empty entries (0) come only at the end of seq_lengths"
            )
        return (
            f"{at} document {doc}: source_index {got}; with fixed docs an empty entry has "
            "source_index -1 and a document its own index >= 0"
        )
    if name == UNPAD:
        if kind == 0:
            return f"{at}: {got} seq_lengths_unpadded entries for {exp} seq_lengths entries"
        return (
            f"{at} document {doc}: seq_lengths_unpadded {got}, but seq_lengths {exp}; each must be "
            f"ceil(unpadded / {n}) * {n} (--pad-to-multiple {n}), unpadded >= 1 for a document"
        )
    if name == IDS:  # exp: the vocabulary size (-1: not recorded)
        if got < 0:
            return (
                f"{at} position {pos}: input_id {got} is negative, no token has it: the shard was "
                "edited after packing; pack it again"
            )
        return (
            f"{at} position {pos}: input_id {got} is outside the tokenizer's vocabulary (0..{exp - 1}): "
            "the shard was edited or packed with another tokenizer; pack it again with the recorded one"
        )
    if name == DOC_PAD:
        if exp == ignore:
            return f"{at} position {pos} (padding of document {doc}): label {got}, must be {ignore}"
        return f"{at} position {pos} (padding of document {doc}): input_id {got} != pad id {exp}"
    if name in _LINES:
        return _LINES[name].format(at=at, pos=pos, got=got, exp=exp, doc=doc, ignore=ignore)
    if name == POS:
        what = "the padding tail" if doc < 0 else f"document {doc}"
        return (
            f"{at} position {pos} ({what}): position_id {got}, expected {exp}; positions must restart "
            f"at 0 at every document and count up by one"
        )
    if name == LAB_MASK:
        if doc < 0:
            return f"{at} position {pos} (padding): label {got}, must be {ignore}"
        return (
            f"{at} position {pos} (first token of document {doc}): label {got}, must be {ignore} (else the "
            f"previous document's last token is trained to predict it)"
        )
    return f"{at} position {pos}: got {got}, expected {exp}"


_LINES = {  # describe's checks whose line is one template
    SEQ: "{at}: seq_lengths declare {got} tokens in {doc} documents (each must be >= 1, total <= pack_len {exp})",
    DOC: "{at} position {pos}: document_id {got}, but seq_lengths put document {exp} there",
    LAB_EQ: "{at} position {pos} (document {doc}): label {got} != input_id {exp} (labels are unshifted)",
    PAD: "{at} position {pos} (padding): input_id {got} != pad id {exp}",
    NTOK: "{at}: num_tokens {got}, but the row holds {exp} document tokens",
    NLOSS: "{at}: num_loss_tokens {got}, but {exp} labels are not {ignore}",
    SRC: "{at}: {got} source_index entries for {exp} documents",
}
