"""`packtool pack` as a library: TokenizedData + PackConfig → a pack folder (see run.py's drawing).

    overflow.py   --overflow: examples → pieces (pure numpy; profile predicts pack with it)
    gather.py     locating each piece's tokens in the Arrow buffers (or the cache file, by pread)
    write.py      rows → Parquet shards, writer threads (or processes), bytes independent of timing
    run.py        pack_tokenized: plan, write, manifest, conservation, warnings
    pairs.py      a preference pack's rules: overflow per pair, outcomes, the manifest's entry
    (here)        warm: the pack stage's first-use costs, paid while the run would otherwise wait

The planner is packtool.plan, the file layout packtool.io.shards. run.py's names are imported at
first use: they import the numba kernels, which a run still tokenizing does not wait for.
"""

from __future__ import annotations

from packtool.config import PackConfig
from packtool.pack.overflow import apply_overflow, overflow_loss

_RUN = ("PackResult", "pack_tokenized", "pad_id_of")


def __getattr__(name: str):
    if name in _RUN:
        from packtool.pack import run

        return getattr(run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def warm(cfg: PackConfig) -> None:
    """Pack two toy documents with `cfg`'s options into a temporary folder, through the same code as
    the real pack (packtool.idle runs it while tokenizing): a fresh process loads each numba kernel
    of the pack stage from its on-disk cache on its first call, and imports the Parquet writer, so
    every kernel meets the argument types it will meet then.

        toy table   input_ids [[1, 2], [3, 4, 5]]   labels = ids   source_index [0, 1]
            └─ pack_tokenized(toy, cfg, <temporary folder>/pack) ─▶ 1 row, 1 shard; folder removed
    """
    import dataclasses
    import tempfile
    from pathlib import Path

    import numpy as np
    import pyarrow as pa

    from packtool.data.tokenized import TokenizedData, token_batch
    from packtool.pack.run import pack_tokenized

    ids = np.array([1, 2, 3, 4, 5], dtype=np.int32)
    batch = token_batch(ids, ids, np.array([0, 2, 5]), np.array([0, 1]))
    toy = TokenizedData(
        table=pa.Table.from_batches([batch]),
        lengths=np.array([2, 3], dtype=np.int32),
        loss_counts=np.array([2, 3], dtype=np.int32),
        source_index=np.array([0, 1], dtype=np.int64),
        num_read=2,
    )
    with tempfile.TemporaryDirectory(prefix="packtool-warm-") as tmp:
        pack_tokenized(toy, dataclasses.replace(cfg, force=True), Path(tmp) / "pack")


__all__ = [
    "PackConfig",
    "PackResult",
    "apply_overflow",
    "overflow_loss",
    "pack_tokenized",
    "pad_id_of",
    "warm",
]
