"""Preference packs for the torch tests, written with pyarrow directly (the pair pack contract, until
`packtool pack` writes them): schema v1 plus the list<int8> column `side` (0 chosen, 1 rejected),
aligned with seq_lengths; each pair two adjacent documents of one row, chosen first, both with the
pair's source_index; each side = the prompt (labels -100) + its answer (labels = ids).

    pair j = (prompt, chosen answer, rejected answer)
    row    P  P  c  c  c | P  P  r  r | P' P' c' | P' P' r' r' | pad      (documents 2j, 2j+1)
    side   [0, 1, 0, 1]       source_index [j, j, j', j']
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from packtool import schema

IGNORE = schema.IGNORE_INDEX
PAD_ID = 0
SIDE = pa.field("side", pa.list_(pa.int8()), nullable=False)


def make_pairs(n: int, *, seed: int = 0, vocab: int = 64, prompt=(2, 9), answer=(1, 8)):
    """n random pairs (prompt, chosen, rejected) of int32 ids in [1, vocab): a shared prompt and two
    answers of independent lengths."""
    rng = np.random.default_rng(seed)

    def ids(lo, hi):
        return rng.integers(1, vocab, size=int(rng.integers(lo, hi + 1))).astype(np.int32)

    return [(ids(*prompt), ids(*answer), ids(*answer)) for _ in range(n)]


def sides(pair):
    """The two documents of a pair: (ids, labels) for chosen, then rejected."""
    prompt, *answers = pair
    out = []
    for a in answers:
        ids = np.concatenate([prompt, a]).astype(np.int32)
        labels = ids.copy()
        labels[: len(prompt)] = IGNORE
        out.append((ids, labels))
    return out


def plan_pair_rows(pairs, pack_len: int, multiple: int = 1) -> list[list[int]]:
    """First-fit in input order with the pair as the unit (packs.plan_rows over each pair's
    slots): rows of pair indices."""
    from packs import plan_rows

    slots = [sum(-(-(len(p) + len(a)) // multiple) * multiple for a in (c, r)) for p, c, r in pairs]
    return plan_rows(slots, pack_len)


def build_pair_row(docs, pack_len, *, multiple=1, max_docs=0, restart=True):
    """One row from docs = [(ids, labels, source_index, side), ...]; `multiple` pads each document to
    a multiple of it (--pad-to-multiple), `max_docs` > 0 lists exactly that many entries
    (--fixed-docs), restart=False writes positions that run on across documents (a broken row)."""
    ids = np.full(pack_len, PAD_ID, np.int32)
    labels = np.full(pack_len, IGNORE, np.int32)
    pos = np.zeros(pack_len, np.int32)
    doc_id = np.full(pack_len, schema.PAD_DOCUMENT_ID, np.int32)
    seq, real, src, side = [], [], [], []
    at = 0
    for k, (d_ids, d_labels, s, sd) in enumerate(docs):
        n = len(d_ids)
        slots = -(-n // multiple) * multiple
        ids[at : at + n] = d_ids
        labels[at : at + n] = d_labels
        labels[at] = IGNORE
        pos[at : at + slots] = np.arange(slots) + (at if not restart else 0)
        doc_id[at : at + slots] = k
        seq.append(slots)
        real.append(n)
        src.append(s)
        side.append(sd)
        at += slots
    pos[at:] = np.arange(pack_len - at)
    if max_docs:
        pad = max_docs - len(docs)
        seq, real, src, side = seq + [0] * pad, real + [0] * pad, src + [-1] * pad, side + [0] * pad
    row = {
        "input_ids": ids,
        "labels": labels,
        "position_ids": pos,
        "document_id": doc_id,
        "seq_lengths": seq,
        "source_index": src,
        "num_tokens": sum(real),
        "num_loss_tokens": int((labels != IGNORE).sum()),
        "side": side,
    }
    if multiple > 1:
        row[schema.UNPADDED_COLUMN] = real
    return row


def pair_docs(pairs, members):
    """The documents of pairs `members`, in row order: chosen, rejected, chosen, rejected, ..."""
    out = []
    for j in members:
        for s, (ids, labels) in enumerate(sides(pairs[j])):
            out.append((ids, labels, j, s))
    return out


def write_pair_pack(
    folder,
    pairs,
    pack_len: int,
    *,
    rows: list[list[int]] | None = None,
    rows_per_shard: int = 4,
    multiple: int = 1,
    max_docs: int = 0,
    restart: bool = True,
    docs_of=pair_docs,
) -> list[dict]:
    """Write `pairs` as a preference pack into `folder` (rows: lists of pair indices, default
    first-fit); returns the rows. `docs_of(pairs, members)` gives a row's documents (a test may
    break the layout through it)."""
    folder = Path(folder)
    (folder / schema.DATA_DIR).mkdir(parents=True, exist_ok=True)
    rows = rows if rows is not None else plan_pair_rows(pairs, pack_len, multiple)
    built = [
        build_pair_row(
            docs_of(pairs, m), pack_len, multiple=multiple, max_docs=max_docs, restart=restart
        )
        for m in rows
    ]
    arrow = schema.arrow_schema(pack_len, padded=multiple > 1).append(SIDE)
    n_shards = max(1, -(-len(built) // rows_per_shard))
    shards = []
    for s in range(n_shards):
        part = built[s * rows_per_shard : (s + 1) * rows_per_shard]
        cols = {}
        for f in arrow:
            values = [r[f.name] for r in part]
            if f.name in schema.TOKEN_COLUMNS:
                flat = pa.array(np.concatenate(values), pa.int32())
                cols[f.name] = pa.FixedSizeListArray.from_arrays(flat, pack_len)
            else:
                cols[f.name] = pa.array(values, f.type)
        name = schema.shard_name(s, n_shards)
        path = folder / schema.DATA_DIR / name
        pq.write_table(pa.table(cols, schema=arrow), path, compression="zstd")
        shards.append(
            {
                "file": f"{schema.DATA_DIR}/{name}",
                "rows": len(part),
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            }
        )
    manifest = {
        "schema_version": schema.SCHEMA_VERSION,
        "task": "preference",
        "pack_len": pack_len,
        "counts": {"rows": len(built)},
        "preference": {"pairs": sum(len(m) for m in rows)},
        "pad_id": PAD_ID,
        "tokenizer": {"pad_id": PAD_ID},
        "shards": shards,
    }
    if multiple > 1:
        manifest["pad_to_multiple"] = multiple
    if max_docs:
        manifest.update(max_docs=max_docs, fixed_docs=True)
    (folder / schema.MANIFEST).write_text(json.dumps(manifest, indent=1))
    return built
