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

from packtool import schema

MANIFEST_CHECK = "manifest"
SCHEMA = "schema"
NO_MASK = "no attention_mask"
SHARDS = "shards on disk"
SEQ = "seq_lengths"
DOC = "document_id"
POS = "position_ids"
LAB_MASK = f"labels {schema.IGNORE_INDEX} (doc starts, pad)"
LAB_EQ = "labels == input_ids"
PAD = "pad tokens"
NTOK = "num_tokens"
NLOSS = "num_loss_tokens"
SRC = "source_index"
COUNTS = "manifest counts"
CONSERVE = "conservation"
UNPAD = "seq_lengths_unpadded"
DOC_PAD = "document padding"
FIXED = "fixed docs"
ROW_CHECKS = (SEQ, DOC, POS, LAB_MASK, LAB_EQ, PAD, NTOK, NLOSS)
LAYOUT_CHECKS = (UNPAD, DOC_PAD, FIXED)


def row_checks(padded: bool, fixed: bool) -> tuple[str, ...]:
    """The row checks a pack of this layout gets: ROW_CHECKS, then the layout's own."""
    return ROW_CHECKS + ((UNPAD, DOC_PAD) if padded else ()) + ((FIXED,) if fixed else ())
