"""packtool.torch: the memory-mapped dataset, the collator modes, the FlexAttention mask, the sampler,
and the loss-token count. Fixture packs come from `write_pack` below (a small independent writer of
schema v1, so these tests do not depend on the real packer)."""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

torch = pytest.importorskip("torch")

from packs import IGNORE, PAD_ID, make_docs, plan_rows, real_pack, write_pack  # noqa: E402,F401

from packtool import schema  # noqa: E402
from packtool.errors import PacktoolError  # noqa: E402
from packtool.torch import (  # noqa: E402
    PackedCollator,
    PackedDataset,
    PackedSampler,
    accumulation_groups,
    count_loss_tokens,
    document_block_mask,
    global_loss_tokens,
    token_loss_sum,
)


@pytest.fixture
def pack(tmp_path):
    docs = make_docs(60, seed=1, max_len=24)
    rows = write_pack(tmp_path / "pack", docs, 32, rows_per_shard=7)
    return tmp_path / "pack", docs, rows


@pytest.fixture
def cache(tmp_path):
    return tmp_path / "arrow-cache"


# --------------------------------------------------------------------------------------------------
# Dataset
# --------------------------------------------------------------------------------------------------


def test_fixture_writer_matches_schema(pack):
    folder, docs, rows = pack
    files = sorted((folder / "data").glob("*.parquet"))
    assert len(files) == -(-len(rows) // 7) > 1
    for f in files:
        assert pq.read_schema(f).equals(schema.arrow_schema(32))
    for r in rows:  # the invariants of DESIGN §3 hold for the fixture too
        assert r["labels"][0] == IGNORE and r["position_ids"][0] == 0
        assert sum(r["seq_lengths"]) == r["num_tokens"]


def test_dataset_reads_back_every_row(pack, cache, monkeypatch):
    import packtool.torch as pt

    monkeypatch.setattr(pt, "_CONVERT_BATCH_ROWS", 3)  # several record batches per shard
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
        assert (item["num_tokens"], item["num_loss_tokens"]) == (want["num_tokens"], want["num_loss_tokens"])
    with pytest.raises(IndexError, match="out of range"):
        ds[len(rows)]
    assert [ds.locate(i)[0] for i in (0, 6, 7)] == [0, 0, 1]


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


def test_dataset_over_a_real_pack(tmp_path, cache):
    """A pack written by packtool's own writer reads back document by document."""
    docs = make_docs(50, seed=4, max_len=40)
    real_pack(tmp_path / "real", docs, 64, shard_rows=5)
    ds = PackedDataset(tmp_path / "real", cache_dir=cache, verify_checksums=True)
    assert len(ds) == ds.manifest["counts"]["rows"] and len(ds.shard_rows) > 1 and ds.pad_id == PAD_ID
    seen = []
    for i in range(len(ds)):
        item = ds[i]
        at = 0
        for k, (n, src) in enumerate(zip(item["seq_lengths"].tolist(), item["source_index"].tolist(), strict=True)):
            ids, labels = docs[src]
            assert item["input_ids"][at : at + n].tolist() == ids.tolist()
            assert item["labels"][at : at + n].tolist() == [IGNORE, *labels[1:].tolist()]
            assert item["position_ids"][at : at + n].tolist() == list(range(n))
            assert set(item["document_id"][at : at + n].tolist()) == {k}
            at += n
            seen.append(src)
        assert at == item["num_tokens"]
        assert set(item["input_ids"][at:].tolist()) <= {PAD_ID} and set(item["labels"][at:].tolist()) <= {IGNORE}
        assert set(item["document_id"][at:].tolist()) <= {schema.PAD_DOCUMENT_ID}
        assert item["position_ids"][at:].tolist() == list(range(64 - at))
    assert sorted(seen) == list(range(len(docs)))
    batch = PackedCollator()([ds[i] for i in range(len(ds))])
    assert batch["cu_seq_lens_q"].tolist() == _expected_cu([
        {"seq_lengths": ds[i]["seq_lengths"].tolist(), "num_tokens": ds[i]["num_tokens"]} for i in range(len(ds))], 64)
    assert int(count_loss_tokens(batch["labels"])) == ds.manifest["tokens"]["loss_out"]


# --------------------------------------------------------------------------------------------------
# Collator
# --------------------------------------------------------------------------------------------------


def _expected_cu(rows, pack_len):
    cu = [0]
    for b, r in enumerate(rows):
        at = b * pack_len
        for n in r["seq_lengths"]:
            at += n
            cu.append(at)
        if r["num_tokens"] < pack_len:
            cu.append((b + 1) * pack_len)
    return cu


def test_collator_hf(pack, cache):
    folder, _, rows = pack
    ds = PackedDataset(folder, cache_dir=cache)
    batch = PackedCollator()([ds[i] for i in range(4)])
    assert set(batch) == {"input_ids", "labels", "position_ids", "use_cache", "cu_seq_lens_q",
                          "cu_seq_lens_k", "max_length_q", "max_length_k"}
    assert "attention_mask" not in batch and batch["use_cache"] is False
    assert batch["input_ids"].shape == (4, 32) and batch["input_ids"].dtype == torch.int64
    assert batch["labels"].dtype == torch.int64 and batch["position_ids"].dtype == torch.int64
    cu = batch["cu_seq_lens_q"]
    assert cu.dtype == torch.int32 and cu.tolist() == _expected_cu(rows[:4], 32)
    assert batch["cu_seq_lens_k"] is cu
    assert batch["max_length_q"] == batch["max_length_k"] == int(np.diff(cu.numpy()).max())
    assert isinstance(batch["max_length_q"], int)
    plain = PackedCollator(flash_kwargs=False)([ds[0]])
    assert set(plain) == {"input_ids", "labels", "position_ids", "use_cache"}


def test_collator_varlen_and_flex(pack, cache):
    folder, _, rows = pack
    ds = PackedDataset(folder, cache_dir=cache)
    items = [ds[i] for i in range(3)]
    v = PackedCollator("varlen")(items)
    assert v["input_ids"].shape == (96,) and v["cu_seqlens"].dtype == torch.int32
    assert v["cu_seqlens"].tolist() == _expected_cu(rows[:3], 32)
    assert v["max_seqlen"] == int(np.diff(v["cu_seqlens"].numpy()).max())
    d = PackedCollator("varlen", drop_padding=True)(items)
    real = sum(r["num_tokens"] for r in rows[:3])
    assert d["input_ids"].shape == (real,)
    assert d["cu_seqlens"].tolist() == [0, *np.cumsum([n for r in rows[:3] for n in r["seq_lengths"]])]
    assert d["input_ids"].tolist() == [t for r in rows[:3] for t in r["input_ids"][: r["num_tokens"]]]
    f = PackedCollator("flex")(items)
    assert set(f) == {"input_ids", "labels", "position_ids", "document_id"}
    assert f["document_id"].dtype == torch.int32 and f["document_id"].shape == (3, 32)


def test_collator_without_position_ids_and_errors(pack, cache):
    folder, _, _ = pack
    ds = PackedDataset(folder, cache_dir=cache)
    items = [ds[i] for i in range(3)]
    full = PackedCollator()(items)
    # TRL's default column filter keeps input_ids, labels, seq_lengths: positions are rebuilt
    trimmed = [{k: it[k] for k in ("input_ids", "labels", "seq_lengths")} for it in items]
    rebuilt = PackedCollator()(trimmed)
    assert torch.equal(rebuilt["position_ids"], full["position_ids"])
    assert torch.equal(rebuilt["cu_seq_lens_q"], full["cu_seq_lens_q"])
    with pytest.raises(KeyError, match="remove_unused_columns=False"):
        PackedCollator()([{k: it[k] for k in ("input_ids", "labels")} for it in items])
    with pytest.raises(KeyError, match="document_id"):
        PackedCollator("flex")(trimmed)
    with pytest.raises(ValueError, match="mode='nope'"):
        PackedCollator("nope")
    with pytest.raises(ValueError, match="start every row at 0"):
        bad = dict(items[0], position_ids=items[0]["position_ids"] + 1)
        PackedCollator()([bad])


def test_dataloader_with_workers(pack, cache):
    folder, _, rows = pack
    ds = PackedDataset(folder, cache_dir=cache)
    _ = ds[0]  # the parent converts; workers only map
    loader = torch.utils.data.DataLoader(ds, batch_size=4, collate_fn=PackedCollator(), num_workers=1,
                                         sampler=PackedSampler(ds, seed=3))
    seen = torch.cat([b["input_ids"] for b in loader])
    assert seen.shape == (len(rows), 32)
    assert sorted(map(tuple, seen.tolist())) == sorted(tuple(r["input_ids"].tolist()) for r in rows)


# --------------------------------------------------------------------------------------------------
# FlexAttention BlockMask
# --------------------------------------------------------------------------------------------------


def test_document_block_mask_matches_dense_reference():
    from torch.nn.attention.flex_attention import flex_attention

    document_id = torch.tensor([[0] * 5 + [1] * 7 + [2] * 4 + [-1] * 4, [0] * 9 + [1] * 3 + [2] * 8],
                               dtype=torch.int32)
    bm = document_block_mask(document_id)
    b, length = document_id.shape
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, 2, length, 8, generator=g) for _ in range(3))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*without torch.compile")  # unfused CPU reference
        out = flex_attention(q, k, v, block_mask=bm)
    causal = torch.tril(torch.ones(length, length, dtype=torch.bool))
    dense = (document_id[:, :, None] == document_id[:, None, :]) & causal
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=dense[:, None])
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    # pad queries see only pad keys: perturbing every document leaves the pad outputs unchanged
    v2 = v.clone()
    v2[0, :, :16] += 1.0
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*without torch.compile")
        out2 = flex_attention(q, k, v2, block_mask=bm)
    torch.testing.assert_close(out2[0, :, 16:], out[0, :, 16:])
    with pytest.raises(ValueError, match=r"\[batch, seq\]"):
        document_block_mask(document_id[0])


