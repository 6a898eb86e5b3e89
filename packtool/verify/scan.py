"""The row scan: every slot of a batch of rows against what its `seq_lengths` say, with numpy only.

A batch of R rows is one flat (R, L) int32 view per token column (the fixed-size-list buffers, zero
copy when possible), the list columns as (offsets from 0, values), the scalars as (R,) arrays:

    cols["input_ids"] ... cols["document_id"]   (R, L) int32
    cols["seq_off"], cols["seq_val"]             row r's documents: seq_val[seq_off[r]:seq_off[r + 1]]
    cols["src_off"], cols["src_val"]             row r's source indices, alike
    cols["num_tokens"], cols["num_loss_tokens"]  (R,)

From `seq_lengths` alone the expected columns are rebuilt with a handful of whole-array passes (the
segment rule of docs/ARCHITECTURE.md, "Schema": `schema.segment_starts`) and compared:

    seq_lengths [4, 3], L = 9     marks at row, document and pad-tail starts, running max
    segment start          0 0 0 0 4 4 4  7  7
    expected position_ids  0 1 2 3 0 1 2  0  1      slot - segment start (the pad tail is its own segment)
    expected document_id   0 0 0 0 1 1 1 -1 -1      cumsum of document-start marks; PAD_DOCUMENT_ID on the tail
    label must be -100     x . . . x . . x  x       IGNORE_INDEX: each document's first token, padding
    label == input_id      . o o o . o o .  .       wherever the label is not IGNORE_INDEX

No Python loop runs per row or per token: the cost is ~20 passes over int32 buffers, measured
~0.3 s per 10M tokens on 2 cores including Parquet decoding (see the README for numbers). A failing
row is reported once per check, at its first bad slot; `describe` turns that slot into the one line
a person reads, and `Failures` keeps the first few of each check as evidence and counts the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from packtool import schema
from packtool.verify.names import DOC, LAB_EQ, LAB_MASK, NLOSS, NTOK, PAD, POS, SEQ, SRC

MAX_EXAMPLES = 5


@dataclass
class Failures:
    """Failures of one check: a count and the first few, each with shard, row and position."""

    count: int = 0
    examples: list[dict] = field(default_factory=list)

    def add(self, n: int, examples: list[dict]) -> None:
        self.count += n
        room = MAX_EXAMPLES - len(self.examples)
        if room > 0:
            self.examples.extend(examples[:room])


@dataclass
class Totals:
    """What the scan counted over the whole pack (the accounting checks compare it with the manifest)."""

    rows: int = 0
    tokens: int = 0  # non-pad tokens counted from document_id
    loss_tokens: int = 0  # labels != IGNORE_INDEX counted
    documents: int = 0
    num_tokens_sum: int = 0
    num_loss_sum: int = 0
    source_index: list[np.ndarray] = field(default_factory=list)
    # per scanned batch, parallel to source_index: (shard, first row, offsets of its rows' entries),
    # so that a source index found twice or missing is named by shard, row and document
    source_rows: list[tuple[str, int, np.ndarray]] = field(default_factory=list)

    def add(self, batch: dict, cols: dict, shard: str, row0: int) -> None:
        """Count one scanned batch: `batch` is scan_rows' "_totals", `cols` the batch's columns."""
        self.rows += cols["input_ids"].shape[0]
        self.tokens += batch["tokens"]
        self.loss_tokens += batch["loss_tokens"]
        self.documents += batch["documents"]
        self.num_tokens_sum += batch["num_tokens_sum"]
        self.num_loss_sum += batch["num_loss_sum"]
        self.source_index.append(np.asarray(cols["src_val"], dtype=np.int64))
        self.source_rows.append((shard, row0, np.asarray(cols["src_off"], dtype=np.int64)))

    def all_sources(self) -> np.ndarray:
        """Every source_index in the rows, in row order (int64)."""
        return np.concatenate(self.source_index) if self.source_index else np.zeros(0, np.int64)


# --------------------------------------------------------------------------------------------
# one decoded batch -> the arrays the scan reads


def flat_fixed(arr, rows: int, pack_len: int) -> np.ndarray:
    """(rows, pack_len) int32 view of a fixed_size_list<int32> chunk (zero copy when possible)."""
    flat = arr.flatten().to_numpy(zero_copy_only=False)
    if flat.dtype != np.int32:
        flat = flat.astype(np.int32)
    return flat.reshape(rows, pack_len)


def flat_list(arr) -> tuple[np.ndarray, np.ndarray]:
    """(offsets from 0, values) of a list<int> chunk, honouring slices."""
    off = arr.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
    off = off - off[0]
    return off, arr.flatten().to_numpy(zero_copy_only=False)


def batch_columns(batch, pack_len: int, row0: int) -> dict[str, np.ndarray]:
    """The scan's `cols` of a decoded Arrow record batch (ValueError on nulls: a corrupt shard)."""
    R = batch.num_rows
    for c in schema.COLUMNS:
        if batch.column(c).null_count:
            raise ValueError(f"column {c} has nulls near row {row0}")
    cols = {c: flat_fixed(batch.column(c), R, pack_len) for c in schema.TOKEN_COLUMNS}
    cols["seq_off"], cols["seq_val"] = flat_list(batch.column("seq_lengths"))
    cols["src_off"], cols["src_val"] = flat_list(batch.column("source_index"))
    cols["num_tokens"] = batch.column("num_tokens").to_numpy().astype(np.int64)
    cols["num_loss_tokens"] = batch.column("num_loss_tokens").to_numpy().astype(np.int64)
    return cols


