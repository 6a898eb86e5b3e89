"""A pack in other trainers' formats: `packtool export PACK --to FORMAT --out DIR`.

    reader.py    PackReader: the pack's documents, batch by batch (pad tails, empty and pad slots
                 dropped), shard hashes and totals checked against the manifest
    publish.py   the output folder: refuse to overwrite, --force replaces only an earlier export,
                 atomic publication (io.shards.atomic_output); ExportResult, what an export wrote
    nemo.py      NeMo / Megatron-Bridge GPTSFTPackedDataset: training_{L}.npy + {L}_metadata.jsonl

Light at import (numpy and pyarrow are imported by the format modules, on use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from packtool.export.publish import ExportResult

FORMATS = ("nemo",)


def export_pack(pack: str, to: str, out: str, force: bool = False, progress=None) -> ExportResult:
    """Write the pack folder `pack` in format `to` into the folder `out`."""
    from packtool.errors import UsageError

    if to not in FORMATS:
        raise UsageError(
            f"--to {to!r} is not a format packtool exports; choose {' | '.join(FORMATS)}"
        )
    from packtool.export.nemo import export_nemo

    return export_nemo(pack, out, force=force, progress=progress)
