"""The row scan of the integrity layer: the row check itself (`scan_rows`, `batch_columns`,
`describe`: every slot of a batch of rows against what its `seq_lengths` say, numpy only) lives in
schema/rows.py, shared with export; here is what verify keeps of it (Failures, Totals).

The integrity checks' names, in report order (tests, the report and `--json` readers match them):

    MANIFEST_CHECK    the manifest itself                       audit.manifest_check
    SCHEMA, NO_MASK   each shard's Arrow schema                 audit.shard_schema
    ROW_CHECKS        every slot of every row                   scan_rows (schema/rows.py)
    LAYOUT_CHECKS     padded documents, fixed docs per row      scan_rows (packs with that layout)
    SHARDS            shards on disk against the manifest       audit.shards_check
    SRC               where each document came from             scan_rows, accounting.source_check
    COUNTS, CONSERVE  the manifest's numbers against the rows   accounting.counts_check, ...
    PAIR_CHECKS       a preference pack's pair rules            pair_checks (below)

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

Which prompt tokens a side should have is only known from the input (`verify --sources`); these
rules need only the pack. Empty entries of --fixed-docs rows (source_index -1) are no documents.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from packtool import schema
from packtool.data.labels import leading_untrained, prompts_differ
from packtool.schema.rows import (  # noqa: F401  (the row check and its names, for verify)
    DOC,
    DOC_PAD,
    FIXED,
    IDS,
    LAB_EQ,
    LAB_MASK,
    NLOSS,
    NTOK,
    PAD,
    POS,
    SEQ,
    SRC,
    UNPAD,
    batch_columns,
    describe,
    scan_rows,
)
from packtool.verify import Check

MAX_EXAMPLES = 5
MANIFEST_CHECK = "manifest"
SCHEMA = "schema"
NO_MASK = "no attention_mask"
SHARDS = "shards on disk"
COUNTS = "manifest counts"
CONSERVE = "conservation"
ROW_CHECKS = (SEQ, DOC, POS, LAB_MASK, LAB_EQ, PAD, IDS, NTOK, NLOSS)
LAYOUT_CHECKS = (UNPAD, DOC_PAD, FIXED)
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


def row_checks(padded: bool, fixed: bool) -> tuple[str, ...]:
    """The row checks a pack of this layout gets: ROW_CHECKS, then the layout's own."""
    return ROW_CHECKS + ((UNPAD, DOC_PAD) if padded else ()) + ((FIXED,) if fixed else ())


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

    def check(
        self, name: str, passed: str, ev: dict, key: str = "rows_failed", not_run: str | None = None
    ) -> Check:
        """Check `name`: `passed` when nothing failed, else the first failure's message (+ how
        many more rows failed) with the count and the first few as evidence. `not_run`: why
        the check could not run in full (nothing to compare with): then a clean scan is a
        skipped check with that message, never a pass."""
        if not self.count:
            if not_run:
                return Check(name, False, not_run, dict(ev), skipped=True)
            return Check(name, True, passed, dict(ev))
        more = f" (+{self.count - 1} more rows)" if self.count > 1 else ""
        ev = {**ev, key: self.count, "first": self.examples}
        return Check(name, False, self.examples[0]["message"] + more, ev)


@dataclass
class Totals:
    """What the scan counted over the whole pack (the accounting checks compare it with the manifest)."""

    rows: int = 0
    tokens: int = 0  # real tokens: document slots counted from document_id, less their padding
    doc_pad: int = 0  # pad slots inside documents (--pad-to-multiple)
    loss_tokens: int = 0  # labels != IGNORE_INDEX counted
    documents: int = 0
    num_tokens_sum: int = 0
    source_index: list[np.ndarray] = field(default_factory=list)
    # per scanned batch, parallel to source_index: (shard, first row, offsets of its rows' entries),
    # so that a source index found twice or missing is named by shard, row and document
    source_rows: list[tuple[str, int, np.ndarray]] = field(default_factory=list)

    def add(self, batch: dict, cols: dict, shard: str, row0: int) -> None:
        """Count one scanned batch: `batch` is scan_rows' "_totals", `cols` the batch's columns."""
        self.rows += cols["input_ids"].shape[0]
        self.tokens += batch["tokens"]
        self.doc_pad += batch.get("doc_pad", 0)
        self.loss_tokens += batch["loss_tokens"]
        self.documents += batch["documents"]
        self.num_tokens_sum += batch["num_tokens_sum"]
        vals = np.asarray(cols["src_val"], dtype=np.int64)
        off = np.asarray(cols["src_off"], dtype=np.int64)
        keep = batch.get("src_keep")
        if keep is not None:  # fixed docs: the empty entries (-1) are no documents
            cs = np.concatenate(([0], np.cumsum(keep)))
            vals, off = vals[keep], cs[off]
        self.source_index.append(vals)
        self.source_rows.append((shard, row0, off))

    def all_sources(self) -> np.ndarray:
        """Every source_index in the rows, in row order (int64)."""
        return np.concatenate(self.source_index) if self.source_index else np.zeros(0, np.int64)


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
        kind = int(fail["kind"][i]) if "kind" in fail else -1
        msg = describe(name, shard, row, pos, got, exp, doc, kind, int(fail.get("n", 1)))
        if name == SRC:
            msg += _src_detail(cols, r)
        at = {"shard": shard, "row": row, "position": pos if pos >= 0 else None}
        out.append({**at, "got": got, "expected": exp, "message": msg})
    return out


