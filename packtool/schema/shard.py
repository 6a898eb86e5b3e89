"""A packed shard, schema v1 (docs/ARCHITECTURE.md, "Schema"): its columns and Arrow schema, the row
layout, and the segments: the one definition of where attention may look.

One row = `pack_len` token slots holding k documents back to back, then padding. Every document is a
segment and the pad tail (when the documents do not fill the row) one more of its own:

    slot          0    1    2    3  | 4    5    6  | 7    8
    input_ids     a0   a1   a2   a3 | b0   b1   b2 | pad  pad
    labels       -100  a1  -100  a3 |-100  b1   b2 |-100 -100   (prompt tokens and each doc's first: -100)
    position_ids  0    1    2    3  | 0    1    2  | 0    1      (restart at every segment)
    document_id   0    0    0    0  | 1    1    1  | -1   -1     (pad tail: PAD_DOCUMENT_ID)
    seq_lengths   [4, 3]            segments [4, 3, 2]   cu_seqlens [0, 4, 7, 9] (int32, rows end to end)
    source_index  [i_a, i_b]        num_tokens = 7, num_loss_tokens = 4

Layouts (`Layout`) for context parallelism and CUDA graphs: --pad-to-multiple N gives each document
ceil(n/N)*N slots, its own tokens then pad tokens of the same document (labels -100, positions
continuing); `seq_lengths` holds those padded slot counts (so positions, document_id and cu_seqlens
agree for a reader that ignores the rest) and `seq_lengths_unpadded` (only when N > 1) the real ones.
--fixed-docs (K = --max-docs) makes every row's lists exactly K long: the documents, then empty
entries (0, source_index -1); the pad tail is then a segment even when empty, so a batch of B rows
has B*(K+1)+1 cu_seqlens entries whatever the rows hold:

    N = 4, K = 3        0    1    2    3  | 4    5    6    7  | 8  ... 11
    input_ids           a0   a1   a2   pad| b0   b1   b2   b3 | pad ...      (L = 12)
    labels             -100  a1   a2  -100|-100  b1   b2   b3 |-100 ...
    position_ids        0    1    2    3  | 0    1    2    3  | 0 1 2 3
    document_id         0    0    0    0  | 1    1    1    1  | -1 ...
    seq_lengths         [4, 4, 0]           seq_lengths_unpadded [3, 4, 0]
    source_index        [i_a, i_b, -1]      num_tokens 7 (real tokens only)
    segments            [4, 4, 0, 4]        cu_seqlens_unpadded counts real tokens, 0 for the tail

The writer's kernel (`pack.gather.layout_rows`) lays rows out by this rule; every reader's
segments come from these functions. There is deliberately no `attention_mask` column (an all-ones
mask beside packed position_ids makes transformers' sdpa/eager paths attend across documents).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

SCHEMA_VERSION = 1
IGNORE_INDEX = -100
PAD_DOCUMENT_ID = -1

TOKEN_COLUMNS = ("input_ids", "labels", "position_ids", "document_id")
LIST_COLUMNS = ("seq_lengths", "source_index")
UNPADDED_COLUMN = "seq_lengths_unpadded"  # only in packs written with --pad-to-multiple N > 1
SIDE_COLUMN = "side"  # only in preference packs: per document 0 (chosen) or 1 (rejected)
SCALAR_COLUMNS = ("num_tokens", "num_loss_tokens")
COLUMNS = TOKEN_COLUMNS + LIST_COLUMNS + SCALAR_COLUMNS
FORBIDDEN_COLUMNS = ("attention_mask",)

DATA_DIR = "data"
MANIFEST = "manifest.json"


def shard_name(index: int, total: int) -> str:
    """Hugging Face naming, so `datasets.load_dataset(OUT)` finds the train split."""
    return f"train-{index:05d}-of-{total:05d}.parquet"


def arrow_schema(pack_len: int, padded: bool = False, pairs: bool = False):
    """The exact Arrow schema of a v1 shard for rows of `pack_len` tokens; `padded` (N > 1) adds
    seq_lengths_unpadded, `pairs` (a preference pack) then side, at the end."""
    import pyarrow as pa

    fixed, ints = pa.list_(pa.int32(), pack_len), pa.list_(pa.int32())
    types = [fixed] * 4 + [ints, pa.list_(pa.int64())] + [pa.int32()] * 2  # in COLUMNS' order
    fields = [pa.field(n, t, nullable=False) for n, t in zip(COLUMNS, types, strict=True)]
    if padded:
        fields.append(pa.field(UNPADDED_COLUMN, ints, nullable=False))
    if pairs:
        fields.append(pa.field(SIDE_COLUMN, pa.list_(pa.int8()), nullable=False))
    return pa.schema(fields, metadata={b"packtool_schema_version": str(SCHEMA_VERSION).encode()})


def pack_len_of(got) -> int | None:
    """The row length of a shard from its Arrow schema (input_ids' fixed list size); None if absent."""
    i = got.get_field_index("input_ids")
    return None if i < 0 else getattr(got.field(i).type, "list_size", None)


def shard_schema_problems(
    got, pack_len: int, padded: bool = False, pairs: bool = False
) -> list[str]:
    """What is wrong with a shard's Arrow schema `got` (as arrow_schema's arguments say it should
    be); empty: nothing. The one shard-schema check (verify reports, the trainer-side dataset
    refuses); a forbidden column (attention_mask) is named first: it is the mistake that matters."""
    want = arrow_schema(pack_len, padded, pairs)
    problems = [
        f"forbidden column {c!r} (schema v{SCHEMA_VERSION} has none)"
        for c in FORBIDDEN_COLUMNS
        if c in got.names
    ]
    for f in want:
        i = got.get_field_index(f.name)
        if i < 0:
            problems.append(f"column {f.name} is missing")
        elif not got.field(i).type.equals(f.type):
            problems.append(f"column {f.name} is {got.field(i).type}, expected {f.type}")
    extra = [n for n in got.names if n not in want.names and n not in FORBIDDEN_COLUMNS]
    if extra:
        problems.append(f"unexpected columns {extra}")
    ver = (got.metadata or {}).get(b"packtool_schema_version")
    if ver is not None and ver != str(SCHEMA_VERSION).encode():
        problems.append(f"schema version {ver.decode()} != {SCHEMA_VERSION}")
    return problems


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
        """The layout a manifest (maybe damaged: unusable values count as the default) records."""
        m = m if isinstance(m, dict) else {}
        n = m.get("pad_to_multiple", 1)
        n = n if isinstance(n, int) and not isinstance(n, bool) and n >= 1 else 1
        k = m.get("max_docs", 0)
        fixed = m.get("fixed_docs") is True and isinstance(k, int) and not isinstance(k, bool)
        return cls(pad_to_multiple=n, fixed_docs=k if fixed and k > 0 else 0)


def row_segments(seq_lengths: Sequence[int], pack_len: int, fixed: bool = False) -> list[int]:
    """The row's segment lengths: its documents, then the pad tail when there is one (`fixed`:
    seq_lengths already K long, empty entries last; the tail kept even when empty)."""
    lengths = [int(n) for n in seq_lengths]
    used = sum(lengths)
    if used > pack_len:
        raise ValueError(f"seq_lengths sum to {used} > pack_len {pack_len}")
    if fixed:
        nonzero = [i for i, n in enumerate(lengths) if n]
        if nonzero and nonzero[-1] + 1 != len(nonzero) or any(n < 0 for n in lengths):
            raise ValueError(f"seq_lengths {lengths}: empty entries must come last (fixed docs)")
    if used < pack_len or fixed:
        lengths.append(pack_len - used)
    return lengths


def cu_seqlens(rows: Iterable[Sequence[int]], pack_len: int, fixed: bool = False) -> np.ndarray:
    """int32 cumulative segment boundaries over `rows` laid end to end, starting with 0 (`fixed`:
    K + 1 segments per row, see row_segments)."""
    segs = [n for lens in rows for n in row_segments(lens, pack_len, fixed)]
    return np.concatenate(([0], np.cumsum(segs, dtype=np.int64))).astype(np.int32)


def cu_seqlens_unpadded(
    rows: Iterable[Sequence[int]],
    unpadded: Iterable[Sequence[int]],
    pack_len: int,
    fixed: bool = False,
) -> np.ndarray:
    """The segments of `cu_seqlens(rows, pack_len, fixed)` counted in real tokens: each document's
    unpadded length, 0 for the pad tail (same number of entries; int32, starting with 0)."""
    segs: list[int] = []
    for lens, real in zip(rows, unpadded, strict=True):
        real = [int(n) for n in real]
        if len(real) != len(lens):
            raise ValueError(f"seq_lengths {list(lens)} and unpadded {real} differ in length")
        segs += real + [0] * (len(row_segments(lens, pack_len, fixed)) - len(real))
    return np.concatenate(([0], np.cumsum(segs, dtype=np.int64))).astype(np.int32)


def position_ids(seq_lengths: Sequence[int], pack_len: int) -> np.ndarray:
    """int32 [pack_len]: 0, 1, ... restarting at every segment (the pad tail included)."""
    runs = [np.arange(n, dtype=np.int32) for n in row_segments(seq_lengths, pack_len)]
    return np.concatenate(runs or [np.zeros(0, np.int32)])


def document_ids(seq_lengths: Sequence[int], pack_len: int) -> np.ndarray:
    """int32 [pack_len]: the document's index in the row, PAD_DOCUMENT_ID on the pad tail."""
    out = np.full(pack_len, PAD_DOCUMENT_ID, dtype=np.int32)
    at = 0
    for d, n in enumerate(int(x) for x in seq_lengths):
        out[at : at + n] = d
        at += n
    return out


def segment_starts(
    row_starts: np.ndarray, doc_starts: np.ndarray, pad_starts: np.ndarray, n: int
) -> np.ndarray:
    """For `n` slots of rows laid end to end, the flat index where each slot's segment starts, from
    the starts of rows, documents and pad tails (bulk `position_ids`: slot - segment start)."""
    idx_t = row_starts.dtype
    seg = np.zeros(n, idx_t)
    seg[row_starts] = row_starts
    seg[doc_starts] = doc_starts
    seg[pad_starts] = pad_starts
    np.maximum.accumulate(seg, out=seg)
    return seg
