"""The pack contract: what `packtool pack` writes and everything else reads: shard.py (columns,
Arrow schema, row layout, segments), manifest.py (manifest.json, conservation rules, Notice),
rows.py (the row check). Pure: numpy only (pyarrow imported inside the functions that need it).
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
    vocab_size_of,
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
