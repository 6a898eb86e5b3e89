"""Fixture packs for the torch tests: a small independent writer of schema v1 (so loader tests do
not depend on the real packer), and the same documents packed by the real packer."""

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

# --------------------------------------------------------------------------------------------------
# A small schema-v1 writer for fixtures (independent of packtool's own packer)
# --------------------------------------------------------------------------------------------------


def make_docs(n: int, *, seed: int = 0, min_len: int = 2, max_len: int = 20, vocab: int = 64):
    """n (input_ids, labels) documents: a random prompt (-100) then the answer (label = token)."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        ids = rng.integers(1, vocab, size=length).astype(np.int32)
        labels = ids.copy()
        labels[: int(rng.integers(1, length))] = IGNORE  # prompt, and always the first token
        docs.append((ids, labels))
    return docs


def plan_rows(lengths, pack_len: int) -> list[list[int]]:
    """First-fit in input order: a list of rows, each a list of document indices."""
    rows: list[list[int]] = []
    free: list[int] = []
    for i, n in enumerate(lengths):
        if n > pack_len:
            raise ValueError(f"document {i} has {n} tokens > pack_len {pack_len}")
        for r, space in enumerate(free):
            if n <= space:
                rows[r].append(i)
                free[r] -= n
                break
        else:
            rows.append([i])
            free.append(pack_len - n)
    return rows


def build_row(docs, members, pack_len: int, pad_id: int = PAD_ID) -> dict:
    ids = np.full(pack_len, pad_id, np.int32)
    labels = np.full(pack_len, IGNORE, np.int32)
    pos = np.zeros(pack_len, np.int32)
    doc_id = np.full(pack_len, schema.PAD_DOCUMENT_ID, np.int32)
    at = 0
    for k, i in enumerate(members):
        d_ids, d_labels = docs[i]
        n = len(d_ids)
        ids[at : at + n] = d_ids
        labels[at : at + n] = d_labels
        labels[at] = IGNORE  # every document's first token
        pos[at : at + n] = np.arange(n)
        doc_id[at : at + n] = k
        at += n
    pos[at:] = np.arange(pack_len - at)  # the pad tail counts as its own segment
    return {
        "input_ids": ids,
        "labels": labels,
        "position_ids": pos,
        "document_id": doc_id,
        "seq_lengths": [len(docs[i][0]) for i in members],
        "source_index": list(members),
        "num_tokens": at,
        "num_loss_tokens": int((labels != IGNORE).sum()),
    }


def write_pack(
    folder,
    docs,
    pack_len: int,
    *,
    rows_per_shard: int = 8,
    pad_id: int = PAD_ID,
    rows: list[list[int]] | None = None,
) -> list[dict]:
    """Write `docs` as a schema-v1 pack into `folder`; returns the rows as dicts of numpy arrays."""
    folder = Path(folder)
    (folder / schema.DATA_DIR).mkdir(parents=True, exist_ok=True)
    rows = rows if rows is not None else plan_rows([len(d[0]) for d in docs], pack_len)
    built = [build_row(docs, m, pack_len, pad_id) for m in rows]
    arrow = schema.arrow_schema(pack_len)
    n_shards = max(1, -(-len(built) // rows_per_shard))
    shards = []
    for s in range(n_shards):
        part = built[s * rows_per_shard : (s + 1) * rows_per_shard]
        cols = {}
        for f in arrow:
            values = [r[f.name] for r in part]
            if f.name in schema.TOKEN_COLUMNS:
                flat = pa.array(
                    np.concatenate(values) if values else np.zeros(0, np.int32), pa.int32()
                )
                cols[f.name] = pa.FixedSizeListArray.from_arrays(flat, pack_len)
            else:
                cols[f.name] = pa.array(values, f.type)
        name = schema.shard_name(s, n_shards)
        path = folder / schema.DATA_DIR / name
        pq.write_table(pa.table(cols, schema=arrow), path, compression="zstd", row_group_size=5)
        shards.append(
            {
                "file": f"{schema.DATA_DIR}/{name}",
                "rows": len(part),
                "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            }
        )
    manifest = {
        "schema_version": schema.SCHEMA_VERSION,
        "pack_len": pack_len,
        "counts": {"rows": len(built), "packed": sum(len(m) for m in rows)},
        "pad_id": pad_id,
        "tokenizer": {"pad_id": pad_id},
        "shards": shards,
    }
    (folder / schema.MANIFEST).write_text(json.dumps(manifest, indent=1))
    return built


def real_pack(folder, docs, pack_len: int, **options):
    """The same documents packed by packtool's own planner and shard writer (`packtool pack`)."""
    from packtool.data.tokenized import TokenizedData
    from packtool.pack import PackConfig, pack_tokenized

    data = TokenizedData.from_lists(
        [ids.tolist() for ids, _ in docs],
        [lab.tolist() for _, lab in docs],
        tokenizer={"pad_id": PAD_ID, "eos_id": 1},
    )
    return pack_tokenized(data, PackConfig(pack_len=pack_len, **options), folder)


def merge_first_two(table, keep_source: bool):
    """Damage for verify tests: in the first row with >= 2 documents, documents 0 and 1 merged into
    one, with lengths, document_id and positions made consistent (and source_index too unless
    `keep_source`). Returns (row, its source indices before, len 0, len 1, the damaged table)."""
    from packtool.verify import selftest as st

    seq = table.column("seq_lengths").to_pylist()
    r = next(i for i, s in enumerate(seq) if len(s) >= 2)
    src = table.column("source_index").to_pylist()
    a, b = seq[r][0], seq[r][1]
    seq[r] = [a + b, *seq[r][2:]]
    doc, pos = st.token_column(table, "document_id"), st.token_column(table, "position_ids")
    doc[r][doc[r] >= 1] -= 1
    pos[r, a : a + b] = np.arange(a, a + b)
    merged_src = list(src[r])
    if not keep_source:
        src[r] = [src[r][0], *src[r][2:]]
    cols = dict(seq_lengths=seq, document_id=doc, position_ids=pos, source_index=src)
    return r, merged_src, a, b, st.replace_columns(table, **cols)


def model_samples(rows: int = 2, lens=(24, 17, 9), pack_len: int = 56):
    """Rows for verify --model's checks (verify.sampling.Sample): random ids, every token trained
    but the pad tail, positions restarting at each of `lens`' documents."""
    from packtool.verify.sampling import Sample

    rng = np.random.default_rng(3)
    out = []
    for r in range(rows):
        ids = rng.integers(0, 5000, pack_len).astype(np.int32)
        labels = ids.copy()
        labels[sum(lens) :] = schema.IGNORE_INDEX
        pos = schema.position_ids(list(lens), pack_len).astype(np.int32)
        out.append(Sample("s", r, ids, labels, pos, np.array(lens)))
    return out