# --------------------------------------------------------------------------------------------
# the vectorized row scan


def scan_rows(cols: dict[str, np.ndarray], pad_id: int | None = None) -> dict[str, dict]:
    """Check a batch of rows. Returns {check: {"rows", "pos", "got", "expected", "doc"}} for the
    failing rows only (one entry per row: its first bad position), and "_totals".

    `cols` holds (R, L) int32 arrays for the token columns, `seq_off`/`seq_val` and
    `src_off`/`src_val` for the list columns, and (R,) arrays for the two scalar columns.
    """
    ids, lab, pos, doc = (
        cols["input_ids"],
        cols["labels"],
        cols["position_ids"],
        cols["document_id"],
    )
    R, L = ids.shape
    n = R * L
    seq_off, lens = cols["seq_off"], cols["seq_val"].astype(np.int64)
    ndocs = np.diff(seq_off)
    row_of_doc = np.repeat(np.arange(R), ndocs)
    cs = np.concatenate(([0], np.cumsum(lens)))
    ntok = cs[seq_off[1:]] - cs[seq_off[:-1]]  # tokens declared per row

    # rows whose seq_lengths cannot describe a row: reported once, left out of the slot checks
    nonpos = np.zeros(R, bool)
    nonpos[row_of_doc[lens <= 0]] = True
    seq_bad = nonpos | (ntok > L) | (ndocs == 0)
    valid = ~seq_bad
    out: dict[str, dict] = {}
    if seq_bad.any():
        r = np.flatnonzero(seq_bad)
        out[SEQ] = {
            "rows": r,
            "pos": np.full(r.size, -1),
            "got": ntok[r],
            "expected": np.full(r.size, L),
            "doc": ndocs[r],
        }

    idx_t = np.int32 if n < 2**31 - 1 else np.int64
    keep_doc = valid[row_of_doc]
    local_start = (cs[:-1] - cs[seq_off[:-1]][row_of_doc])[keep_doc]
    doc_start = (row_of_doc[keep_doc] * L + local_start).astype(idx_t)
    vrows = np.flatnonzero(valid & (ntok < L))
    pad_start = (vrows * L + ntok[vrows]).astype(idx_t)

    seg = schema.segment_starts(np.arange(0, n, L, dtype=idx_t), doc_start, pad_start, n)
    exp_pos = (np.arange(n, dtype=idx_t) - seg).reshape(R, L)
    del seg

    # document index: cumsum of doc-start marks, minus the documents of earlier rows
    mark = np.zeros(n, np.int32)
    mark[doc_start] = 1
    cum = np.cumsum(mark, dtype=np.int32).reshape(R, L)
    del mark
    before = np.concatenate(([0], np.cumsum(np.where(valid, ndocs, 0))[:-1])).astype(np.int32)
    cov = np.arange(L, dtype=np.int32)[None, :] < ntok[:, None]  # covered by a document
    exp_doc = np.where(cov, cum - before[:, None] - 1, np.int32(schema.PAD_DOCUMENT_ID))
    del cum

    masked = ~cov | (
        exp_pos == 0
    )  # label must be IGNORE_INDEX here: pad, or a document's first token
    has_loss = lab != schema.IGNORE_INDEX

    def report(name: str, bad: np.ndarray, got: np.ndarray, expected: np.ndarray | int) -> None:
        rows_bad = bad.any(axis=1) & valid
        if not rows_bad.any():
            return
        r = np.flatnonzero(rows_bad)
        p = bad[r].argmax(axis=1)
        e = expected[r, p] if isinstance(expected, np.ndarray) else np.full(r.size, expected)
        out[name] = {"rows": r, "pos": p, "got": got[r, p], "expected": e, "doc": exp_doc[r, p]}

    report(DOC, doc != exp_doc, doc, exp_doc)
    report(POS, pos != exp_pos, pos, exp_pos)
    report(LAB_MASK, masked & has_loss, lab, schema.IGNORE_INDEX)
    report(LAB_EQ, ~masked & has_loss & (lab != ids), lab, ids)
    if pad_id is not None:
        report(PAD, ~cov & (ids != pad_id), ids, int(pad_id))

    counted = (doc != schema.PAD_DOCUMENT_ID).sum(axis=1)
    loss = has_loss.sum(axis=1)
    exp_nt = np.where(valid, ntok, counted)
    for name, got, exp in (
        (NTOK, cols["num_tokens"], exp_nt),
        (NLOSS, cols["num_loss_tokens"], loss),
    ):
        r = np.flatnonzero(got != exp)
        if r.size:
            out[name] = {
                "rows": r,
                "pos": np.full(r.size, -1),
                "got": got[r],
                "expected": exp[r],
                "doc": np.full(r.size, -1),
            }
    src_n = np.diff(cols["src_off"])
    r = np.flatnonzero(src_n != ndocs)
    if r.size:
        out[SRC] = {
            "rows": r,
            "pos": np.full(r.size, -1),
            "got": src_n[r],
            "expected": ndocs[r],
            "doc": np.full(r.size, -1),
        }
    out["_totals"] = {
        "valid": valid,
        "ndocs": ndocs,
        "tokens": int(counted.sum()),
        "loss_tokens": int(loss.sum()),
        "documents": int(ndocs.sum()),
        "num_tokens_sum": int(cols["num_tokens"].sum(dtype=np.int64)),
        "num_loss_sum": int(cols["num_loss_tokens"].sum(dtype=np.int64)),
    }
    return out


