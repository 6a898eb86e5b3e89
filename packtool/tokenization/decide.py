"""What each input file is, decided once, from its own leading batches: `decide_file`.

    one file's batches ──decide_file──▶ FileDecision
        file          the file (a datasets folder: its label)
        kind          "chat" | "pretokenized" | None       None: no readable record in what was read
        label_source  pre-tokenized: where labels come from (packtool.tokenization.pretokenized)
        format, why   chat: the file's format and why       None: no record fits one (formats.AUTO)
        looks         with --format: what its first record is without it, else None
        error         the UsageError detection raised on its records (preference, KTO data), if any
        first         the batches read to decide, to be read again in front of the rest
        first_len     records of its first batch (0: the file holds none)

The input's kind is the kind of its first file that has one (a record carrying input_ids, with no
--format: pre-tokenized; any other readable record: chat). Each file of a folder or glob is read in
its own format, detected from its own first record whose format is found (or forced by --format):
`record_format` of one record and `is_pretokenized` are the rules, shared with `inspect`.
The local pipeline decides the files as its stream reaches them (`decided_stream`); the Ray engine
decides each file in a task of its own (packtool.cluster.files). `input_formats` sums the decisions
up for the run's meta.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from dataclasses import dataclass

from packtool.config import ReadConfig
from packtool.data.provenance import NO_FORMAT, FileFormat, formats_summary
from packtool.errors import PacktoolError, UsageError
from packtool.formats import AUTO, FormatError
from packtool.formats.detect import detect_format

NO_FIT = "no record fits a known format"


@dataclass(frozen=True)
class FileDecision:
    """What one file's leading batches say (module docstring)."""

    file: str
    kind: str | None = None
    label_source: str | None = None
    format: str | None = None
    why: str | None = None
    looks: str | None = None
    error: str | None = None
    first: tuple = ()
    first_len: int = 0

    @property
    def fmt(self) -> str:
        """The format its records are normalized with (formats.AUTO when none fits)."""
        return self.format if self.format is not None else AUTO

    @property
    def found(self) -> tuple[str, str]:
        """(format, why) as the run's meta reads it."""
        return self.fmt, self.why if self.format is not None else NO_FIT


def _records_of(b):
    """The records of a batch, parsed one by one (None where unreadable): detection usually needs
    only the first, so no more than that is parsed."""
    from packtool.io.readers import parse_json_record

    if b.raw is not None:
        yield from (parse_json_record(raw)[0] for raw in b.raw)
    elif b.records is not None:
        yield from b.records
    else:
        for a in range(0, b.arrow.num_rows, 64):
            yield from b.arrow.slice(a, 64).to_pylist()


def is_pretokenized(record, read: ReadConfig) -> bool:
    """A record (or a table's column names) carrying input_ids, with no --format, is pre-tokenized
    (never templated): the one rule, for the pipelines and `inspect`."""
    return "input_ids" in record and read.format is None


def record_format(rec, read: ReadConfig) -> tuple[str, str] | None:
    """(format, why) of one parsed record, or None where it fits no format (the step refuses it
    with its own message): a file's format is that of its first record whose format is found, for
    the pipelines and `inspect`. Preference and KTO data raise UsageError."""
    try:
        return detect_format(rec, read)
    except FormatError:
        return None


def _detect(b, read: ReadConfig, kind_too: bool = False):
    """(format, why) of the first record of batch `b` whose format is found, ("pretokenized", rec)
    for a record carrying input_ids (when `kind_too` and no --format), or None. Preference and KTO
    data raise UsageError, naming the record."""
    for i, rec in enumerate(_records_of(b)):
        if rec is None:
            continue
        if kind_too and is_pretokenized(rec, read):
            return "pretokenized", rec
        try:
            hit = record_format(rec, read)
        except UsageError as e:
            raise UsageError(f"{b.where(i)}: {e}") from None
        if hit is not None:
            return hit
    return None


