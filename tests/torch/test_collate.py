"""packtool.torch.collate: the hf / varlen / flex batches, positions rebuilt from seq_lengths, errors,
and a DataLoader with workers."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from packtool import schema  # noqa: E402
from packtool.torch import PackedCollator, PackedDataset, PackedSampler  # noqa: E402


def test_collator_hf(pack, cache, expected_cu):
    folder, _, rows = pack
    ds = PackedDataset(folder, cache_dir=cache)
    batch = PackedCollator()([ds[i] for i in range(4)])
    assert set(batch) == {
        "input_ids",
        "labels",
        "position_ids",
        "use_cache",
        "cu_seq_lens_q",
        "cu_seq_lens_k",
        "max_length_q",
        "max_length_k",
    }
    assert "attention_mask" not in batch and batch["use_cache"] is False
    assert batch["input_ids"].shape == (4, 32) and batch["input_ids"].dtype == torch.int64
    assert batch["labels"].dtype == torch.int64 and batch["position_ids"].dtype == torch.int64
    cu = batch["cu_seq_lens_q"]
    assert cu.dtype == torch.int32 and cu.tolist() == expected_cu(rows[:4], 32)
    assert batch["cu_seq_lens_k"] is cu
    assert batch["max_length_q"] == batch["max_length_k"] == int(np.diff(cu.numpy()).max())
    assert isinstance(batch["max_length_q"], int)
    plain = PackedCollator(flash_kwargs=False)([ds[0]])
    assert set(plain) == {"input_ids", "labels", "position_ids", "use_cache"}


def test_collator_varlen_and_flex(pack, cache, expected_cu):
    folder, _, rows = pack
    ds = PackedDataset(folder, cache_dir=cache)
    items = [ds[i] for i in range(3)]
    v = PackedCollator("varlen")(items)
    assert v["input_ids"].shape == (96,) and v["cu_seqlens"].dtype == torch.int32
    assert v["cu_seqlens"].tolist() == expected_cu(rows[:3], 32)
    assert v["max_seqlen"] == int(np.diff(v["cu_seqlens"].numpy()).max())
    d = PackedCollator("varlen", drop_padding=True)(items)
    real = sum(r["num_tokens"] for r in rows[:3])
    assert d["input_ids"].shape == (real,)
    assert d["cu_seqlens"].tolist() == [
        0,
        *np.cumsum([n for r in rows[:3] for n in r["seq_lengths"]]),
    ]
    assert d["input_ids"].tolist() == [
        t for r in rows[:3] for t in r["input_ids"][: r["num_tokens"]]
    ]
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
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=4,
        collate_fn=PackedCollator(),
        num_workers=1,
        sampler=PackedSampler(ds, seed=3),
    )
    seen = torch.cat([b["input_ids"] for b in loader])
    assert seen.shape == (len(rows), 32)
    assert sorted(map(tuple, seen.tolist())) == sorted(tuple(r["input_ids"].tolist()) for r in rows)


def test_collator_segments_without_seq_lengths(pack, cache):
    """Rows a caller built with position_ids but no seq_lengths (benchmarks/bench_train.py does):
    the segments are read off position_ids and agree with the schema's, pad tail included."""
    folder, _, rows = pack
    ds = PackedDataset(folder, cache_dir=cache)
    items = [ds[i] for i in range(4)]
    bare = [
        {k: it[k] for k in ("input_ids", "labels", "position_ids", "num_tokens")} for it in items
    ]
    for collate in (
        PackedCollator(),
        PackedCollator("varlen"),
        PackedCollator("varlen", drop_padding=True),
    ):
        want, got = collate(items), collate(bare)
        assert set(want) == set(got), collate
        for key, value in want.items():
            assert torch.equal(got[key], value) if torch.is_tensor(value) else got[key] == value, (
                collate,
                key,
            )
    rebuilt = PackedCollator()(
        [{k: it[k] for k in ("input_ids", "labels", "seq_lengths")} for it in items]
    )
    assert rebuilt["position_ids"].tolist() == [
        schema.position_ids(r["seq_lengths"], 32).tolist() for r in rows[:4]
    ]
    assert (
        rebuilt["cu_seq_lens_q"].tolist()
        == schema.cu_seqlens([r["seq_lengths"] for r in rows[:4]], 32).tolist()
    )


