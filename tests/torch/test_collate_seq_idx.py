"""PackedCollator's seq_idx (Mamba-2 / conv / linear-attention kernels) and for_model."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from packtool.torch import PackedCollator  # noqa: E402


def _item(lengths, pack_len):
    from packtool import schema

    ids = np.arange(pack_len, dtype=np.int64)
    return {
        "input_ids": ids,
        "labels": ids,
        "position_ids": schema.position_ids(lengths, pack_len),
        "seq_lengths": np.asarray(lengths),
    }


def test_seq_idx_per_row():
    batch = PackedCollator(seq_idx=True)([_item([4, 3], 9), _item([6, 3], 9)])
    assert batch["seq_idx"].dtype == torch.int32 and batch["seq_idx"].shape == (2, 9)
    assert batch["seq_idx"].tolist() == [[0, 0, 0, 0, 1, 1, 1, 2, 2], [0] * 6 + [1] * 3]
    assert "cu_seq_lens_q" in batch


def test_seq_idx_varlen_over_the_batch():
    batch = PackedCollator("varlen", seq_idx=True)([_item([4, 3], 9), _item([9], 9)])
    assert batch["seq_idx"].shape == (1, 18)
    assert batch["seq_idx"][0].tolist() == [0] * 4 + [1] * 3 + [2] * 2 + [3] * 9
    # each change of seq_idx is a boundary of cu_seqlens
    changes = [0, *(np.flatnonzero(np.diff(batch["seq_idx"][0].numpy())) + 1).tolist(), 18]
    assert changes == batch["cu_seqlens"].tolist()


def test_seq_idx_fixed_docs_empty_entries_take_no_index():
    # --fixed-docs --max-docs 3: rows list 3 entries, the empty ones hold no token; seq_idx runs
    # 0, 1, 2 ... through the segments that hold tokens, with no gap for an empty entry
    items = [_item([4, 4, 0], 12), _item([8, 0, 0], 12)]
    batch = PackedCollator(seq_idx=True, fixed_docs=True)(items)
    assert batch["seq_idx"].tolist() == [[0] * 4 + [1] * 4 + [2] * 4, [0] * 8 + [1] * 4]
    flat = PackedCollator("varlen", seq_idx=True, fixed_docs=True)(items)["seq_idx"][0]
    assert flat.tolist() == [0] * 4 + [1] * 4 + [2] * 4 + [3] * 8 + [4] * 4


def test_seq_idx_rows_read_off_positions():
    item = _item([2, 5], 9)
    del item["seq_lengths"]
    batch = PackedCollator(seq_idx=True)([item])
    assert batch["seq_idx"].tolist() == [[0, 0, 1, 1, 1, 1, 1, 2, 2]]


def test_no_seq_idx_by_default_and_not_for_flex():
    assert "seq_idx" not in PackedCollator()([_item([4, 3], 9)])
    with pytest.raises(ValueError, match="seq_idx=True applies"):
        PackedCollator("flex", seq_idx=True)


@pytest.mark.parametrize(
    ("model_type", "seq_idx"),
    [
        ("llama", False),
        ("qwen3", False),
        ("nemotron_h", True),
        ("qwen3_next", True),
        ("lfm2", True),
    ],
)
def test_for_model(model_type, seq_idx):
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type)
    collate = PackedCollator.for_model(config)
    assert collate.seq_idx is seq_idx and collate.flash_kwargs
    assert ("seq_idx" in collate([_item([4, 3], 9)])) is seq_idx


def test_for_model_takes_a_model():
    class Model:  # anything with .config, as a transformers model has
        config = {"model_type": "falcon_h1"}

    assert PackedCollator.for_model(Model()).seq_idx
    assert PackedCollator.for_model(Model(), "varlen", drop_padding=True).drop_padding


def test_for_model_takes_a_folder_and_refuses_what_has_no_model_type(tmp_path):
    import json

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "nemotron_h"}))
    assert PackedCollator.for_model(str(tmp_path)).seq_idx  # not silently an attention model
    assert PackedCollator.for_model(tmp_path / "config.json").seq_idx
    assert not PackedCollator.for_model({"model_type": "llama"}).seq_idx
    with pytest.raises(TypeError, match="no model_type"):
        PackedCollator.for_model(object())


def test_for_model_flex():
    assert PackedCollator.for_model({"model_type": "llama"}, "flex").mode == "flex"
    with pytest.raises(ValueError, match="mode='flex' batches do not carry"):
        PackedCollator.for_model({"model_type": "nemotron_h"}, "flex")


@pytest.mark.parametrize(
    "model_type", ["mamba", "mamba2", "falcon_mamba", "rwkv", "recurrent_gemma"]
)
def test_for_model_refuses_what_cannot_be_trained_packed(model_type):
    """README "Hybrid models": such models cannot be trained packed; for_model says so and what
    to do, instead of handing out a collator whose batches mix their documents."""
    with pytest.raises(ValueError, match=rf"{model_type} cannot be trained packed.*--max-docs 1"):
        PackedCollator.for_model({"model_type": model_type})


def test_pair_collator_for_model_does_not_advise_what_a_preference_pack_cannot_do():
    """--max-docs 1 holds no pair: PairCollator's refusal names unpacked pair training instead."""
    from packtool.torch.collate import PairCollator

    with pytest.raises(ValueError, match="cannot be trained packed.*padding_free=False") as e:
        PairCollator.for_model({"model_type": "mamba"})
    assert "--max-docs 1" not in str(e.value)