def not_run_text(name: str, pad_id: int | None, vocab_size: int | None) -> str | None:
    """Why row check `name` could not run in full on this pack (None: it ran in full): the pad
    checks without a pad id, the token ids' upper bound without a vocab_size in the manifest."""
    if name == PAD and pad_id is None:
        return "not checked: the manifest records no integer pad_id (see the manifest check)"
    if name == DOC_PAD and pad_id is None:
        return (
            f"labels {schema.IGNORE_INDEX} checked; the pad ids not checked: the manifest "
            "records no integer pad_id (see the manifest check)"
        )
    if name == IDS and vocab_size is None:
        return (
            "no id is negative; the upper bound was not checked: the manifest records no "
            "tokenizer.vocab_size (pre-tokenized input packed without a tokenizer)"
        )
    return None


def passed_text(name: str, pad_id: int | None, vocab_size: int | None = None) -> str:
    """The message of a row check that no row failed (and that ran in full: not_run_text)."""
    ignore = schema.IGNORE_INDEX
    return {
        SEQ: "every row: lengths >= 1, sum <= pack_len",
        DOC: f"0..k-1 in row order, {schema.PAD_DOCUMENT_ID} on padding, agrees with seq_lengths",
        POS: "restart at 0 at every document, count by one; pad tail its own segment",
        LAB_MASK: f"{ignore} on every document's first token and on padding",
        LAB_EQ: f"labels equal input_ids wherever not {ignore}",
        PAD: f"pad tail holds pad id {pad_id}",
        IDS: f"every input_id inside the tokenizer's vocabulary (0..{(vocab_size or 0) - 1})",
        NTOK: "matches the document tokens of every row",
        NLOSS: f"matches the labels that are not {ignore}",
        UNPAD: "every document: seq_lengths = ceil(seq_lengths_unpadded / N) * N",
        DOC_PAD: f"every document's padding holds the pad id and label {ignore}",
        FIXED: "every row lists exactly --max-docs entries, empty ones (source_index -1) last",
    }[name]


def pair_checks(input_ids, labels, seq_val, seq_off, src_val, side_val) -> dict:
    """The pair rules over a batch of B rows of L slots: `input_ids`, `labels` [B, L]; the list
    columns flat with their row offsets (seq_val/src_val/side_val share seq_off, int64[B+1]). Per
    rule: (failing documents, the first as (row in batch, position in row or -1, message))."""
    B, L = labels.shape
    lists = (seq_val, seq_off, src_val, side_val)
    seq_val, seq_off, src_val, side_val = (np.asarray(a, dtype=np.int64) for a in lists)
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
        for d in np.flatnonzero(bad)[:MAX_EXAMPLES]
    ]  # fmt: skip
    odd = "documents: a pair's side is missing or split to another row"
    shown += [
        (int(r), -1, f"{int(counts[r])} {odd}") for r in odd_rows[: MAX_EXAMPLES - len(shown)]
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
            for d in rej[bad][:MAX_EXAMPLES]
        ],
    )  # fmt: skip

    flat_ids = input_ids.reshape(-1)
    pos = row * L + start  # flat slot of each document's first token
    # the prompt: each document's leading untrained run (its length: nothing trained)
    prompt = leading_untrained((labels != schema.IGNORE_INDEX).reshape(-1), pos, length)
    none = np.flatnonzero(prompt == length)
    out[PAIR_TRAINED] = (
        int(none.size),
        [(int(row[d]), int(start[d]), f"document {int(j[d])} (side {int(side[d])}) trains no token")
         for d in none[:MAX_EXAMPLES]],
    )  # fmt: skip

    p_c, p_r = prompt[cho], prompt[rej]
    bad = prompts_differ(flat_ids, pos[cho], pos[rej], p_c, p_r)
    shown = []
    for i in np.flatnonzero(bad)[:MAX_EXAMPLES]:
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