# --------------------------------------------------------------------------------------------
# what a person reads


def describe(name: str, shard: str, row: int, pos: int, got: int, exp: int, doc: int) -> str:
    """The one line naming a failing slot (pos -1: the row as a whole; doc -1: the pad tail)."""
    at = f"{shard} row {row}"
    ignore = schema.IGNORE_INDEX
    if name == SEQ:
        return f"{at}: seq_lengths declare {got} tokens in {doc} documents (each must be >= 1, total <= pack_len {exp})"
    if name == DOC:
        return f"{at} position {pos}: document_id {got}, but seq_lengths put document {exp} there"
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
    if name == LAB_EQ:
        return f"{at} position {pos} (document {doc}): label {got} != input_id {exp} (labels are unshifted)"
    if name == PAD:
        return f"{at} position {pos} (padding): input_id {got} != pad id {exp}"
    if name == NTOK:
        return f"{at}: num_tokens {got}, but the row holds {exp} document tokens"
    if name == NLOSS:
        return f"{at}: num_loss_tokens {got}, but {exp} labels are not {ignore}"
    if name == SRC:
        return f"{at}: {got} source_index entries for {exp} documents"
    return f"{at} position {pos}: got {got}, expected {exp}"


def _src_detail(cols: dict, r: int) -> str:
    """What a row's source_index and seq_lengths disagree on: the indices and the lengths, and
    what it looks like (rare path: only rows already failing)."""
    src = cols["src_val"][cols["src_off"][r] : cols["src_off"][r + 1]].tolist()
    seq = cols["seq_val"][cols["seq_off"][r] : cols["seq_off"][r + 1]].tolist()
    text = f" (source_index {src}, seq_lengths {seq})"
    if len(src) > len(seq):
        text += ": documents merged (a boundary lost) or a source_index added"
    else:
        text += ": a document split without its source_index, or a source_index lost"
    return text


def examples(name: str, fail: dict, cols: dict, shard: str, row0: int) -> list[dict]:
    """The first MAX_EXAMPLES failing rows of check `name` in a batch (scan_rows' entry `fail`), as
    evidence: shard, row (in the shard), position (None: the row as a whole), got, expected, message."""
    out = []
    for i in range(min(MAX_EXAMPLES, fail["rows"].size)):
        r = int(fail["rows"][i])
        row, pos = r + row0, int(fail["pos"][i])
        got, exp, doc = int(fail["got"][i]), int(fail["expected"][i]), int(fail["doc"][i])
        msg = describe(name, shard, row, pos, got, exp, doc)
        if name == SRC:
            msg += _src_detail(cols, r)
        out.append(
            {
                "shard": shard,
                "row": row,
                "position": pos if pos >= 0 else None,
                "got": got,
                "expected": exp,
                "message": msg,
            }
        )
    return out


def passed_text(name: str, pad_id: int | None) -> str:
    """The message of a row check that no row failed."""
    ignore = schema.IGNORE_INDEX
    return {
        SEQ: "every row: lengths >= 1, sum <= pack_len",
        DOC: f"0..k-1 in row order, {schema.PAD_DOCUMENT_ID} on padding, agrees with seq_lengths",
        POS: "restart at 0 at every document, count by one; pad tail its own segment",
        LAB_MASK: f"{ignore} on every document's first token and on padding",
        LAB_EQ: f"labels equal input_ids wherever not {ignore}",
        PAD: f"pad tail holds pad id {pad_id}"
        if pad_id is not None
        else "pad id not in manifest: not checked",
        NTOK: "matches the document tokens of every row",
        NLOSS: f"matches the labels that are not {ignore}",
    }[name]
