"""packtool.torch.loss: the loss-token count (shifted = unshifted on packed rows), the summed token
loss, accumulation groups, and the all-reduce over ranks."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from packs import IGNORE  # noqa: E402

from packtool.torch import (  # noqa: E402
    PackedCollator,
    PackedDataset,
    PackedSampler,
    accumulation_groups,
    count_loss_tokens,
    global_loss_tokens,
    token_loss_sum,
)


def test_count_loss_tokens_and_token_loss_sum():
    labels = torch.tensor([[IGNORE, 5, IGNORE, 7], [IGNORE, IGNORE, 3, 4]])
    assert int(count_loss_tokens(labels)) == 4
    assert int(count_loss_tokens(labels, shift=False)) == 4
    shifted_only = torch.tensor([[9, IGNORE, 2]])  # a label on position 0 is never predicted
    assert (
        int(count_loss_tokens(shifted_only)) == 1
        and int(count_loss_tokens(shifted_only, shift=False)) == 2
    )
    assert int(global_loss_tokens([{"labels": labels}, labels[:1]])) == 6
    logits = torch.randn(2, 4, 11)
    want = torch.nn.functional.cross_entropy(
        logits[:, :-1].reshape(-1, 11),
        labels[:, 1:].reshape(-1),
        ignore_index=IGNORE,
        reduction="sum",
    )
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
    assert (
        int(count_loss_tokens(batch["labels"]))
        == int(count_loss_tokens(batch["labels"], shift=False))
        == want
    )
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