@pytest.fixture
def layout_pack(tmp_path):
    """Documents padded to multiples of 8, exactly 4 entries a row (packtool's own writer)."""
    from packs import make_docs, real_pack

    docs = make_docs(40, seed=3, min_len=2, max_len=30)
    real_pack(tmp_path / "lp", docs, 64, pad_to_multiple=8, fixed_docs=True, max_docs=4)
    return PackedDataset(tmp_path / "lp", cache_dir=tmp_path / "cache")


def test_padded_fixed_docs_batches_have_static_shapes_and_both_forms(layout_pack):
    ds = layout_pack
    assert ds.fixed_docs and ds.layout == schema.Layout(8, 4)
    item = ds[0]
    assert item["seq_lengths"].shape == item["seq_lengths_unpadded"].shape == (4,)
    collate = ds.collator("varlen")
    assert collate.fixed_docs
    shapes = set()
    for start in range(0, len(ds) - 2, 3):
        items = [ds[i] for i in range(start, start + 3)]
        b = collate(items)
        shapes.add((tuple(b["cu_seqlens"].shape), tuple(b["cu_seqlens_unpadded"].shape)))
        lens = [it["seq_lengths"].tolist() for it in items]
        real = [it["seq_lengths_unpadded"].tolist() for it in items]
        assert b["cu_seqlens"].tolist() == schema.cu_seqlens(lens, 64, fixed=True).tolist()
        assert (
            b["cu_seqlens_unpadded"].tolist()
            == schema.cu_seqlens_unpadded(lens, real, 64, fixed=True).tolist()
        )
        assert int(b["cu_seqlens"][-1]) == 3 * 64
        assert int(b["cu_seqlens_unpadded"][-1]) == sum(it["num_tokens"] for it in items)
        assert b["max_seqlen"] == int(np.diff(b["cu_seqlens"].numpy()).max())
        assert b["max_seqlen_unpadded"] == max(max(r) for r in real)
        # every real token sits inside its padded segment: starts agree, real <= padded
        seg_p, seg_r = np.diff(b["cu_seqlens"].numpy()), np.diff(b["cu_seqlens_unpadded"].numpy())
        assert (seg_r <= seg_p).all()
    assert shapes == {((3 * (4 + 1) + 1,), (3 * (4 + 1) + 1,))}  # B * (K + 1) + 1, every batch
    hf = ds.collator()([ds[i] for i in range(3)])
    assert hf["cu_seq_lens_q"].shape == (16,)
    dropped = ds.collator("varlen", drop_padding=True)([ds[i] for i in range(3)])
    assert dropped["cu_seqlens"].shape == (3 * 4 + 1,)  # without pad tails: B * K + 1
    assert int(dropped["cu_seqlens"][-1]) == dropped["input_ids"].numel()
    assert int(dropped["cu_seqlens"][-1]) == sum(int(ds[i]["seq_lengths"].sum()) for i in range(3))


def test_fixed_docs_refuses_rows_of_other_lengths(pack, cache):
    folder, _, _ = pack
    ds = PackedDataset(folder, cache_dir=cache)
    items = [ds[i] for i in range(6)]
    assert len({len(it["seq_lengths"]) for it in items}) > 1  # rows of 1, 2, ... documents
    with pytest.raises(ValueError, match="fixed_docs=True but the rows list"):
        PackedCollator("varlen", fixed_docs=True)(items)
    assert not ds.fixed_docs and "cu_seqlens_unpadded" not in PackedCollator("varlen")(items)
