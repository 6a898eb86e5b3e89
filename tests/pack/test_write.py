"""The shard writer's layouts (--pad-to-multiple N, --fixed-docs): rows by the contract, counts in
the manifest, determinism, and default packs byte-identical to those written before the options."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pyarrow
import pyarrow.parquet as pq
import pytest
from invariants import check_pack

from packtool import schema
from packtool.data.tokenized import TokenizedData
from packtool.errors import UsageError
from packtool.pack import PackConfig, pack_tokenized
from packtool.pack.write import row_lists
from packtool.verify import selftest as st

L = 128


def _data(n=50, seed=3, max_len=90, long=()):
    docs = st.make_documents(n, seed=seed, min_len=2, max_len=max_len)
    ids = [d[0].tolist() for d in docs] + [list(range(1, m + 1)) for m in long]
    lab = [d[1].tolist() for d in docs] + [[-100] + list(range(2, m + 1)) for m in long]
    return TokenizedData.from_lists(
        ids, lab, tokenizer={"name": "synthetic", "pad_id": 0}, format="synthetic"
    )


def _pack(tmp_path: Path, name: str, data=None, **kw) -> tuple[Path, dict]:
    out = tmp_path / name
    r = pack_tokenized(data or _data(), PackConfig(pack_len=L, shard_rows=16, **kw), out)
    return out, r.manifest


def _bytes(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


# shards of _data() at --len 128 --shard-rows 16, written by packtool at commit 259d930 (before the
# layout options) with pyarrow 26.0.1 (Parquet files name the writer's version: other pyarrow
# versions give other bytes)
GOLDEN_SHARDS = [
    "9bd647e214f62cfb93b6f4d15d2e19744637872a6741d05b0b7b143a08aa5ca7",
    "4568fbd15782add7252fbde65e94ba799453135ecbfb16d296863e5eecda0b42",
]
GOLDEN_MANIFEST_SANS_VERSION = "0cd246a8c2e9f507854b2f471f42a85e3b31242b0aa305ea329febc08d1d3ec9"


def test_default_layout_writes_the_bytes_of_earlier_packs(tmp_path):
    default, m = _pack(tmp_path, "default")
    explicit, m2 = _pack(tmp_path, "explicit", pad_to_multiple=1, fixed_docs=False)
    assert _bytes(default) == _bytes(explicit)
    assert "pad_to_multiple" not in m and "fixed_docs" not in m and "doc_pad" not in m["tokens"]
    if pyarrow.__version__ != "26.0.1":
        pytest.skip(f"golden shard bytes are pyarrow 26.0.1's, this is {pyarrow.__version__}")
    assert [s["sha256"] for s in m["shards"]] == GOLDEN_SHARDS
    body = dict(m)
    body.pop("packtool_version")
    assert hashlib.sha256(json.dumps(body).encode()).hexdigest() == GOLDEN_MANIFEST_SANS_VERSION


@pytest.mark.parametrize(
    "kw",
    [
        {"pad_to_multiple": 8},
        {"pad_to_multiple": 64},
        {"pad_to_multiple": 16, "fixed_docs": True, "max_docs": 4},
        {"fixed_docs": True, "max_docs": 3},
        {"pad_to_multiple": 8, "overflow": "split", "strategy": "ffd", "order": "random"},
        {"pad_to_multiple": 32, "overflow": "truncate", "fixed_docs": True, "max_docs": 2},
    ],
)
def test_layouts_keep_every_invariant(tmp_path, kw):
    data = _data(long=(300, 129))
    out, m = _pack(tmp_path, "p", data, **kw)
    check_pack(out, source=data)
    n, fixed = kw.get("pad_to_multiple", 1), kw.get("fixed_docs", False)
    assert m.get("pad_to_multiple", 1) == n and m.get("fixed_docs", False) == fixed
    table = pq.read_table(out / m["shards"][0]["file"])
    seq = table.column("seq_lengths").to_pylist()
    if fixed:
        assert {len(s) for s in seq} == {kw["max_docs"]}
    if n > 1:
        real = table.column(schema.UNPADDED_COLUMN).to_pylist()
        assert all(
            a == -(-b // n) * n
            for s, u in zip(seq, real, strict=True)
            for a, b in zip(s, u, strict=True)
        )
        assert m["tokens"]["doc_pad"] == sum(
            sum(s) - sum(u) for e in m["shards"] for s, u in _lists(out / e["file"])
        )
        assert 0 < m["tokens"]["doc_pad"] <= m["tokens"]["pad"]
    else:
        assert schema.UNPADDED_COLUMN not in table.column_names and "doc_pad" not in m["tokens"]


def _lists(path):
    t = pq.read_table(path)
    return zip(
        t.column("seq_lengths").to_pylist(),
        t.column(schema.UNPADDED_COLUMN).to_pylist(),
        strict=True,
    )


def test_padded_rows_hold_the_document_then_its_padding(tmp_path):
    """One row by hand: documents of 3 and 6 tokens at N = 4 take 4 and 8 slots."""
    data = TokenizedData.from_lists(
        [[5, 6, 7], [1, 2, 3, 4, 5, 6]],
        [[-100, 6, 7], [-100, -100, 3, 4, 5, 6]],
        tokenizer={"pad_id": 9},
    )
    out = tmp_path / "p"
    cfg = PackConfig(pack_len=16, pad_to_multiple=4, fixed_docs=True, max_docs=3, shuffle=False)
    m = pack_tokenized(data, cfg, out).manifest
    row = pq.read_table(out / m["shards"][0]["file"]).to_pylist()[0]
    assert row["seq_lengths"] == [8, 4, 0] and row["seq_lengths_unpadded"] == [6, 3, 0]
    assert row["source_index"] == [1, 0, -1]
    assert row["input_ids"] == [1, 2, 3, 4, 5, 6, 9, 9, 5, 6, 7, 9, 9, 9, 9, 9]
    assert row["labels"] == [-100, -100, 3, 4, 5, 6, -100, -100, -100, 6, 7] + [-100] * 5
    assert row["position_ids"] == [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 0, 1, 2, 3]
    assert row["document_id"] == [0] * 8 + [1] * 4 + [-1] * 4
    assert row["num_tokens"] == 9 and row["num_loss_tokens"] == 6
    assert m["tokens"]["doc_pad"] == 3 and m["tokens"]["pad"] == 7 and m["lower_bound_rows"] == 1


def test_same_options_give_the_same_bytes(tmp_path):
    kw = {"pad_to_multiple": 8, "fixed_docs": True, "max_docs": 5, "overflow": "split"}
    a, _ = _pack(tmp_path, "a", _data(long=(400,)), **kw)
    b, _ = _pack(tmp_path, "b", _data(long=(400,)), **kw)
    assert _bytes(a) == _bytes(b)


def test_row_lists_pad_every_row_to_k_entries():
    seq_off = np.array([0, 2, 3], np.int64)
    off, slots, real, src, side = row_lists(
        seq_off, np.array([4, 4, 8]), np.array([3, 4, 5]), np.array([7, 2, 9]), 3
    )
    assert side is None and off.tolist() == [0, 3, 6]
    assert slots.tolist() == [4, 4, 0, 8, 0, 0] and real.tolist() == [3, 4, 0, 5, 0, 0]
    assert src.tolist() == [7, 2, -1, 9, -1, -1]
    same = row_lists(seq_off, np.array([4, 4, 8]), np.array([3, 4, 5]), np.array([7, 2, 9]), 0)
    assert same[0] is seq_off
    *_, side = row_lists(seq_off, *[np.array([4, 4, 8])] * 3, 3, side=np.array([0, 1, 0]))
    assert side.tolist() == [0, 1, 0, 0, 0, 0]  # empty entries: side 0, source_index -1


@pytest.mark.parametrize(
    "kw,match",
    [
        (
            {"pack_len": 100, "pad_to_multiple": 64},
            r"--len 100 is not a multiple of --pad-to-multiple 64; use --len 64 or --len 128",
        ),
        (
            {"pack_len": 4, "pad_to_multiple": 8},
            r"not a multiple of --pad-to-multiple 8; use --len 8$",
        ),
        ({"pack_len": 64, "pad_to_multiple": 0}, r"--pad-to-multiple 0 must be >= 1"),
        ({"pack_len": 64, "fixed_docs": True}, r"--fixed-docs needs --max-docs K > 0"),
    ],
)
def test_layout_options_are_checked(kw, match):
    with pytest.raises(UsageError, match=match):
        PackConfig(**kw)


def test_buffer_sets_two_only_for_a_writer_of_more_than_two_blocks():
    from packtool.pack.write import buffer_sets

    # R rows, shard_rows, group_rows, writers
    assert buffer_sets(1708, 8192, 1024, 1) == [1]  # one shard of two blocks
    assert buffer_sets(1024, 8192, 1024, 1) == [1]
    assert buffer_sets(3000, 8192, 1024, 1) == [2]  # three blocks
    assert buffer_sets(20, 5, 2, 4) == [2, 2, 2, 2]  # shards 0-3: three blocks each
    assert buffer_sets(20, 10, 5, 2) == [1, 1]  # shards 0 and 1: two blocks each
    assert buffer_sets(25, 10, 5, 2) == [2, 1]  # writer 0: shards 0 and 2


@pytest.mark.parametrize("sets", [1, 2])
def test_one_buffer_set_or_two_write_the_same_bytes(tmp_path, monkeypatch, sets):
    """A writer with one buffer set waits for each block's encoding before gathering the next:
    the same bytes as with two (the blocks, rows and row groups are the same)."""
    from packtool.io import shards
    from packtool.pack import write as pack_write

    docs = st.make_documents(400, seed=3, min_len=2, max_len=90)
    data = TokenizedData.from_lists(
        [d[0].tolist() for d in docs], [d[1].tolist() for d in docs], tokenizer={"pad_id": 0}
    )
    cfg = PackConfig(pack_len=128, shard_rows=40)
    monkeypatch.setattr(shards, "ROW_GROUP_BYTES", 16 * 128 * 8)  # 8 rows a block
    monkeypatch.setattr(pack_write, "buffer_sets", lambda R, s, g, w: [2] * w)
    pack_tokenized(data, cfg, tmp_path / "two")
    monkeypatch.setattr(pack_write, "buffer_sets", lambda R, s, g, w: [sets] * w)
    pack_tokenized(data, cfg, tmp_path / "other")

    def digests(folder):
        return {
            p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.rglob("*.parquet")
        }

    assert len(digests(tmp_path / "two")) > 1
    assert digests(tmp_path / "two") == digests(tmp_path / "other")
    first = pq.ParquetFile(sorted((tmp_path / "other").rglob("*.parquet"))[0]).metadata
    assert first.num_row_groups == 5  # 40 rows a shard, 8 a block: writers with 5 blocks
