"""Packed shard schema v1: columns, constants and the Arrow schema (docs/ARCHITECTURE.md, "Schema").

One row = `pack_len` token slots holding k documents back to back, then padding:

    slot          0    1    2    3  | 4    5    6  | 7    8
    input_ids     a0   a1   a2   a3 | b0   b1   b2 | pad  pad
    labels       -100  a1  -100  a3 |-100  b1   b2 |-100 -100   (prompt tokens and each doc's first: -100)
    position_ids  0    1    2    3  | 0    1    2  | 0    1      (pad tail: its own segment, see segments.py)
    document_id   0    0    0    0  | 1    1    1  | -1   -1
    seq_lengths   [4, 3]            cu_seqlens = [0, 4, 7]
    source_index  [i_a, i_b]        num_tokens = 7, num_loss_tokens = 4

Layouts for context parallelism and CUDA graphs (`schema/layout.py`; --pad-to-multiple N,
--fixed-docs with --max-docs K): each document takes ceil(n/N)*N slots, its own tokens then pad
tokens of the same document (labels -100, positions continuing); `seq_lengths` holds those padded
slot counts (so positions, document_id and cu_seqlens agree for a reader that ignores the rest) and
the extra column `seq_lengths_unpadded` (only when N > 1) the real ones. With fixed docs every
row's lists are exactly K long: the documents, then empty entries (0, source_index -1).

    N = 4, K = 3        0    1    2    3  | 4    5    6    7  | 8  ... 11
    input_ids           a0   a1   a2   pad| b0   b1   b2   b3 | pad ...      (L = 12)
    labels             -100  a1   a2  -100|-100  b1   b2   b3 |-100 ...
    position_ids        0    1    2    3  | 0    1    2    3  | 0 1 2 3
    document_id         0    0    0    0  | 1    1    1    1  | -1 ...
    seq_lengths         [4, 4, 0]           seq_lengths_unpadded [3, 4, 0]
    source_index        [i_a, i_b, -1]      num_tokens 7 (real tokens only)

There is deliberately no `attention_mask` column (an all-ones mask beside packed position_ids makes
transformers' sdpa/eager paths attend across documents).
"""

from __future__ import annotations

SCHEMA_VERSION = 1
IGNORE_INDEX = -100
PAD_DOCUMENT_ID = -1

TOKEN_COLUMNS = ("input_ids", "labels", "position_ids", "document_id")
LIST_COLUMNS = ("seq_lengths", "source_index")
UNPADDED_COLUMN = "seq_lengths_unpadded"  # only in packs written with --pad-to-multiple N > 1
SCALAR_COLUMNS = ("num_tokens", "num_loss_tokens")
COLUMNS = TOKEN_COLUMNS + LIST_COLUMNS + SCALAR_COLUMNS
FORBIDDEN_COLUMNS = ("attention_mask",)

DATA_DIR = "data"
MANIFEST = "manifest.json"


def shard_name(index: int, total: int) -> str:
    """Hugging Face naming, so `datasets.load_dataset(OUT)` finds the train split."""
    return f"train-{index:05d}-of-{total:05d}.parquet"


def arrow_schema(pack_len: int, padded: bool = False):
    """The exact Arrow schema of a v1 shard for rows of `pack_len` tokens; `padded` (a pack written
    with --pad-to-multiple N > 1) adds the list<int32> column seq_lengths_unpadded at the end."""
    import pyarrow as pa

    fixed, ints = pa.list_(pa.int32(), pack_len), pa.list_(pa.int32())
    types = [fixed] * 4 + [ints, pa.list_(pa.int64())] + [pa.int32()] * 2  # in COLUMNS' order
    fields = [pa.field(n, t, nullable=False) for n, t in zip(COLUMNS, types, strict=True)]
    if padded:
        fields.append(pa.field(UNPADDED_COLUMN, ints, nullable=False))
    return pa.schema(fields, metadata={b"packtool_schema_version": str(SCHEMA_VERSION).encode()})


def pack_len_of(got) -> int | None:
    """The row length of a shard from its Arrow schema (input_ids' fixed list size); None if absent."""
    i = got.get_field_index("input_ids")
    return None if i < 0 else getattr(got.field(i).type, "list_size", None)


def shard_schema_problems(got, pack_len: int, padded: bool = False) -> list[str]:
    """What is wrong with a shard's Arrow schema `got` for rows of `pack_len` tokens (empty: nothing);
    `padded`: the manifest says the pack was written with --pad-to-multiple N > 1.

    The one shard-schema check: verify reports the problems, the trainer-side dataset refuses the
    shard. A forbidden column (attention_mask) is named first: it is the mistake that matters."""
    want = arrow_schema(pack_len, padded)
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
