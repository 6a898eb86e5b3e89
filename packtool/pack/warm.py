"""The pack stage's first-use costs, paid while the run would otherwise wait (packtool.idle).

A fresh process loads each numba kernel of the pack stage from its on-disk cache on its first call
(6 of them; ~0.3-0.5 s in all on 2 cores) and imports the Parquet writer. `warm(cfg)` packs two toy
documents with `cfg`'s options into a temporary folder through the same code as the real pack, so
every kernel meets the argument types it will meet then:

    toy table   input_ids [[1, 2], [3, 4, 5]]   labels = ids   source_index [0, 1]
        └─ pack_tokenized(toy, cfg, <temporary folder>/pack) ─▶ 1 row, 1 shard; the folder removed
"""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

import numpy as np

from packtool.config import PackConfig


def warm(cfg: PackConfig) -> None:
    import pyarrow as pa

    from packtool.data.arrow import token_batch
    from packtool.data.tokenized import TokenizedData
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
