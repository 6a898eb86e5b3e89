"""PackedSampler: the row order of a packed dataset, seeded, epoch-aware, resumable, split across ranks."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

if TYPE_CHECKING:
    from packtool.torch.dataset import PackedDataset


class PackedSampler(torch.utils.data.Sampler[int]):
    """Seeded, epoch-aware, resumable row order, split evenly across data-parallel ranks.

    Epoch order (a pure function of seed and epoch): with shard_aware, the shards in a random order
    and each shard's rows shuffled within it (reads stay local to one memory-mapped file; the packer
    already shuffled rows across shards); otherwise one global permutation. Rank r of W takes
    positions r, r+W, r+2W, ... of that order; drop_last cuts the order to a multiple of W, else it
    wraps around to the start (like DistributedSampler), so every rank gets the same count.

        order      7 2 5 0 | 9 4 1 8 6 3          (shard 1 first, then shard 0)
        rank 0/2   7 5 9 1 6                       rank 1/2   2 0 4 8 3

    Epochs: `set_epoch(e)` makes the next `iter()` run epoch e (from its start when e is a new epoch,
    from where it stopped when it is the current one); without it, an `iter()` after an exhausted
    epoch starts the next one. Both loop styles resume correctly.

    Resume: `state_dict()` records the epoch and the rows this rank has handed out in it;
    `load_state_dict` continues from there (also with another world size: the state is kept as a
    global position). A DataLoader with workers fetches ahead of the training loop: pass the rows
    the loop really consumed, `state_dict(consumed=rows_done_this_epoch)`.
    """

    def __init__(
        self,
        data: PackedDataset | int,
        *,
        shuffle: bool = True,
        seed: int = 0,
        rank: int | None = None,
        world_size: int | None = None,
        drop_last: bool = True,
        shard_aware: bool = True,
    ):
        if isinstance(data, int):
            self.num_rows, shard_rows = data, [data]
        else:
            self.num_rows, shard_rows = len(data), list(getattr(data, "shard_rows", [len(data)]))
        dist = torch.distributed.is_available() and torch.distributed.is_initialized()
        self.world_size = (
            world_size
            if world_size is not None
            else (torch.distributed.get_world_size() if dist else 1)
        )
        self.rank = rank if rank is not None else (torch.distributed.get_rank() if dist else 0)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is not in [0, world_size={self.world_size})")
        if drop_last and self.num_rows < self.world_size:
            raise ValueError(
                f"{self.num_rows} rows cannot give every one of {self.world_size} ranks a row; "
                "pack more data or use drop_last=False"
            )
        self.shuffle, self.seed = shuffle, int(seed)
        self.drop_last, self.shard_aware = drop_last, shard_aware
        self._shard_start = np.concatenate([[0], np.cumsum(shard_rows)]).astype(np.int64)
        self.epoch = 0
        self._position = 0  # rows of this epoch handed out by this rank
        self._pinned = False  # set_epoch() chose the epoch of the next iter()

    def __len__(self) -> int:
        if self.drop_last:
            return self.num_rows // self.world_size
        return -(-self.num_rows // self.world_size)

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The global row order of `epoch` (before the split across ranks), int64."""
        n = self.num_rows
        if not self.shuffle:
            return np.arange(n, dtype=np.int64)
        rng = np.random.default_rng([self.seed, epoch])
        if not self.shard_aware:
            return rng.permutation(n).astype(np.int64)
        parts = []
        for s in rng.permutation(len(self._shard_start) - 1):
            lo, hi = int(self._shard_start[s]), int(self._shard_start[s + 1])
            parts.append(lo + rng.permutation(hi - lo))
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)

    def rank_indices(self, epoch: int) -> np.ndarray:
        # cut to a multiple of the ranks (drop_last), or wrapped around: a few rows twice
        order = np.resize(self.epoch_order(epoch), len(self) * self.world_size)
        return order[self.rank :: self.world_size]

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self._position = int(epoch), 0
        self._pinned = True

    def __iter__(self) -> Iterator[int]:
        if self._position >= len(self) and not self._pinned:
            self.epoch, self._position = self.epoch + 1, 0
        self._pinned = False
        epoch = self.epoch
        indices = self.rank_indices(epoch)
        while self._position < len(indices) and self.epoch == epoch:
            i = int(indices[self._position])
            self._position += 1
            yield i

    def state_dict(self, consumed: int | None = None) -> dict[str, Any]:
        position = self._position if consumed is None else int(consumed)
        return {
            "seed": self.seed,
            "epoch": self.epoch,
            "global_position": position * self.world_size,
            "num_rows": self.num_rows,
            "shuffle": self.shuffle,
            "shard_aware": self.shard_aware,
            "drop_last": self.drop_last,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        for key in ("seed", "num_rows", "shuffle", "shard_aware", "drop_last"):
            if key in state and state[key] != getattr(self, key):
                raise ValueError(
                    f"sampler state has {key}={state[key]!r} but this sampler has {getattr(self, key)!r}; "
                    "resume with the same pack and sampler options"
                )
        self.epoch = int(state["epoch"])
        self._position = min(int(state["global_position"]) // self.world_size, len(self))
        self._pinned = False
