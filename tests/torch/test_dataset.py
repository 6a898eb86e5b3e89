"""packtool.torch.dataset: PackedDataset reads every row back, pickles without its maps, refuses
broken packs, and reads a pack written by packtool's own writer document by document."""

from __future__ import annotations

import json
import pickle

import numpy as np
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")

from packs import IGNORE, PAD_ID, make_docs, real_pack, write_pack  # noqa: E402

from packtool import schema  # noqa: E402
from packtool.errors import PacktoolError  # noqa: E402
from packtool.torch import PackedCollator, PackedDataset, count_loss_tokens  # noqa: E402


def test_fixture_writer_matches_schema(pack):
    folder, docs, rows = pack
    files = sorted((folder / "data").glob("*.parquet"))
    assert len(files) == -(-len(rows) // 7) > 1
    for f in files:
        assert pq.read_schema(f).equals(schema.arrow_schema(32))
    for r in rows:  # the invariants of docs/ARCHITECTURE.md, "Schema" hold for the fixture too
        assert r["labels"][0] == IGNORE and r["position_ids"][0] == 0
        assert sum(r["seq_lengths"]) == r["num_tokens"]


def test_dataset_reads_back_every_row(pack, cache, monkeypatch):
    import packtool.torch.dataset as arrow_cache

    monkeypatch.setattr(arrow_cache, "_CONVERT_BATCH_ROWS", 3)  # several record batches per shard
    folder, _, rows = pack
    ds = PackedDataset(folder, cache_dir=cache)
    assert len(ds) == len(rows) and ds.pack_len == 32 and ds.pad_id == PAD_ID
    assert list(ds.shard_offsets) == list(np.cumsum([0] + ds.shard_rows))
    for i in [*range(len(rows)), -1]:
        item, want = ds[i], rows[i]
        for name in schema.TOKEN_COLUMNS:
            assert item[name].tolist() == want[name].tolist(), (i, name)
        assert item["input_ids"].dtype == torch.int64 and item["document_id"].dtype == torch.int32
        assert item["seq_lengths"].tolist() == want["seq_lengths"]
        assert item["source_index"].tolist() == want["source_index"]
        assert (item["num_tokens"], item["num_loss_tokens"]) == (
            want["num_tokens"],
            want["num_loss_tokens"],
        )
    with pytest.raises(IndexError, match="out of range"):
        ds[len(rows)]
    assert [ds.locate(i)[0] for i in (0, 6, 7)] == [0, 0, 1]


def test_dataset_pickles_without_its_maps(pack, cache):
    folder, _, rows = pack
    ds = PackedDataset(folder, cache_dir=cache)
    _ = ds[0]
    blob = pickle.dumps(ds)
    assert len(blob) < 10_000  # a DataLoader worker gets the folder, not the data
    clone = pickle.loads(blob)
    assert clone[3]["labels"].tolist() == rows[3]["labels"].tolist()


def test_dataset_checksum_and_errors(pack, cache, tmp_path):
    folder, _, _ = pack
    assert len(PackedDataset(folder, cache_dir=cache, verify_checksums=True)) > 0
    with pytest.raises(PacktoolError, match="manifest.json is missing.*packtool pack"):
        PackedDataset(tmp_path / "nowhere", cache_dir=cache)

    bad = tmp_path / "bad"
    write_pack(bad, make_docs(5, max_len=12), 16)
    manifest = json.loads((bad / "manifest.json").read_text())
    manifest["counts"]["rows"] += 1
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PacktoolError, match="counts.rows"):
        PackedDataset(bad, cache_dir=cache)

    masked = tmp_path / "masked"
    write_pack(masked, make_docs(5, max_len=12), 16)
    shard = next((masked / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    pq.write_table(table.append_column("attention_mask", table.column("input_ids")), shard)
    manifest = json.loads((masked / "manifest.json").read_text())
    manifest["shards"][0]["sha256"] = None
    (masked / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(PacktoolError, match="forbidden column 'attention_mask'"):
        PackedDataset(masked, cache_dir=cache)[0]

    tampered = tmp_path / "tampered"
    write_pack(tampered, make_docs(5, max_len=12), 16)
    shard = next((tampered / "data").glob("*.parquet"))
    pq.write_table(pq.read_table(shard), shard, compression="none")
    with pytest.raises(PacktoolError, match="sha256"):
        PackedDataset(tampered, cache_dir=cache, verify_checksums=True)[0]


def test_dataset_over_a_real_pack(tmp_path, cache, expected_cu):
    """A pack written by packtool's own writer reads back document by document."""
    docs = make_docs(50, seed=4, max_len=40)
    real_pack(tmp_path / "real", docs, 64, shard_rows=5)
    ds = PackedDataset(tmp_path / "real", cache_dir=cache, verify_checksums=True)
    assert (
        len(ds) == ds.manifest["counts"]["rows"] and len(ds.shard_rows) > 1 and ds.pad_id == PAD_ID
    )
    seen = []
    for i in range(len(ds)):
        item = ds[i]
        at = 0
        for k, (n, src) in enumerate(
            zip(item["seq_lengths"].tolist(), item["source_index"].tolist(), strict=True)
        ):
            ids, labels = docs[src]
            assert item["input_ids"][at : at + n].tolist() == ids.tolist()
            assert item["labels"][at : at + n].tolist() == [IGNORE, *labels[1:].tolist()]
            assert item["position_ids"][at : at + n].tolist() == list(range(n))
            assert set(item["document_id"][at : at + n].tolist()) == {k}
            at += n
            seen.append(src)
        assert at == item["num_tokens"]
        assert set(item["input_ids"][at:].tolist()) <= {PAD_ID} and set(
            item["labels"][at:].tolist()
        ) <= {IGNORE}
        assert set(item["document_id"][at:].tolist()) <= {schema.PAD_DOCUMENT_ID}
        assert item["position_ids"][at:].tolist() == list(range(64 - at))
    assert sorted(seen) == list(range(len(docs)))
    batch = PackedCollator()([ds[i] for i in range(len(ds))])
    assert batch["cu_seq_lens_q"].tolist() == expected_cu(
        [
            {"seq_lengths": ds[i]["seq_lengths"].tolist(), "num_tokens": ds[i]["num_tokens"]}
            for i in range(len(ds))
        ],
        64,
    )
    assert int(count_loss_tokens(batch["labels"])) == ds.manifest["tokens"]["loss_out"]
