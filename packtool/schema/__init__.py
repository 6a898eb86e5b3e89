"""The pack contract: what `packtool pack` writes and everything else reads.

    shard.py      a shard: constants (IGNORE_INDEX, column names, SCHEMA_VERSION), its Arrow schema and
                  the one shard-schema check; the row layout (documents padded to a multiple of N,
                  K entries per row); the segments, where attention may look (cu_seqlens, position_ids)
    manifest.py   manifest.json as a typed Manifest (to/from JSON), the conservation rules, and
                  structured warnings (Notice: code, message, count, items)
    rows.py       the row check: every slot of a batch of rows against its seq_lengths (verify, export)

Pure: numpy only (pyarrow is imported inside the functions that take or build Arrow schemas).
"""

# ruff: noqa: F401  (the names below are re-exported)

from packtool.schema.manifest import (
    Counts,
    Manifest,
    ManifestError,
    Notice,
    Tokens,
    conservation_problems,
    is_pack_manifest,
    read_pack_manifest,
)
from packtool.schema.shard import (
    COLUMNS,
    DATA_DIR,
    FORBIDDEN_COLUMNS,
    IGNORE_INDEX,
    LIST_COLUMNS,
    MANIFEST,
    PAD_DOCUMENT_ID,
    SCALAR_COLUMNS,
    SCHEMA_VERSION,
    SIDE_COLUMN,
    TOKEN_COLUMNS,
    UNPADDED_COLUMN,
    Layout,
    arrow_schema,
    cu_seqlens,
    cu_seqlens_unpadded,
    document_ids,
    pack_len_of,
    position_ids,
    row_segments,
    segment_starts,
    shard_name,
    shard_schema_problems,
)
