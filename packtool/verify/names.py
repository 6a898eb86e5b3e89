"""The integrity checks' names, in report order (tests, the report and `--json` readers match them).

MANIFEST_CHECK      the manifest itself                       audit.manifest_check
SCHEMA, NO_MASK     each shard's Arrow schema                 audit.shard_schema
ROW_CHECKS          every slot of every row                   scan.scan_rows
LAYOUT_CHECKS       padded documents, fixed docs per row      scan.scan_rows (only in packs with that layout)
SHARDS              shards on disk against the manifest       audit.shards_check
SRC                 where each document came from             scan.scan_rows (per row), accounting.source_check
COUNTS, CONSERVE    the manifest's numbers against the rows   accounting.counts_check, conservation_check
"""

from __future__ import annotations

from packtool.schema.rows import (  # noqa: F401  (the row checks' names: schema/rows.py)
    DOC,
    DOC_PAD,
    FIXED,
    LAB_EQ,
    LAB_MASK,
    NLOSS,
    NTOK,
    PAD,
    POS,
    SEQ,
    SRC,
    UNPAD,
)

MANIFEST_CHECK = "manifest"
SCHEMA = "schema"
NO_MASK = "no attention_mask"
SHARDS = "shards on disk"
COUNTS = "manifest counts"
CONSERVE = "conservation"
ROW_CHECKS = (SEQ, DOC, POS, LAB_MASK, LAB_EQ, PAD, NTOK, NLOSS)
LAYOUT_CHECKS = (UNPAD, DOC_PAD, FIXED)


def row_checks(padded: bool, fixed: bool) -> tuple[str, ...]:
    """The row checks a pack of this layout gets: ROW_CHECKS, then the layout's own."""
    return ROW_CHECKS + ((UNPAD, DOC_PAD) if padded else ()) + ((FIXED,) if fixed else ())
