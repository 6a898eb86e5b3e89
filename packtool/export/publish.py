"""Where an export is written: refuse to overwrite, replace only an earlier export, publish atomically.

    OUT exists, no --force        UsageError (io.shards.check_target's message, as for pack)
    OUT exists, --force           replaced only when empty or an earlier export: export.json names
                                  every file in it (anything else is refused, with its name)
    writing                       into .OUT.packtool-tmp-<pid>-<host>-XXXX beside OUT, renamed to
                                  OUT at the end; any error or Ctrl-C removes it and leaves OUT as
                                  it was; one that a run which died (kill -9) left is removed by
                                  the next export or pack there (io.files), and said

The writing is io.shards.atomic_output's (the same as a pack's), given check_export_target as
its check of what may be replaced. ExportResult is what an export wrote (files, sizes, the record).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packtool.errors import UsageError
from packtool.io import shards

RECORD = "export.json"  # packtool's record of an export: what, from where, which files
RECORD_KEY = "packtool_export"  # the key that marks the record as ours


@dataclass
class ExportResult:
    """What an export wrote: the API's result, rendered by report/pack.py."""

    format: str
    pack: str
    out: str
    files: dict[str, str]  # role (data, metadata, record) → path
    bytes: dict[str, int]  # role → file size
    record: dict[str, Any]  # export.json as written
    warnings: list = field(default_factory=list)  # schema.Notice
    seconds: dict[str, float] = field(default_factory=dict)  # never in export.json


def _not_an_export(out: Path) -> str | None:
    """None when the folder `out` may be replaced (empty, or exactly what an export wrote)."""
    names = sorted(p.name for p in out.iterdir())
    if not names:
        return None
    record = out / RECORD
    if not record.is_file() or record.is_symlink():
        return f"it is not empty and holds no {RECORD} (not a packtool export)"
    try:
        rec = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return f"its {RECORD} is not packtool's (unreadable: {type(e).__name__})"
    if not isinstance(rec, dict) or RECORD_KEY not in rec or not isinstance(rec.get("files"), dict):
        return f"its {RECORD} is not packtool's (no {RECORD_KEY} and files)"
    ours = {RECORD, *(str(v) for v in rec["files"].values())}
    foreign = [
        n for n in names if n not in ours or not (out / n).is_file() or (out / n).is_symlink()
    ]
    if foreign:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        return f"it holds {foreign[0]}{more}, which packtool export did not write"
    return None


def check_export_target(out: Path, force: bool) -> None:
    """UsageError unless `out` may be written: absent, or (with --force) empty or an earlier export."""
    out = Path(out)
    if not out.exists() and not out.is_symlink():
        return
    if not force or not out.is_dir() or out.is_symlink():
        shards.check_target(out, force)  # raises: exists without --force, or not a folder
    why = _not_an_export(out)
    if why is not None:
        raise UsageError(
            f"refusing to replace {out}: {why}; remove it yourself or choose another --out"
        )
