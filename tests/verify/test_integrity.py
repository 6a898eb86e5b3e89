"""Integrity layer end to end: clean packs pass every check, and the scan's speed (the row scan
itself is tests/verify/test_scan.py; the files test_audit.py; the accounting test_accounting.py;
the isolation sample test_sampling.py). Fixtures: tests/verify/conftest.py."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from packtool import schema
from packtool.io.files import sha256_file
from packtool.verify import scan
from packtool.verify import selftest as st

L = 128


# ---------------------------------------------------------------------------------------------
# clean packs


def test_clean_pack_passes_every_check(clean_pack, checks_of):
    by_name, summary = checks_of(clean_pack)
    assert all(c.passed for c in by_name.values()), [
        c.message for c in by_name.values() if not c.passed
    ]
    for name in (
        *scan.ROW_CHECKS,
        scan.SCHEMA,
        scan.NO_MASK,
        scan.SHARDS,
        scan.SRC,
        scan.COUNTS,
        scan.CONSERVE,
    ):
        assert name in by_name
    assert summary["rows"] == by_name[scan.COUNTS].evidence["rows"] > 0


def test_real_packer_packs_pass(tmp_path, failed_of):
    """Every --overflow mode of the production packer passes, split parts included."""
    pytest.importorskip("datasets")
    from packtool.data.tokenized import TokenizedData
    from packtool.pack import PackConfig, pack_tokenized

    docs = st.make_documents(80, seed=2, min_len=4, max_len=300)
    td = TokenizedData.from_lists(
        [d[0].tolist() for d in docs],
        [d[1].tolist() for d in docs],
        tokenizer={"name": "t", "pad_id": 0},
    )
    for overflow in ("drop", "truncate", "split"):
        out = tmp_path / overflow
        pack_tokenized(td, PackConfig(pack_len=L, overflow=overflow, shard_rows=20), str(out))
        failed = failed_of(out)
        assert not failed, (overflow, [c.message for c in failed.values()])


# ---------------------------------------------------------------------------------------------
# speed


def _synthetic_rows(
    n_rows: int, pack_len: int, *, seed: int = 0, mean_len: int = 600, vocab: int = 150_000
):
    """Valid rows built with whole-array numpy, as `packtool.io.shards.rows_table` arguments (the
    packer would take minutes for 100M tokens): documents of random lengths, a random pad tail."""
    rng = np.random.default_rng(seed)
    per_row = max(1, pack_len // mean_len)
    lens = np.minimum(rng.integers(1, 2 * mean_len, size=(n_rows, per_row)), pack_len // per_row)
    ntok = lens.sum(axis=1)
    cs = np.concatenate((np.zeros((n_rows, 1), np.int64), np.cumsum(lens, axis=1)), axis=1)
    slot = np.arange(pack_len)[None, None, :]
    in_doc = (slot >= cs[:, :-1, None]) & (slot < cs[:, 1:, None])  # (rows, docs, L)
    cov = in_doc.any(axis=1)
    doc = np.where(cov, in_doc.argmax(axis=1), -1).astype(np.int32)
    start = np.where(cov, np.take_along_axis(cs[:, :-1], np.maximum(doc, 0), axis=1), ntok[:, None])
    pos = (np.arange(pack_len)[None, :] - start).astype(np.int32)
    ids = rng.integers(1, vocab, size=(n_rows, pack_len), dtype=np.int32)
    ids[~cov] = 0
    lab = ids.copy()
    lab[(pos < 4) | ~cov] = schema.IGNORE_INDEX  # doc starts (and a short prompt) carry no loss
    return dict(
        input_ids=ids,
        labels=lab,
        position_ids=pos,
        document_id=doc,
        seq_offsets=np.arange(0, n_rows * per_row + 1, per_row),
        seq_lengths=lens.reshape(-1),
        source_index=np.arange(n_rows * per_row),
        num_tokens=ntok,
        num_loss_tokens=(lab != schema.IGNORE_INDEX).sum(axis=1),
    )


def _write_synthetic_pack(out, n_rows: int, pack_len: int, chunk: int = 2_000) -> None:
    import pyarrow.parquet as pq

    from packtool.io import shards

    rel = f"{schema.DATA_DIR}/{schema.shard_name(0, 1)}"
    os.makedirs(out / schema.DATA_DIR)
    writer = pq.ParquetWriter(
        str(out / rel), schema.arrow_schema(pack_len), **shards.writer_options()
    )
    src0 = tok = loss = 0
    for r0 in range(0, n_rows, chunk):
        cols = _synthetic_rows(min(chunk, n_rows - r0), pack_len, seed=r0)
        cols["source_index"] += src0
        src0 += cols["source_index"].size
        tok += int(cols["num_tokens"].sum())
        loss += int(cols["num_loss_tokens"].sum())
        writer.write_table(shards.rows_table(**cols), row_group_size=1024)
    writer.close()
    m = {
        "schema_version": 1,
        "pack_len": pack_len,
        "pad_id": 0,
        "tokenizer": {"pad_id": 0, "vocab_size": 150_000},  # _synthetic_rows' ids are below it
        "counts": {
            "examples_read": src0,
            "skipped": 0,
            "tokenized": src0,
            "packed": src0,
            "truncated": 0,
            "split": 0,
            "split_parts": 0,
            "dropped": 0,
            "documents": src0,
            "rows": n_rows,
        },
        "skipped": [],
        "dropped": [],
        "truncated": [],
        "split": [],
        "tokens": {
            "in": tok,
            "out": tok,
            "cut": 0,
            "loss_out": loss,
            "pad": n_rows * pack_len - tok,
        },
        "shards": [{"file": rel, "rows": n_rows, "sha256": sha256_file(out / rel)}],
    }
    (out / schema.MANIFEST).write_text(json.dumps(m))


@pytest.mark.slow
def test_scan_speed_100m_tokens(tmp_path, checks_of):
    """100M token slots (24,415 rows x 4096, zstd) scanned in < 60 s; measured ~5 s on 2 cores."""
    import time

    n_rows, pack_len = 24_415, 4096
    out = tmp_path / "big"
    _write_synthetic_pack(out, n_rows, pack_len)
    t = time.perf_counter()
    by_name, summary = checks_of(out)
    seconds = time.perf_counter() - t
    assert all(c.passed for c in by_name.values()), [
        c.message for c in by_name.values() if not c.passed
    ]
    assert summary["rows"] * pack_len >= 100_000_000
    print(f"\nintegrity: {summary['rows'] * pack_len / 1e6:.1f}M token slots in {seconds:.1f} s")
    assert seconds < 60
