"""Packed shard schema v1 (DESIGN §3), shared by the writer, verify and the torch loader.

One row = `pack_len` token slots holding k documents back to back, then padding:

    slot          0    1    2    3  | 4    5    6  | 7    8
    input_ids     a0   a1   a2   a3 | b0   b1   b2 | pad  pad
    labels       -100  a1  -100  a3 |-100  b1   b2 |-100 -100   (prompt tokens and each doc's first: -100)
    position_ids  0    1    2    3  | 0    1    2  | 0    1      (pad tail counts as its own segment)
    document_id   0    0    0    0  | 1    1    1  | -1   -1
    seq_lengths   [4, 3]            cu_seqlens = [0, 4, 7]
    source_index  [i_a, i_b]        num_tokens = 7, num_loss_tokens = 4

There is deliberately no `attention_mask` column (an all-ones mask beside packed position_ids makes
transformers' sdpa/eager paths attend across documents).
"""

from __future__ import annotations

SCHEMA_VERSION = 1
IGNORE_INDEX = -100
PAD_DOCUMENT_ID = -1

TOKEN_COLUMNS = ("input_ids", "labels", "position_ids", "document_id")
LIST_COLUMNS = ("seq_lengths", "source_index")
SCALAR_COLUMNS = ("num_tokens", "num_loss_tokens")
COLUMNS = TOKEN_COLUMNS + LIST_COLUMNS + SCALAR_COLUMNS
FORBIDDEN_COLUMNS = ("attention_mask",)

DATA_DIR = "data"
MANIFEST = "manifest.json"


def is_pack_manifest(m) -> bool:
    """A parsed manifest.json is packtool's: a JSON object with our version keys."""
    return isinstance(m, dict) and "schema_version" in m and "packtool_version" in m


def read_pack_manifest(folder: str) -> dict | None:
    """The manifest of the pack in `folder`; None when it has none that is ours (missing, unreadable,
    another tool's)."""
    import json
    import os

    try:
        with open(os.path.join(os.path.expanduser(folder), MANIFEST), encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError):
        return None
    return m if is_pack_manifest(m) else None


def shard_name(index: int, total: int) -> str:
    """Hugging Face naming, so `datasets.load_dataset(OUT)` finds the train split."""
    return f"train-{index:05d}-of-{total:05d}.parquet"


def arrow_schema(pack_len: int):
    """The exact Arrow schema of a v1 shard for rows of `pack_len` tokens."""
    import pyarrow as pa

    fixed = pa.list_(pa.int32(), pack_len)
    return pa.schema(
        [
            pa.field("input_ids", fixed, nullable=False),
            pa.field("labels", fixed, nullable=False),
            pa.field("position_ids", fixed, nullable=False),
            pa.field("document_id", fixed, nullable=False),
            pa.field("seq_lengths", pa.list_(pa.int32()), nullable=False),
            pa.field("source_index", pa.list_(pa.int64()), nullable=False),
            pa.field("num_tokens", pa.int32(), nullable=False),
            pa.field("num_loss_tokens", pa.int32(), nullable=False),
        ],
        metadata={b"packtool_schema_version": str(SCHEMA_VERSION).encode()},
    )
