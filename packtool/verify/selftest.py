"""`packtool verify --self-test`: build a small pack in a temporary folder, then verify it.

The pack is made of synthetic chat-like documents (a masked prompt, then a completion that
carries loss), so CI jobs without shards at hand exercise the very same checks. When the real
packer (`packtool.packer`) is importable it writes the pack; otherwise a minimal writer here does
(`write_pack`), which the tests also use to build deliberately broken shards.

    doc  = [p p p p c c c]           labels = [-100 -100 -100 -100 c c c]
    row  = doc0 doc1 ... pad         first label of each document forced to -100
"""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np

from packtool import schema

SELF_TEST_PAD_ID = 0


def make_documents(n: int, *, seed: int = 0, min_len: int = 8, max_len: int = 200, vocab: int = 5000):
    """n documents as (input_ids, labels) int32 arrays; ids avoid the pad id 0."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        ids = rng.integers(1, vocab, size=length, dtype=np.int64).astype(np.int32)
        labels = ids.copy()
        prompt = int(rng.integers(1, max(2, length // 2)))
        labels[:prompt] = schema.IGNORE_INDEX
        docs.append((ids, labels))
    return docs


def pack_documents(docs, pack_len: int, pad_id: int = SELF_TEST_PAD_ID, max_docs: int | None = None) -> dict:
    """First-fit in input order (small, obviously correct; not the production packer).

    Returns the columns of schema v1 as numpy arrays / lists of arrays, rows in open order."""
    rows: list[list[int]] = []
    room: list[int] = []
    for i, (ids, _) in enumerate(docs):
        n = len(ids)
        if n > pack_len:
            raise ValueError(f"document {i} has {n} tokens > pack_len {pack_len}")
        for r, free in enumerate(room):
            if free >= n and (max_docs is None or len(rows[r]) < max_docs):
                rows[r].append(i)
                room[r] -= n
                break
        else:
            rows.append([i])
            room.append(pack_len - n)
    R = len(rows)
    cols = {c: np.empty((R, pack_len), np.int32) for c in schema.TOKEN_COLUMNS}
    seq, src, ntok, nloss = [], [], np.zeros(R, np.int32), np.zeros(R, np.int32)
    for r, members in enumerate(rows):
        ids = np.concatenate([docs[i][0] for i in members])
        lab = np.concatenate([docs[i][1] for i in members]).copy()
        lens = np.array([len(docs[i][0]) for i in members], np.int32)
        starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
        lab[starts] = schema.IGNORE_INDEX
        n = int(lens.sum())
        pad = pack_len - n
        cols["input_ids"][r] = np.concatenate((ids, np.full(pad, pad_id, np.int32)))
        cols["labels"][r] = np.concatenate((lab, np.full(pad, schema.IGNORE_INDEX, np.int32)))
        cols["position_ids"][r] = np.concatenate([np.arange(k) for k in lens] + [np.arange(pad)])
        cols["document_id"][r] = np.concatenate((np.repeat(np.arange(len(members)), lens), np.full(pad, -1)))
        seq.append(lens)
        src.append(np.array(members, np.int64))
        ntok[r] = n
        nloss[r] = int((lab != schema.IGNORE_INDEX).sum())
    cols["seq_lengths"], cols["source_index"] = seq, src
    cols["num_tokens"], cols["num_loss_tokens"] = ntok, nloss
    return cols


def rows_table(cols: dict, pack_len: int, start: int = 0, stop: int | None = None, arrow_schema=None):
    """A pyarrow Table of rows [start, stop) of `cols` in schema v1 (or `arrow_schema`)."""
    import pyarrow as pa

    sch = arrow_schema or schema.arrow_schema(pack_len)
    stop = len(cols["num_tokens"]) if stop is None else stop
    arrays = []
    for f in sch:
        c = cols[f.name]
        if f.name in schema.TOKEN_COLUMNS or f.name in schema.FORBIDDEN_COLUMNS:
            flat = pa.array(np.ascontiguousarray(c[start:stop]).reshape(-1), type=f.type.value_type)
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, pack_len))
        elif f.name in schema.LIST_COLUMNS:
            part = c[start:stop]
            offsets = np.concatenate(([0], np.cumsum([len(x) for x in part]))).astype(np.int32)
            values = np.concatenate(part) if part else np.zeros(0)
            arrays.append(pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type=f.type.value_type)))
        else:
            arrays.append(pa.array(np.asarray(c[start:stop]), type=f.type))
    return pa.Table.from_arrays(arrays, schema=sch)


def sha256_bytes_of(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def write_pack(out: str, cols: dict, pack_len: int, *, shard_rows: int = 1000, pad_id: int = SELF_TEST_PAD_ID,
               examples_read: int | None = None, extra: dict | None = None, compression: str = "zstd") -> dict:
    """Write `cols` as schema-v1 shards plus a manifest with the contract's keys. Returns the manifest."""
    import pyarrow.parquet as pq

    R = len(cols["num_tokens"])
    n_shards = max(1, -(-R // shard_rows))
    os.makedirs(os.path.join(out, schema.DATA_DIR), exist_ok=True)
    shards = []
    for s in range(n_shards):
        rel = f"{schema.DATA_DIR}/{schema.shard_name(s, n_shards)}"
        lo, hi = s * shard_rows, min(R, (s + 1) * shard_rows)
        pq.write_table(rows_table(cols, pack_len, lo, hi), os.path.join(out, rel), compression=compression,
                       row_group_size=4096)
        shards.append({"file": rel, "rows": hi - lo, "sha256": sha256_bytes_of(os.path.join(out, rel))})
    docs = int(sum(len(x) for x in cols["seq_lengths"]))
    packed = int(np.unique(np.concatenate(cols["source_index"])).size) if R else 0
    tok_out = int(np.asarray(cols["num_tokens"], np.int64).sum())
    loss_out = int(np.asarray(cols["num_loss_tokens"], np.int64).sum())
    read = packed if examples_read is None else examples_read
    manifest = {
        "schema_version": schema.SCHEMA_VERSION,
        "packtool_version": "self-test",
        "pack_len": pack_len,
        "strategy": "first-fit",
        "order": "input",
        "max_docs": 0,
        "overflow": "drop",
        "shuffle": False,
        "seed": 0,
        "shard_rows": shard_rows,
        "pad_id": pad_id,
        "tokenizer": {"name": "synthetic", "vocab_size": None, "pad_id": pad_id, "eos_id": None},
        "options": {},
        "format": "synthetic",
        "sources": [],
        "counts": {"examples_read": read, "skipped": read - packed, "tokenized": packed, "packed": packed,
                   "truncated": 0, "split": 0, "split_parts": 0, "dropped": 0, "documents": docs, "rows": R},
        "skipped": [{"source_index": -1, "file": "synthetic", "line": None, "reason": "synthetic"}] * (read - packed),
        "dropped": [],
        "truncated": [],
        "split": [],
        "tokens": {"in": tok_out, "out": tok_out, "cut": 0, "loss_in": loss_out, "loss_out": loss_out,
                   "loss_first_token": 0, "loss_cut": 0, "pad": R * pack_len - tok_out},
        "fill": tok_out / max(1, R * pack_len),
        "lower_bound_rows": -(-tok_out // pack_len),
        "docs_per_row": {},
        "shards": shards,
    }
    if extra:
        manifest.update(extra)
    with open(os.path.join(out, schema.MANIFEST), "w") as f:
        json.dump(manifest, f, indent=2)
    return manifest


def synthetic_rows(n_rows: int, pack_len: int, *, seed: int = 0, mean_len: int = 600, vocab: int = 150_000,
                   pad_id: int = SELF_TEST_PAD_ID) -> dict:
    """Valid rows built with whole-array numpy (for speed measurements of 100M tokens).

    Every row holds documents of random lengths (about `mean_len`) and a random pad tail."""
    rng = np.random.default_rng(seed)
    L = pack_len
    per_row = max(1, L // mean_len)
    lens = rng.integers(1, 2 * mean_len, size=(n_rows, per_row)).astype(np.int64)
    lens = np.minimum(lens, L // per_row)  # each row's total stays <= L
    ntok = lens.sum(axis=1)
    n = n_rows * L
    flat_start = (np.arange(n_rows)[:, None] * L + np.concatenate(
        (np.zeros((n_rows, 1), np.int64), np.cumsum(lens, axis=1)[:, :-1]), axis=1)).reshape(-1)
    pad_start = np.arange(n_rows) * L + ntok
    pad_start = pad_start[ntok < L]
    seg = np.zeros(n, np.int64)
    seg[flat_start] = flat_start
    seg[pad_start] = pad_start
    np.maximum.accumulate(seg, out=seg)
    pos = (np.arange(n) - seg).astype(np.int32).reshape(n_rows, L)
    del seg
    mark = np.zeros(n, np.int32)
    mark[flat_start] = 1
    cov = np.arange(L)[None, :] < ntok[:, None]
    doc = (np.cumsum(mark).reshape(n_rows, L) - (np.arange(n_rows) * per_row)[:, None] - 1).astype(np.int32)
    doc[~cov] = -1
    ids = rng.integers(1, vocab, size=(n_rows, L), dtype=np.int32)
    ids[~cov] = pad_id
    lab = ids.copy()
    lab[(pos < 4) | ~cov] = schema.IGNORE_INDEX  # doc starts (and a short prompt) carry no loss
    return {
        "input_ids": ids, "labels": lab, "position_ids": pos, "document_id": doc,
        "seq_lengths": list(lens.astype(np.int32)),
        "source_index": list(np.arange(n_rows * per_row, dtype=np.int64).reshape(n_rows, per_row)),
        "num_tokens": ntok.astype(np.int32),
        "num_loss_tokens": (lab != schema.IGNORE_INDEX).sum(axis=1).astype(np.int32),
    }


def build_self_test_pack(out: str, *, pack_len: int = 1024, n_docs: int = 160, seed: int = 0) -> str:
    """Write a pack of synthetic documents into `out`; returns which writer made it."""
    docs = make_documents(n_docs, seed=seed, min_len=8, max_len=pack_len // 3)
    try:
        from packtool.data import TokenizedData
        from packtool.packer import PackConfig, pack_tokenized
    except ImportError:  # the production packer is not part of this install: our small writer
        write_pack(out, pack_documents(docs, pack_len), pack_len, shard_rows=16)
        return "selftest.write_pack (first-fit)"
    td = TokenizedData.from_lists([d[0].tolist() for d in docs], [d[1].tolist() for d in docs],
                                  tokenizer={"name": "synthetic", "pad_id": SELF_TEST_PAD_ID}, format="synthetic")
    pack_tokenized(td, PackConfig(pack_len=pack_len, shard_rows=16, seed=seed), out)
    return "packtool.packer (bfd)"


def read_shard(pack: str, index: int = 0):
    """(relative path, table) of the index-th shard of `pack`."""
    import pyarrow.parquet as pq

    rel = f"{schema.DATA_DIR}/{sorted(os.listdir(os.path.join(pack, schema.DATA_DIR)))[index]}"
    return rel, pq.read_table(os.path.join(pack, rel))


def token_column(table, name: str) -> np.ndarray:
    """A copy of a fixed-size-list column as an (R, L) int32 array."""
    L = table.schema.field(name).type.list_size
    return table.column(name).combine_chunks().flatten().to_numpy().reshape(-1, L).copy()


def replace_columns(table, **cols):
    """`table` with token columns replaced by (R, L) arrays and list columns by lists of arrays."""
    import pyarrow as pa

    for name, value in cols.items():
        i = table.schema.get_field_index(name)
        f = table.schema.field(name)
        if name in schema.LIST_COLUMNS:
            arr = pa.array([list(map(int, x)) for x in value], type=f.type)
        elif name in schema.SCALAR_COLUMNS:
            arr = pa.array(np.asarray(value), type=f.type)
        else:
            L = f.type.list_size
            arr = pa.FixedSizeListArray.from_arrays(pa.array(np.asarray(value, np.int32).reshape(-1), pa.int32()), L)
        table = table.set_column(i, f, arr)
    return table


def write_shard(pack: str, rel: str, table, *, fix_manifest: bool = True) -> None:
    """Overwrite shard `rel` with `table`; with fix_manifest, record its new rows and sha256 so that
    only the deliberate change is left for verify to find."""
    import json

    import pyarrow.parquet as pq

    path = os.path.join(pack, rel)
    pq.write_table(table, path, compression="zstd")
    if fix_manifest:
        mpath = os.path.join(pack, schema.MANIFEST)
        with open(mpath) as f:
            m = json.load(f)
        for s in m["shards"]:
            if s["file"] == rel:
                s["sha256"] = sha256_bytes_of(path)
                s["rows"] = table.num_rows
        with open(mpath, "w") as f:
            json.dump(m, f, indent=2)


def _break_positions(src: str, dst: str) -> None:
    """Copy the pack at `src` to `dst` with row 0 of the first shard's positions counting on
    across documents (the classic packing bug)."""
    import shutil

    shutil.copytree(src, dst)
    rel, table = read_shard(dst, 0)
    pos = token_column(table, "position_ids")
    pos[0] = np.arange(pos.shape[1])
    write_shard(dst, rel, replace_columns(table, position_ids=pos))


def run_self_test(cfg):
    """Build a pack in a temporary folder, verify it with `cfg` (path ignored), and check that the
    integrity layer catches a deliberately broken copy. Returns the VerifyResult."""
    import dataclasses
    import tempfile
    import time

    from packtool.verify import Check
    from packtool.verify import integrity as integ
    from packtool.verify.run import verify

    with tempfile.TemporaryDirectory(prefix="packtool-selftest-") as tmp:
        out = os.path.join(tmp, "pack")
        t0 = time.perf_counter()
        writer = build_self_test_pack(out, seed=cfg.seed)
        built = time.perf_counter() - t0
        result = verify(dataclasses.replace(cfg, path=out))
        broken = os.path.join(tmp, "broken")
        _break_positions(out, broken)
        checks, _ = integ.check_integrity(broken)
        pos = next(c for c in checks if c.name == integ.POS)
        caught = not pos.passed and " row 0 " in pos.message
        result.checks.insert(0, Check("self-test pack", True, f"built with {writer} in {built:.2f} s",
                                      {"writer": writer}))
        result.checks.append(Check("self-test: broken copy caught", caught,
                                   f"positions not reset in row 0 → {pos.message}" if caught else
                                   "a copy with positions not reset in row 0 PASSED the position check: "
                                   "integrity has no power", {"check": integ.POS}))
    result.self_test = True
    result.path = "(self-test)"
    return result
