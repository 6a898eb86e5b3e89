"""The pack pipeline end to end: shards read back and checked against every invariant of docs/ARCHITECTURE.md ("Schema", "Semantics")."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from invariants import check_pack, find_problems  # noqa: E402
from paths import ROOT

from packtool.data.tokenized import (
    SkippedRecord,  # noqa: E402
    TokenizedData,  # noqa: E402
)
from packtool.errors import PacktoolError, UsageError  # noqa: E402
from packtool.io import shards  # noqa: E402
from packtool.pack import PackConfig, pack_tokenized  # noqa: E402


def examples(n=300, max_len=70, seed=0):
    rng = np.random.default_rng(seed)
    ids, labels = [], []
    for _ in range(n):
        k = int(rng.integers(0, max_len))
        tok = rng.integers(0, 5000, k)
        loss = rng.random(k) < 0.6
        ids.append(tok.tolist())
        labels.append(np.where(loss, tok, -100).tolist())
    return ids, labels


def chunked_data(ids, labels, chunks=4, offset=3, permute_seed=None, **kw):
    """Same examples, stored as a sliced multi-chunk Arrow table (and optionally behind a select())."""
    import datasets

    pad_ids, pad_labels = [[1, 2, 3]] * offset + ids, [[-100, 2, 3]] * offset + labels
    full = TokenizedData.from_lists(pad_ids, pad_labels).table.slice(offset)
    bounds = np.linspace(0, len(ids), chunks + 1).astype(int)
    table = pa.concat_tables([full.slice(a, b - a) for a, b in itertools.pairwise(bounds)])
    table = table.set_column(4, "source_index", pa.array(np.arange(len(ids)), pa.int64()))
    assert table.column("input_ids").num_chunks == chunks
    ds = datasets.Dataset(table)
    lengths = np.array([len(x) for x in ids], np.int32)
    loss = np.array([sum(v != -100 for v in lab) for lab in labels], np.int32)
    src = np.arange(len(ids), dtype=np.int64)
    if permute_seed is not None:
        perm = np.random.default_rng(permute_seed).permutation(len(ids))
        ds = ds.select(perm)
        lengths, loss, src = lengths[perm], loss[perm], src[perm]
    kw.setdefault("num_read", len(ids))
    return TokenizedData(table=ds, lengths=lengths, loss_counts=loss, source_index=src, **kw)


@pytest.fixture(scope="module")
def data():
    ids, labels = examples()
    return TokenizedData.from_lists(
        ids,
        labels,
        tokenizer={"name": "toy", "pad_id": 7, "eos_id": 3},
        options={"train_on": "assistant"},
        format="messages",
    )


GRID = list(
    itertools.product(["bfd", "ffd"], ["sorted", "random"], [0, 2], ["drop", "truncate", "split"])
)


@pytest.mark.parametrize("strategy, order, max_docs, overflow", GRID)
def test_invariants_over_grid(tmp_path, data, strategy, order, max_docs, overflow):
    cfg = PackConfig(
        pack_len=32,
        strategy=strategy,
        order=order,
        max_docs=max_docs,
        overflow=overflow,
        seed=5,
        shard_rows=40,
    )
    result = pack_tokenized(data, cfg, tmp_path / "out")
    m = check_pack(tmp_path / "out", source=data)
    assert m == result.manifest
    assert m["pad_id"] == 7 and m["pad_id_from"] == "tokenizer pad_id"
    assert len(m["shards"]) == -(-m["counts"]["rows"] // 40)
    c = m["counts"]
    if overflow == "drop":
        assert c["truncated"] == c["split"] == 0 and c["dropped"] > 1
    elif overflow == "truncate":
        assert c["truncated"] > 0 and m["tokens"]["cut"] > 0 and c["split"] == 0
    else:
        assert c["split"] > 0 and c["split_parts"] > c["split"] and m["tokens"]["cut"] == 0
    assert [d["reason"] for d in m["dropped"]].count("empty") == int((data.lengths == 0).sum())


def test_manifest_keys_and_accounting(tmp_path, data):
    skipped = [SkippedRecord(source_index=300, file="x.jsonl", line=301, reason="no messages")]
    d = TokenizedData(
        table=data.table,
        lengths=data.lengths,
        loss_counts=data.loss_counts,
        source_index=data.source_index,
        num_read=301,
        skipped=skipped,
        tokenizer=data.tokenizer,
        options=data.options,
        format="messages",
    )
    m = pack_tokenized(d, PackConfig(pack_len=32, overflow="truncate"), tmp_path / "o").manifest
    assert list(m) == [
        "schema_version",
        "packtool_version",
        "pack_len",
        "strategy",
        "order",
        "max_docs",
        "overflow",
        "shuffle",
        "seed",
        "shard_rows",
        "pad_id",
        "pad_id_from",
        "tokenizer",
        "tokenizer_backend",
        "options",
        "format",
        "sources",
        "counts",
        "skipped",
        "dropped",
        "truncated",
        "split",
        "tokens",
        "fill",
        "lower_bound_rows",
        "docs_per_row",
        "shards",
    ]
    assert list(m["counts"]) == [
        "examples_read",
        "skipped",
        "tokenized",
        "packed",
        "truncated",
        "split",
        "split_parts",
        "dropped",
        "documents",
        "rows",
    ]
    assert set(m["tokens"]) >= {"in", "out", "cut", "loss_in", "loss_out", "pad"}
    assert m["counts"]["examples_read"] == 301 and m["skipped"][0]["reason"] == "no messages"
    t = m["tokens"]
    assert t["in"] == int(data.lengths.sum()) == t["out"] + t["cut"]
    assert t["cut"] == sum(x["cut"] for x in m["truncated"]) + sum(
        x["length"] for x in m["dropped"]
    )
    assert set(m["shards"][0]) >= {"file", "rows", "sha256"}
    assert m["docs_per_row"]["histogram"] and m["fill"] > 0.9
    check_pack(tmp_path / "o", source=d)


@pytest.mark.parametrize("permute", [None, 11])
def test_chunked_sliced_and_selected_input(tmp_path, permute):
    ids, labels = examples(n=200, max_len=40, seed=3)
    d = chunked_data(ids, labels, chunks=5, offset=3, permute_seed=permute, tokenizer={"eos_id": 9})
    m = pack_tokenized(
        d, PackConfig(pack_len=24, overflow="split", shard_rows=16), tmp_path / "o"
    ).manifest
    assert m["pad_id"] == 9 and m["pad_id_from"] == "tokenizer eos_id"
    check_pack(tmp_path / "o", source=d)


def test_deterministic_byte_identical(tmp_path, data):
    cfg = PackConfig(pack_len=32, order="random", overflow="split", seed=3, shard_rows=30)
    pack_tokenized(data, cfg, tmp_path / "a")
    pack_tokenized(data, cfg, tmp_path / "b")
    files = sorted(
        p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*") if p.is_file()
    )
    assert len(files) > 3
    for f in files:
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes(), f
    pack_tokenized(
        data,
        PackConfig(pack_len=32, order="random", overflow="split", seed=4, shard_rows=30),
        tmp_path / "c",
    )
    assert (tmp_path / "a/manifest.json").read_bytes() != (
        tmp_path / "c/manifest.json"
    ).read_bytes()


def test_shuffle_and_no_shuffle(tmp_path, data):
    import pyarrow.parquet as pq

    def first_lengths(out):
        t = pq.read_table(sorted((out / "data").glob("*.parquet"))[0])
        return [x[0] for x in t.column("seq_lengths").to_pylist()]

    pack_tokenized(data, PackConfig(pack_len=64, shuffle=False), tmp_path / "ns")
    pack_tokenized(data, PackConfig(pack_len=64), tmp_path / "s")
    ns, s = first_lengths(tmp_path / "ns"), first_lengths(tmp_path / "s")
    assert ns == sorted(ns, reverse=True)  # BFD order: longest first documents first
    assert s != sorted(s, reverse=True) and sorted(s) == sorted(ns)


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_atomic_failure_mid_write_leaves_nothing(tmp_path, data, monkeypatch, exc):
    calls = {"n": 0}
    real = shards.ShardWriter.write

    def flaky(self, table):
        calls["n"] += 1
        if calls["n"] == 3:
            raise exc("disk on fire")
        real(self, table)

    monkeypatch.setattr(shards.ShardWriter, "write", flaky)
    with pytest.raises(exc, match="disk on fire"):
        pack_tokenized(data, PackConfig(pack_len=32, shard_rows=10), tmp_path / "out")
    assert calls["n"] >= 3  # a second writer thread may have been mid-write
    assert list(tmp_path.iterdir()) == []


def test_force_replaces_only_after_success(tmp_path, data, monkeypatch):
    out = tmp_path / "out"
    pack_tokenized(data, PackConfig(pack_len=32), out)
    before = (out / "manifest.json").read_bytes()
    with pytest.raises(UsageError, match=r"already exists; use --force"):
        pack_tokenized(data, PackConfig(pack_len=64), out)

    def boom(self, table):
        raise RuntimeError("boom")

    with monkeypatch.context() as mp:
        mp.setattr(shards.ShardWriter, "write", boom)
        with pytest.raises(RuntimeError):
            pack_tokenized(data, PackConfig(pack_len=64, force=True), out)
    assert (out / "manifest.json").read_bytes() == before  # the old pack is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    pack_tokenized(data, PackConfig(pack_len=64, force=True), out)
    assert json.loads((out / "manifest.json").read_text())["pack_len"] == 64
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    check_pack(out, source=data)


def test_force_refuses_a_folder_that_is_not_a_pack(tmp_path, data):
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "thesis.tex").write_text("precious")
    with pytest.raises(
        UsageError, match=r"refusing to replace .*home: it is not empty and holds no manifest\.json"
    ):
        pack_tokenized(data, PackConfig(pack_len=32, force=True), tmp_path / "home")
    assert (tmp_path / "home" / "thesis.tex").read_text() == "precious"


def test_datasets_loads_the_shards(tmp_path, data, monkeypatch):
    import datasets

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    out = tmp_path / "out"
    m = pack_tokenized(data, PackConfig(pack_len=32, shard_rows=25), out).manifest
    cache = str(tmp_path / "hf")
    ds = datasets.load_dataset(str(out), split="train", cache_dir=cache)
    assert len(ds) == m["counts"]["rows"] and "attention_mask" not in ds.column_names
    ds2 = datasets.load_dataset(
        "parquet", data_files=str(out / "data" / "*.parquet"), split="train", cache_dir=cache
    )
    assert ds2.num_rows == ds.num_rows
    row = ds.with_format("numpy")[0]
    assert (
        row["input_ids"].shape == (32,) and row["position_ids"][0] == 0 and row["labels"][0] == -100
    )
    cu = np.concatenate([[0], np.cumsum(row["seq_lengths"])])
    assert cu[-1] == row["num_tokens"]


def test_impossible_inputs(tmp_path, data):
    empty = TokenizedData.from_lists(
        [], [], num_read=4, skipped=[SkippedRecord(i, "f", None, "bad") for i in range(4)]
    )
    with pytest.raises(
        PacktoolError, match=r"nothing to pack: 4 records read, 4 skipped, 0 tokenized"
    ):
        pack_tokenized(empty, PackConfig(pack_len=8), tmp_path / "o")
    long = TokenizedData.from_lists([[1] * 10, [2] * 12], [[1] * 10, [2] * 12])
    with pytest.raises(
        PacktoolError,
        match=r"all 2 examples were dropped \(longest 12 tokens > --len 8\); "
        r"use --overflow truncate\|split",
    ):
        pack_tokenized(long, PackConfig(pack_len=8), tmp_path / "o")
    with pytest.raises(
        PacktoolError,
        match=r"example 0 has 10 tokens > --len 8; use --overflow truncate\|split or raise --len \(2 examples",
    ):
        pack_tokenized(long, PackConfig(pack_len=8, overflow="error"), tmp_path / "o")
    with pytest.raises(UsageError, match=r"--len 1 is too small"):
        pack_tokenized(data, PackConfig(pack_len=1), tmp_path / "o")
    assert list(tmp_path.iterdir()) == []


def test_conservation_is_checked_not_assumed(tmp_path, data):
    lying = TokenizedData(
        table=data.table,
        lengths=data.lengths,
        loss_counts=data.loss_counts,
        source_index=data.source_index,
        num_read=len(data.lengths) + 2,
    )
    with pytest.raises(
        PacktoolError,
        match=r"conservation check failed: examples_read 302 != tokenized 300 \+ skipped 0",
    ):
        pack_tokenized(lying, PackConfig(pack_len=32), tmp_path / "o")
    wrong_loss = TokenizedData(
        table=data.table,
        lengths=data.lengths,
        loss_counts=data.loss_counts + 1,
        source_index=data.source_index,
        num_read=len(data.lengths),
    )
    with pytest.raises(PacktoolError, match=r"loss tokens in \d+ != out"):
        pack_tokenized(wrong_loss, PackConfig(pack_len=32), tmp_path / "o")
    bad_len = data.lengths.copy()
    bad_len[4] += 1
    mismatch = TokenizedData(
        table=data.table,
        lengths=bad_len,
        loss_counts=data.loss_counts,
        source_index=data.source_index,
        num_read=len(data.lengths),
    )
    with pytest.raises(
        PacktoolError, match=r"example 4: input_ids has \d+ entries but its length is \d+"
    ):
        pack_tokenized(mismatch, PackConfig(pack_len=32), tmp_path / "o")
    assert list(tmp_path.iterdir()) == []


def test_checker_catches_corruption(tmp_path, data):
    """The invariant checker itself must fail on a broken pack (else it proves nothing)."""
    import pyarrow.parquet as pq

    out = tmp_path / "o"
    pack_tokenized(data, PackConfig(pack_len=32, shard_rows=1000), out)
    path = out / "data" / "train-00000-of-00001.parquet"
    table = pq.read_table(path)
    pos = table.column("position_ids").combine_chunks()
    flat = pos.flatten().to_numpy().copy()
    flat[40] += 1  # positions not reset somewhere in row 1
    bad = table.set_column(
        2,
        pa.field("position_ids", pos.type, nullable=False),
        pa.FixedSizeListArray.from_arrays(pa.array(flat), 32),
    )
    pq.write_table(bad, path)
    problems = find_problems(out)
    assert any("sha256" in p for p in problems) and any("position_ids" in p for p in problems)


def test_pipeline_as_plain_python(tmp_path):
    """The gather kernels run line by line under NUMBA_DISABLE_JIT=1 and give byte-identical shards."""
    import os
    import subprocess

    code = (
        f"import sys; sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parents[1])!r}]\n"
        "import numba; assert numba.config.DISABLE_JIT\n"
        "import test_shards as t\n"
        "from packtool.pack import PackConfig, pack_tokenized\n"
        "from invariants import check_pack\n"
        "ids, labels = t.examples(n=80, max_len=50, seed=9)\n"
        "d = t.chunked_data(ids, labels, chunks=3, tokenizer={'pad_id': 7})\n"
        "pack_tokenized(d, PackConfig(pack_len=32, overflow='truncate', shard_rows=8), sys.argv[1])\n"
        "check_pack(sys.argv[1], source=d)\n"
    )
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    proc = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", code, str(tmp_path / "py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(ROOT),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ids, labels = examples(n=80, max_len=50, seed=9)
    d = chunked_data(ids, labels, chunks=3, tokenizer={"pad_id": 7})
    pack_tokenized(d, PackConfig(pack_len=32, overflow="truncate", shard_rows=8), tmp_path / "jit")
    for f in sorted(
        p.relative_to(tmp_path / "jit") for p in (tmp_path / "jit").rglob("*") if p.is_file()
    ):
        assert (tmp_path / "py" / f).read_bytes() == (tmp_path / "jit" / f).read_bytes(), f
