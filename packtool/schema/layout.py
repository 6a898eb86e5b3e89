"""The row layout a pack was written with: documents padded to a multiple, a fixed number per row.

    --pad-to-multiple N   each document takes ceil(n/N)*N slots: its n tokens, then pad tokens of
                          the same document (context parallelism wants 2*cp_size, tensor cores 8/64)
    --fixed-docs (K)      every row's seq_lengths / source_index (/ seq_lengths_unpadded) hold
                          exactly K = --max-docs entries: its documents, then empty ones (0, -1),
                          so cu_seqlens has K + 1 segments per row (CUDA graphs: static shapes)

    real lengths        [3, 4]        N = 4, K = 3, L = 12
    slots (padded)      [4, 4, 0]     seq_lengths; seq_lengths_unpadded [3, 4, 0]
    segments            [4, 4, 0, 4]  K documents, then the pad tail (0 when the row is full)

Recorded in the manifest as `pad_to_multiple` and `fixed_docs` only when they are not the default,
so packs without them stay byte-identical to those written before the options existed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Layout:
    pad_to_multiple: int = 1  # N; 1 = documents unpadded
    fixed_docs: int = 0  # K entries per row; 0 = as many as the row holds

    @property
    def padded(self) -> bool:
        """Whether the shards carry seq_lengths_unpadded (N > 1)."""
        return self.pad_to_multiple > 1

    def slots(self, lengths) -> np.ndarray:
        """int64 slots each document takes: ceil(n/N)*N (0 stays 0)."""
        n = np.asarray(lengths, dtype=np.int64)
        m = self.pad_to_multiple
        return n if m == 1 else -(-n // m) * m

    @classmethod
    def from_manifest(cls, m: dict | None) -> Layout:
        """The layout a manifest (a dict, maybe damaged) records; values that are not usable
        integers count as the default (the manifest check reports them)."""
        m = m if isinstance(m, dict) else {}
        n = m.get("pad_to_multiple", 1)
        n = n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1
        k = m.get("max_docs", 0)
        fixed = m.get("fixed_docs") is True and isinstance(k, int) and not isinstance(k, bool)
        return cls(pad_to_multiple=n, fixed_docs=k if fixed and k > 0 else 0)