# --------------------------------------------------------------------------------------------------
# Sampler
# --------------------------------------------------------------------------------------------------


def _shard_ds(sizes):
    class Fake:
        shard_rows = sizes

        def __len__(self):
            return sum(sizes)

    return Fake()


def test_sampler_deterministic_epoch_aware_and_shard_local():
    ds = _shard_ds([7, 7, 7, 4])
    a, b = PackedSampler(ds, seed=5), PackedSampler(ds, seed=5)
    first = list(a)
    assert first == list(b) and sorted(first) == list(range(25))
    second = list(a)  # iterating again after an exhausted epoch runs the next one
    assert a.epoch == 1 and sorted(second) == list(range(25)) and second != first
    b.set_epoch(1)
    assert list(b) == second
    assert list(PackedSampler(ds, seed=6)) != first
    # shard-aware: each shard's rows come out contiguously
    starts = np.cumsum([0, 7, 7, 7, 4])
    shard_of = np.searchsorted(starts, first, side="right") - 1
    assert int((np.diff(shard_of) != 0).sum()) == 3
    assert list(PackedSampler(ds, shuffle=False)) == list(range(25))
    glob = PackedSampler(ds, seed=5, shard_aware=False)
    assert sorted(glob) == list(range(25))


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [True, False])
def test_sampler_splits_ranks_evenly(world, drop_last):
    ds = _shard_ds([9, 9, 5])
    per_rank = [list(PackedSampler(ds, seed=1, rank=r, world_size=world, drop_last=drop_last))
                for r in range(world)]
    counts = {len(p) for p in per_rank}
    assert len(counts) == 1
    flat = [i for p in per_rank for i in p]
    if drop_last:
        assert counts == {23 // world} and len(set(flat)) == len(flat)
    else:
        assert counts == {-(-23 // world)} and set(flat) == set(range(23))
    assert len(PackedSampler(ds, rank=0, world_size=world, drop_last=drop_last)) == counts.pop()


def test_sampler_resumes_mid_epoch_and_across_world_sizes():
    ds = _shard_ds([10, 10, 4])
    full = PackedSampler(ds, seed=2)
    list(full)  # epoch 0
    epoch1 = list(full)

    run = PackedSampler(ds, seed=2)
    list(run)
    it = iter(run)
    head = [next(it) for _ in range(9)]
    state = json.loads(json.dumps(run.state_dict()))  # survives a checkpoint file
    resumed = PackedSampler(ds, seed=2)
    resumed.load_state_dict(state)
    assert head + list(resumed) == epoch1

    # two ranks consumed 4 rows each (8 of the global order); resume on 4 ranks: 2 rows each
    two = [PackedSampler(ds, seed=2, rank=r, world_size=2) for r in range(2)]
    for s in two:
        it = iter(s)
        [next(it) for _ in range(4)]
    state = two[0].state_dict()
    four = [PackedSampler(ds, seed=2, rank=r, world_size=4) for r in range(4)]
    for s in four:
        s.load_state_dict(state)
    rest = sorted(i for s in four for i in s)
    order = PackedSampler(ds, seed=2).epoch_order(0)
    assert rest == sorted(order[8:24].tolist())

    # resume from a checkpoint taken at the end of epoch 0, in both loop styles
    done = PackedSampler(ds, seed=2)
    list(done)
    end_of_0 = done.state_dict()
    assert (end_of_0["epoch"], end_of_0["global_position"]) == (0, 24)
    auto = PackedSampler(ds, seed=2)
    auto.load_state_dict(end_of_0)
    assert list(auto) == epoch1  # no set_epoch: the next iter() is epoch 1
    pinned = PackedSampler(ds, seed=2)
    pinned.load_state_dict(end_of_0)
    per_epoch = []
    for epoch in range(0, 2):  # a loop that resumes at the checkpoint's epoch and calls set_epoch
        pinned.set_epoch(epoch)
        per_epoch.append(list(pinned))
    assert per_epoch == [[], epoch1]

    explicit = PackedSampler(ds, seed=2)
    explicit.load_state_dict(run.state_dict(consumed=3))
    assert list(explicit) == epoch1[3:]
    with pytest.raises(ValueError, match="seed=2 but this sampler has 9"):
        PackedSampler(ds, seed=9).load_state_dict(state)
    with pytest.raises(ValueError, match="rank 2 is not in"):
        PackedSampler(ds, rank=2, world_size=2)


# --------------------------------------------------------------------------------------------------
# Loss-token count
# --------------------------------------------------------------------------------------------------


def test_count_loss_tokens_and_token_loss_sum():
    labels = torch.tensor([[IGNORE, 5, IGNORE, 7], [IGNORE, IGNORE, 3, 4]])
    assert int(count_loss_tokens(labels)) == 4
    assert int(count_loss_tokens(labels, shift=False)) == 4
    shifted_only = torch.tensor([[9, IGNORE, 2]])  # a label on position 0 is never predicted
    assert int(count_loss_tokens(shifted_only)) == 1 and int(count_loss_tokens(shifted_only, shift=False)) == 2
    assert int(global_loss_tokens([{"labels": labels}, labels[:1]])) == 6
    logits = torch.randn(2, 4, 11)
    want = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 11), labels[:, 1:].reshape(-1),
                                             ignore_index=IGNORE, reduction="sum")
    torch.testing.assert_close(token_loss_sum(logits, labels), want)
    assert [len(g) for g in accumulation_groups(range(7), 3)] == [3, 3, 1]
    with pytest.raises(ValueError):
        list(accumulation_groups([], 0))


def test_packed_rows_shifted_count_equals_unshifted(pack, cache):
    """-100 on every document's first token: the shift never drops or adds a loss token."""
    folder, _, rows = pack
    ds = PackedDataset(folder, cache_dir=cache)
    batch = PackedCollator()([ds[i] for i in range(len(ds))])
    want = sum(r["num_loss_tokens"] for r in rows)
    assert int(count_loss_tokens(batch["labels"])) == int(count_loss_tokens(batch["labels"], shift=False)) == want
    flat = PackedCollator("varlen")([ds[i] for i in range(len(ds))])["labels"]
    assert int(count_loss_tokens(flat)) == want


def _rank_count(rank, world, path, ret):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    labels = torch.full((2, 8), IGNORE)
    labels[:, 1 : 2 + rank] = 1  # rank r has 2*(r+1) loss tokens per micro-batch
    ret[rank] = int(global_loss_tokens([labels, labels]))
    sampler = PackedSampler(10)  # rank and world size from the process group
    ret[10 + rank] = (sampler.rank, sampler.world_size)
    dist.destroy_process_group()


def test_global_loss_tokens_all_reduces(tmp_path):
    import torch.multiprocessing as mp

    ret = mp.Manager().dict()
    mp.spawn(_rank_count, args=(2, tmp_path / "rdzv", ret), nprocs=2, join=True)
    assert ret[0] == ret[1] == 2 * 2 + 2 * 4  # (2+2) on rank 0, (4+4) on rank 1
    assert ret[10] == (0, 2) and ret[11] == (1, 2)
