"""PairDataset: a preference pack (`"task": "preference"` in manifest.json) read row by row.

A preference pack is schema v1 plus one list column, `side` (list<int8>, aligned with seq_lengths
and source_index): 0 = chosen, 1 = rejected. A pair is two adjacent documents of one row, chosen
first, both carrying the pair's source_index (its input record); documents 2j and 2j+1 of a row
are the row's pair j. Both sides start with the same prompt tokens (labels -100):

    slot          0  1  2  3  4 | 5  6  7  8 | 9 10 11 | 12 13 14 15 | 16 17
    input_ids     P  P  c  c  c | P  P  r  r | Q  Q  d | Q  Q  e  e  | pad pad
    labels       -100 -100 c c c|-100 -100 r r|-100 -100 d|-100 -100 e e|-100 -100
    seq_lengths   [5, 4, 3, 4]      side [0, 1, 0, 1]      source_index [7, 7, 12, 12]

Fixed-docs packs (--fixed-docs) list an even K entries per row, empty ones (length 0) last; with
--pad-to-multiple, seq_lengths_unpadded holds the real lengths, as for SFT.
"""

from __future__ import annotations

from pathlib import Path

from packtool.schema import SIDE_COLUMN
from packtool.torch.dataset import PackedDataset


class PairDataset(PackedDataset):
    """Map-style dataset over a preference pack: `PackedDataset`'s item plus `side` (int8 tensor,
    one entry per seq_lengths entry). An SFT pack is refused (PacktoolError): it has no pairs.
    `ds.collator(mode)` gives the `PairCollator` for this pack's layout."""

    task = "preference"

    def _wrong_task(self, manifest_path: Path, task: str) -> str:
        return (
            f"{manifest_path} is not a preference pack (task {task!r}, no chosen/rejected pairs): "
            "read it with packtool.torch.PackedDataset"
        )

    def _extra_fields(self) -> tuple:
        import pyarrow as pa

        return (pa.field(SIDE_COLUMN, pa.list_(pa.int8())),)

    @property
    def pairs(self) -> int | None:
        """The pack's pair count (manifest preference.pairs)."""
        n = (self.manifest.get("preference") or {}).get("pairs")
        return None if n is None else int(n)

    def collator(self, mode: str = "hf", **kwargs):
        """A PairCollator for this pack's layout (fixed_docs passed on)."""
        from packtool.torch.pair_collate import PairCollator

        return PairCollator(mode, fixed_docs=self.fixed_docs, **kwargs)
