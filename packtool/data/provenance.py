"""Where the records came from: the files read (SourceFile), how each was read (FileFormat), and
the records that were not tokenized (SkippedRecord).

    SourceFile     path, size, sha256                       the manifest's `sources`
    FileFormat     format, reason, records                  per file read; NO_FORMAT: none fits
    SkippedRecord  source_index, file, line | record, reason    --on-error skip
    where          a record named within its own file: 'data.jsonl:12', 'data.json record 3'
    short_names    paths → names relative to their shared folder (for messages)
    formats_summary   {path: FileFormat} → ("mixed: alpaca (a.json 91), ...", why) or None
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

NO_FORMAT = "none"  # FileFormat.format of a file none of whose records fits a known format
NAMED_PER_FORMAT = 3


@dataclass(frozen=True)
class SkippedRecord:
    """A record that was not tokenized: where it was and why.

    `line`: its 1-based line (JSON Lines), else None. `record`: its 0-based index within its file
    (a JSON array, Parquet), recorded only where that differs from `source_index` (a file after the
    first of a folder or glob), so the entries of a single file read as they always did."""

    source_index: int
    file: str
    line: int | None
    reason: str
    record: int | None = None

    def to_json(self) -> dict[str, Any]:
        # a dict literal, not dataclasses.asdict: that deep-copies, per skipped record
        out = {
            "source_index": self.source_index,
            "file": self.file,
            "line": self.line,
            "reason": self.reason,
        }
        if self.record is not None:
            out["record"] = self.record
        return out

    @property
    def position(self) -> int:
        """Its 0-based index within its file (where `line` is None)."""
        return self.source_index if self.record is None else self.record

    @property
    def where(self) -> str:
        return where(self.file, self.line, self.position)


def where(file: str, line: int | None, position: int) -> str:
    """'data.jsonl:12' (its line) or 'data.json record 3' (its 0-based position), both within the
    record's own file: how every message names a record."""
    return f"{file}:{line}" if line is not None else f"{file} record {position}"


@dataclass(frozen=True)
class SourceFile:
    path: str
    size: int
    sha256: str


class FileFormat(NamedTuple):
    """How one input file was read: its format (detected from its own records, or forced), why, and
    how many records were read from it (skipped ones included)."""

    format: str
    reason: str
    records: int


def short_names(paths) -> dict[str, str]:
    """Each path relative to the folder the paths share (a folder or glob's root), or its basename
    when there is one path: {"data/sub/a.jsonl": "sub/a.jsonl", ...}. For messages and summaries."""
    import os

    paths = list(dict.fromkeys(paths))
    if len(paths) <= 1:
        return {p: os.path.basename(p) or p for p in paths}
    try:
        root = os.path.commonpath([os.path.dirname(p) for p in paths])
    except ValueError:  # absolute and relative paths mixed
        return {p: p for p in paths}
    return {p: os.path.relpath(p, root) if root else p for p in paths}


def formats_summary(formats: dict[str, FileFormat]) -> tuple[str, str] | None:
    """(format, reason) of an input whose files were read in two or more formats, e.g.
    ('mixed: alpaca (identity.json 91), sharegpt (a.json 300, b.json 500)', 'each file's format ...');
    None when one format covers every file (then the input's format is that one, as for one file).
    At most NAMED_PER_FORMAT files are named per format; beyond that, how many."""
    groups: dict[str, list[tuple[str, int]]] = {}
    names = short_names(formats)
    for path, f in formats.items():
        if f.format != NO_FORMAT:
            groups.setdefault(f.format, []).append((names[path], f.records))
    if len(groups) < 2:
        return None
    parts = []
    for fmt, files in sorted(groups.items()):
        if len(files) <= NAMED_PER_FORMAT:
            parts.append(f"{fmt} ({', '.join(f'{n} {k}' for n, k in files)})")
        else:
            parts.append(f"{fmt} ({len(files)} files, {sum(k for _, k in files)} records)")
    why = f"each file's format detected from its own records ({len(formats)} files)"
    return "mixed: " + ", ".join(parts), why