def _kind(b, read: ReadConfig) -> tuple[str, str | None] | None:
    """(kind, label source) that batch `b` shows, or None (no readable record)."""
    from packtool.tokenization.pretokenized import label_source_of

    names = b.column_names()
    if names is not None and b.arrow.num_rows and is_pretokenized(names, read):
        return "pretokenized", label_source_of(names)
    hit = _detect(b, read, kind_too=True)
    if hit is not None and hit[0] == "pretokenized":
        return "pretokenized", label_source_of(hit[1])
    return ("chat", None) if hit is not None else None


def decide_file(
    file: str, batches, read: ReadConfig, kind: str | None = None, label: str | None = None
) -> FileDecision:
    """The FileDecision of one file from its batches (an iterator: read only as far as needed).
    `kind` (and `label` source): the input's when known (pre-tokenized: nothing to read; chat:
    only the file's format is looked for); None: the file's own kind is looked for too."""
    if kind == "pretokenized":
        return FileDecision(file, kind, label)
    hit = error = None
    held: list = []
    for b in batches:
        held.append(b)
        if kind is None:
            kind, label = _kind(b, read) or (None, None)
        if hit is None and error is None:
            try:
                hit = _detect(b, read)
            except UsageError as e:
                error = str(e)
        if kind is not None and (hit is not None or error is not None or kind == "pretokenized"):
            break
    looks = None
    if read.format is not None:
        free = dataclasses.replace(read, format=None)
        # a PacktoolError (preference data, say): what --format was given for
        with contextlib.suppress(PacktoolError):
            looks = next((h[0] for b in held if (h := _detect(b, free)) is not None), None)
    fmt, why = hit if hit is not None else (None, None)
    first_len = len(held[0]) if held else 0
    return FileDecision(file, kind, label, fmt, why, looks, error, tuple(held), first_len)


def input_kind(decisions) -> tuple[str, str | None]:
    """(kind, label source) of the input: its first file's that has one; "chat" when none has."""
    d = next((d for d in decisions if d.kind is not None), None)
    return (d.kind, d.label_source) if d is not None else ("chat", None)


def decided_stream(batches, read: ReadConfig):
    """The local pipeline's input, read once: (kind, label source, [FileDecision], the batches in
    order, chat batches with their file's `fmt` set). The kind is found first (on the batches up
    to the first readable record, held and read again); each file is then decided as
    the stream reaches it and appended to the list. A file's detection error is raised there,
    before any of its batches."""
    it = iter(batches)
    seen: list = []
    kind, label = "chat", None
    for b in it:
        seen.append(b)
        found = _kind(b, read)
        if found is not None:
            kind, label = found
            break
    decisions: list[FileDecision] = []

    def stream():
        for file, own in itertools.groupby(itertools.chain(seen, it), key=lambda b: b.file):
            d = decide_file(file, own, read, kind, label)
            decisions.append(dataclasses.replace(d, first=()))  # its batches are not kept
            yield from _released(d, own, kind)  # noqa: B031 - the rest of the file

    return kind, label, decisions, stream()


def _released(d: FileDecision, rest, kind: str):
    if kind == "chat" and d.error is not None:
        raise UsageError(d.error)
    for b in itertools.chain(d.first, rest):
        if kind == "chat":
            b.fmt = d.fmt
        yield b


def formats_table(decisions, per_file: dict[str, int]) -> dict[str, FileFormat]:
    """{file: FileFormat} of every file read, in reading order, from the chat input's decisions."""
    by_file = {d.file: d for d in decisions}
    out = {}
    for f, n in per_file.items():
        d = by_file.get(f)
        fmt, why = d.found if d is not None else (AUTO, NO_FIT)
        if fmt == AUTO:
            fmt = NO_FORMAT
        elif d.looks not in (None, fmt):
            why = f"{why}; its first record looks {d.looks}"
        out[f] = FileFormat(fmt, why, n)
    return out


def input_format(decisions, per_file: dict[str, int], read: ReadConfig) -> tuple[str, str]:
    """(format, why) of the whole chat input: one format (the first file's reason, as for one
    file), or a 'mixed: ...' summary (data.formats_summary)."""
    mixed = formats_summary(formats_table(decisions, per_file))
    if mixed is not None:
        return mixed
    first = next((d.found for d in decisions if d.format is not None), None)
    return first if first is not None else (read.format or "messages", "no readable record")
