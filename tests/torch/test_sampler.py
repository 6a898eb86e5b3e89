"""packtool.torch.sampler: PackedSampler is seeded, epoch-aware, shard-local, rank-split and resumable."""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from packtool.torch import PackedSampler  # noqa: E402


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
    per_rank = [
        list(PackedSampler(ds, seed=1, rank=r, world_size=world, drop_last=drop_last))
        for r in range(world)
    ]
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
