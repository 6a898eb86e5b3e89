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
