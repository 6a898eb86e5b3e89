"""PairCollator: preference-pack rows -> `PackedCollator`'s batch plus `batch["pairs"]`, which says
where each document of the batch lies, which side it is and which pair it belongs to.

Documents are numbered through the batch in row order (d = 0 .. D-1, D = 2P); pair p is documents
2p (chosen) and 2p+1 (rejected). For two rows of L = 10 (mode "hf"; flat positions b*L + t):

    row 0   P P c c | P P r | p p p        row 1   Q c' | Q r' r' | p p p p
    document  0 0 0 0 1 1 1 -1 -1 -1               2 2  3 3 3  -1 -1 -1 -1 -1

    pairs["side"]          [0, 1, 0, 1]     int64 [D]   0 chosen, 1 rejected
    pairs["pair"]          [0, 0, 1, 1]     int64 [D]   the pair each document belongs to
    pairs["last"]          [3, 6, 11, 14]   int64 [D]   flat position of each document's last real token
    pairs["source_index"]  [7, 12]          int64 [P]   the pair's input record
    pairs["tokens_hash"]   [h0, h1]         int64 [P]   hash of both sides' ids and labels
    pairs["document"]      as above         int64, the shape of batch["labels"]: the document of each
                                            slot, -1 on the pad tail and --pad-to-multiple padding

The model gets `model_inputs(batch)` (the batch without labels and pairs); `sequence_logps`,
`pair_loss`, `ReferenceLogps` and `side_scores` read `batch["pairs"]`. A row that breaks the pair
layout (an odd number of documents, sides out of order, a pair's two sources differing: a pair
split across rows) is refused with a ValueError, never trained.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from packtool import schema
from packtool.schema import SIDE_COLUMN
from packtool.torch.collate import PackedCollator

CHOSEN, REJECTED = 0, 1  # the side column's codes (manifest preference.sides)

PAIRS = "pairs"


def model_inputs(batch: Mapping[str, Any]) -> dict[str, Any]:
    """What the model's forward takes: the batch without `labels` (the pair losses read them, the
    model would only add a cross-entropy) and `pairs`."""
    return {k: v for k, v in batch.items() if k not in ("labels", PAIRS)}


def tokens_hash(sides: Sequence[tuple[np.ndarray, np.ndarray]]) -> int:
    """int64 hash (blake2b, 8 bytes) of a pair's documents: each side's length, ids and labels."""
    h = hashlib.blake2b(digest_size=8)
    for ids, labels in sides:
        h.update(np.int64(len(ids)).tobytes())
        h.update(np.ascontiguousarray(ids, dtype="<i4").tobytes())
        h.update(np.ascontiguousarray(labels, dtype="<i4").tobytes())
    return int.from_bytes(h.digest(), "little", signed=True)


def _row_documents(
    f: Mapping[str, Any], r: int
) -> tuple[list[int], list[int], list[int], list[int]]:
    """(slot starts, real lengths, sides, sources) of the documents of row `r`, checked against the
    pair layout."""
    seq = np.asarray(f["seq_lengths"], dtype=np.int64)
    real = np.asarray(f.get(schema.UNPADDED_COLUMN, seq), dtype=np.int64)
    if SIDE_COLUMN not in f:
        raise KeyError(
            f"batch items have no {SIDE_COLUMN!r}: read a preference pack with PairDataset (and "
            "pass remove_unused_columns=False to a Trainer)"
        )
    side = np.asarray(f[SIDE_COLUMN], dtype=np.int64)
    src = np.asarray(f["source_index"], dtype=np.int64)
    if not len(seq) == len(real) == len(side) == len(src):
        raise ValueError(f"row {r}: seq_lengths, side and source_index differ in length")
    starts = np.concatenate([[0], np.cumsum(seq)[:-1]])
    docs = np.flatnonzero(seq > 0)  # fixed docs: the empty entries are no documents
    if len(docs) % 2:
        raise ValueError(
            f"row {r} holds {len(docs)} documents: a pair is split across rows (run packtool verify)"
        )
    want = np.tile([CHOSEN, REJECTED], len(docs) // 2)
    if not np.array_equal(side[docs], want):
        raise ValueError(
            f"row {r}: sides {side[docs].tolist()}, expected chosen, rejected alternating "
            "(run packtool verify)"
        )
    if not np.array_equal(src[docs][0::2], src[docs][1::2]):
        raise ValueError(
            f"row {r}: the two sides of a pair come from different records "
            f"({src[docs].tolist()}): a pair is split across rows (run packtool verify)"
        )
    return starts[docs].tolist(), real[docs].tolist(), side[docs].tolist(), src[docs].tolist()


class PairCollator(PackedCollator):
    """`PackedCollator` for preference packs: the same modes, options and batch (cu_seq_lens,
    seq_idx, `for_model`), plus `batch["pairs"]` (drawn in this module's docstring)."""

    def __call__(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        batch = super().__call__(features)
        batch[PAIRS] = self._pairs(features, batch["labels"].shape)
        return batch

    def _pairs(self, features, shape) -> dict[str, torch.Tensor]:
        pack_len = int(np.asarray(features[0]["input_ids"]).shape[-1])
        dropped = self.mode == "varlen" and self.drop_padding
        document = np.full(shape, -1, dtype=np.int64).reshape(-1)
        side, last, source, hashes = [], [], [], []
        offset = 0  # flat position of the row's slot 0
        for r, f in enumerate(features):
            starts, lengths, sides, sources = _row_documents(f, r)
            ids, labels = np.asarray(f["input_ids"]), np.asarray(f["labels"])
            spans = []
            for a, n, s in zip(starts, lengths, sides, strict=True):
                document[offset + a : offset + a + n] = len(side)
                side.append(s)
                last.append(offset + a + n - 1)
                spans.append((ids[a : a + n], labels[a : a + n]))
            source += sources[0::2]
            hashes += [tokens_hash(spans[i : i + 2]) for i in range(0, len(spans), 2)]
            offset += int(np.asarray(f["seq_lengths"]).sum()) if dropped else pack_len
        d = torch.arange(len(side), dtype=torch.int64)
        return {
            "side": torch.tensor(side, dtype=torch.int64),
            "pair": d // 2,
            "last": torch.tensor(last, dtype=torch.int64),
            "source_index": torch.tensor(source, dtype=torch.int64),
            "tokens_hash": torch.tensor(hashes, dtype=torch.int64),
            "document": torch.from_numpy(document.reshape(shape)),
        }
