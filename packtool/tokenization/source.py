"""The record source: where the input is, its batches of raw records, and what was skipped.

    RecordSource(data, read)
        .files      [SourceFile(path, size, sha256)]      located once (raises for a missing path)
        .batches()  RawBatch, RawBatch, ...                one file each, with start index and lines
        .reject(batch, i, reason) / .reject_at(index, file, line, reason)
                    --on-error error: PacktoolError "data.jsonl:12: <reason>; fix the record, or ..."
                    --on-error skip:  counted and listed in .skipped (file, line, reason)

Every stage that can refuse a record (reading, format, template, tokenization, pre-tokenized
validation) reports it here with the record's real provenance, so the manifest names the file and
line of each skipped record, whichever process found the problem.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from packtool.config import ReadConfig
from packtool.data import SkippedRecord, SourceFile
from packtool.errors import PacktoolError
from packtool.io import readers
from packtool.io.files import sha256_file


class RecordSource:
    def __init__(self, data: str, read: ReadConfig):
        self.data, self.read = data, read
        _not_a_pack(data)
        self.located = readers.locate(data, read.split)
        if self.located.kind == "files":
            paths = list(self.located.files)
        else:
            paths = [f["filename"] for f in self.located.dataset.cache_files]
        self.files = [SourceFile(path=p, size=os.path.getsize(p), sha256=sha256_file(p)) for p in sorted(paths)]
        self.skipped: list[SkippedRecord] = []
        self.num_read = 0

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def batches(self, batch_records: int = readers.BATCH_RECORDS) -> Iterator[readers.RawBatch]:
        for b in readers.iter_batches(self.located, self.read, batch_records):
            self.num_read += len(b)
            yield b

    def reject_at(self, index: int, file: str, line: int | None, reason: str) -> None:
        skipped = SkippedRecord(int(index), file, line, reason)
        if self.read.on_error == "error":
            raise PacktoolError(f"{skipped.where}: {reason}; fix the record, or pass --on-error skip to count and "
                                "list bad records")
        self.skipped.append(skipped)

    def reject(self, batch: readers.RawBatch, i: int, reason: str) -> None:
        self.reject_at(batch.start + i, batch.file, batch.line_of(i), reason)


def _not_a_pack(data: str) -> None:
    """A pack folder given where training data is expected: say what it is and what to run."""
    from packtool import schema
    from packtool.errors import UsageError

    m = schema.read_pack_manifest(data)
    if m is not None:
        sources = ", ".join(str(x.get("path")) for x in m.get("sources") or [] if isinstance(x, dict))
        raise UsageError(f"{data} is a packtool pack, not training data: `packtool verify {data}` checks it"
                         + (f"; it was packed from {sources}" if sources else ""))
