"""packtool.torch.dataset (its Arrow cache): shards converted once to memory-mapped Arrow IPC files, reused."""

from __future__ import annotations

import re

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")

from packtool.errors import PacktoolError  # noqa: E402
from packtool.torch import PackedDataset  # noqa: E402
from packtool.torch.dataset import MappedShard, cache_path, convert_shard  # noqa: E402


def test_dataset_memory_maps_and_reuses_cache(pack, cache):
    folder, _, rows = pack
    before = pa.total_allocated_bytes()
    ds = PackedDataset(folder, cache_dir=cache)
    _ = ds[0]
    # the token columns are not in Arrow's memory pool: they live in the memory-mapped IPC files
    assert pa.total_allocated_bytes() - before < len(rows) * 32 * 4
    arrows = sorted(cache.glob("*.arrow"))
    assert len(arrows) == len(ds.shard_rows)
    assert {p.stem for p in arrows} == {s["sha256"] for s in ds.manifest["shards"]}
    mtimes = [p.stat().st_mtime_ns for p in arrows]
    again = PackedDataset(folder, cache_dir=cache)
    assert again[len(rows) - 1]["input_ids"].tolist() == rows[-1]["input_ids"].tolist()
    assert [p.stat().st_mtime_ns for p in arrows] == mtimes  # converted once, reused
    assert not list(cache.glob("*.tmp"))


def test_convert_shard_refuses_a_bad_shard_naming_it_and_the_fix(pack, tmp_path):
    """The one shard-schema check (schema.shard_schema_problems) decides; the error names the shard
    and says to re-run packtool pack."""
    folder, _, rows = pack
    shard = sorted((folder / "data").glob("*.parquet"))[0]
    n = pq.read_metadata(shard).num_rows
    wrong_len = (
        re.escape(f"shard {shard} is not a schema v1 shard with pack_len 16: ")
        + r"column input_ids is fixed_size_list<[^>]*>\[32\], expected fixed_size_list<[^>]*>\[16\];"
        + r".*; re-run `packtool pack`$"
    )
    with pytest.raises(PacktoolError, match=wrong_len):
        convert_shard(
            shard, tmp_path / "x.arrow", pack_len=16, rows=n
        )  # the pack's rows are 32 long
    with pytest.raises(PacktoolError, match=f"has {n} rows, the manifest says {n + 1}"):
        convert_shard(shard, tmp_path / "x.arrow", pack_len=32, rows=n + 1)
    with pytest.raises(PacktoolError, match="missing; re-run `packtool pack`"):
        convert_shard(folder / "data" / "nope.parquet", tmp_path / "x.arrow", pack_len=32, rows=n)
    assert not list(tmp_path.glob("x.arrow*"))


def test_mapped_shard_rows_are_views_of_the_cache(pack, tmp_path):
    folder, _, rows = pack
    shard = sorted((folder / "data").glob("*.parquet"))[0]
    n = pq.read_metadata(shard).num_rows
    dest = cache_path(tmp_path, shard, "ab" * 32)
    assert dest == tmp_path / f"{'ab' * 32}.arrow"
    keyed = cache_path(tmp_path, shard, None)  # no checksum: keyed on the file's path, size, mtime
    assert keyed.suffix == ".arrow" and keyed == cache_path(tmp_path, shard, None) and keyed != dest
    convert_shard(shard, dest, pack_len=32, rows=n)
    mapped = MappedShard(dest, pack_len=32, rows=n)
    assert len(mapped) == n
    for r in range(n):
        row = mapped.row(r)
        for name in ("input_ids", "labels", "position_ids", "document_id"):
            assert row[name].tolist() == rows[r][name].tolist() and not row[name].flags.owndata
        assert row["seq_lengths"].tolist() == rows[r]["seq_lengths"]
        assert int(row["num_tokens"]) == rows[r]["num_tokens"]
    with pytest.raises(PacktoolError, match=f"has {n} rows, expected {n + 1}"):
        MappedShard(dest, pack_len=32, rows=n + 1)
