"""The record source: where the input is, its batches of raw records, and what was skipped.

    RecordSource(data, read)
        .files      [SourceFile(path, size, sha256)]   hashed in a thread meanwhile (waits for it)
        .batches()  RawBatch, RawBatch, ...             one file each, with start index and lines
        .reject(batch, i, reason)   --on-error error: PacktoolError "data.jsonl:12: <reason>; ..."
                                    --on-error skip:  counted and listed in .skipped

Every stage that can refuse a record reports it here with its real provenance (file and line, or
position), whichever process found the problem.

What each input file is, decided once, from its own leading batches (`decide_file`):

    one file's batches ──decide_file──▶ FileDecision
        kind          "chat" | "pretokenized" | None       None: no readable record in what was read
        label_source  pre-tokenized: where labels come from (packtool.tokenization.pretokenized)
        format, why   chat: the file's format and why       None: no record fits one (formats.AUTO)
        looks         with --format: what its first record is without it, else None
        error         the UsageError detection raised on its records (preference, KTO data), if any
        first         the batches read to decide, to be read again in front of the rest
        first_len     records of its first batch (0: the file holds none)

The input's kind is its first file's that has one; each file of a folder or glob is read in its
own format (`record_format` and `is_pretokenized`: the rules, shared with `inspect`). The local
pipeline decides the files as its stream reaches them (`decided_stream`), the Ray engine each in
a task of its own.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from packtool.config import ReadConfig
from packtool.data.tokenized import (
    NO_FORMAT,
    FileFormat,
    SkippedRecord,
    SourceFile,
    formats_summary,
    short_names,
)
from packtool.errors import PacktoolError, UsageError
from packtool.formats import AUTO, FormatError
from packtool.formats.detect import detect_format
from packtool.io import readers
from packtool.io.files import sha256_file
from packtool.io.sources import locate
from packtool.schema import read_pack_manifest
from packtool.schema.manifest import group_reasons

SKIP_SHARE = 0.01  # above this share of the records read, a skip run says so loudly
MAX_LISTED = 20  # record positions quoted
TOP_REASONS = 3
REASON_CHARS = 100  # a reason quoted in the warning is cut at a word boundary beyond this


def _hash_in_thread(paths: list[str]):
    """A future of the files' sha256 (hashlib releases the GIL: the hash runs beside the reading,
    not before it)."""
    from concurrent.futures import Future

    future: Future = Future()

    def run() -> None:
        try:
            future.set_result([sha256_file(p) for p in paths])
        except BaseException as e:  # raised where .files is asked for
            future.set_exception(e)

    threading.Thread(target=run, name="sha256-sources", daemon=True).start()
    return future


class RecordSource:
    def __init__(
        self, data: str, read: ReadConfig, located=None, files: list[SourceFile] | None = None
    ):
        """`located` and `files`: located and hashed elsewhere (by the Ray engine's tasks)."""
        self.data, self.read = data, read
        self.skipped: list[SkippedRecord] = []
        self.num_read = 0
        self.per_file: dict[str, int] = {}
        if located is None:
            not_a_pack(data)
            located = locate(data, read.split)
            self.paths = [(p, os.path.getsize(p)) for p in located.paths]
            self._hashing = _hash_in_thread([p for p, _ in self.paths])
        else:
            self.paths = [(f.path, f.size) for f in files or []]
        self.located, self._files = located, files
        self.not_read: tuple[tuple[str, str], ...] = located.not_read

    @property
    def files(self) -> list[SourceFile]:
        """The files with their sha256: waits for the hashing thread (its error is raised here)."""
        if self._files is None:
            self._files = [
                SourceFile(path=p, size=n, sha256=h)
                for (p, n), h in zip(self.paths, self._hashing.result(), strict=True)
            ]
            self._hashing = None
        return self._files

    def count(self, file: str, records: int) -> None:
        """`records` more records read from `file` (in reading order)."""
        self.num_read += records
        self.per_file[file] = self.per_file.get(file, 0) + records

    @property
    def total_bytes(self) -> int:
        return sum(n for _, n in self.paths)

    def batches(self, batch_records: int = readers.BATCH_RECORDS) -> Iterator[readers.RawBatch]:
        for b in readers.iter_batches(self.located, self.read, batch_records):
            self.count(b.file, len(b))
            yield b

    def reject_at(
        self, index: int, file: str, line: int | None, reason: str, record: int | None = None
    ) -> None:
        """`record`: the position within its file where that is not `index` (see SkippedRecord)."""
        skipped = SkippedRecord(
            int(index),
            file,
            line,
            reason,
            None if line is not None or record is None or record == index else int(record),
        )
        if self.read.on_error == "error":
            raise PacktoolError(
                f"{skipped.where}: {reason}; fix the record, or pass --on-error skip to count and "
                "list bad records"
            )
        self.skipped.append(skipped)

    def reject(self, batch: readers.RawBatch, i: int, reason: str) -> None:
        self.reject_at(batch.start + i, batch.file, batch.line_of(i), reason, batch.position(i))

    def skip_warning(
        self, formats: dict[str, FileFormat], forced: str | None, looks: dict[str, str]
    ) -> str | None:
        """What was skipped, in one line (None when nothing was). A few records: where they are. More
        than SKIP_SHARE of the records read, or every record of a file: the share, those files, the
        top reasons and what to do (`looks`: each file's first record's format without --format)."""
        if not self.skipped:
            return None
        n, read = len(self.skipped), max(self.num_read, 1)
        names = short_names([*self.per_file, *(s.file for s in self.skipped)])
        by_file = Counter(s.file for s in self.skipped)
        whole = [f for f, k in by_file.items() if k and k >= self.per_file.get(f, 0)]
        head = f"skipped {n} bad record(s)"
        if n / read <= SKIP_SHARE and not whole:
            return f"{head}: {_positions(self.skipped, names)}"
        share = f"{head} of {self.num_read:,} read ({100 * n / read:.1f}%)"
        if whole:
            listed = ", ".join(f"{names[f]} ({by_file[f]:,})" for f in whole[:MAX_LISTED])
            more = f" and {len(whole) - MAX_LISTED} more" if len(whole) > MAX_LISTED else ""
            share += f", every record of {listed}{more}"
        groups = group_reasons(s.reason for s in self.skipped)  # one per cause
        top = ", ".join(
            f'{g.count:,} × "{_words(g.cause, REASON_CHARS)}"{g.variants_text()}'
            for g in groups[:TOP_REASONS]
        )
        if len(groups) > TOP_REASONS:
            top += f" and {len(groups) - TOP_REASONS} more cause(s)"
        first = self.skipped[0]
        worst = whole or [f for f, _ in by_file.most_common(1)]
        advice = _advice(worst, names, formats, forced, looks, self.skipped)
        return (
            f"{share}; top reasons: {top}; first at {names.get(first.file, first.file)}"
            f"{first.where[len(first.file) :]}. {advice}"
        )

    def not_read_warning(self) -> str | None:
        """'skipped 2 input path(s) of DATA: a/self, a/sub/up (symlink to a folder already read)':
        each reason once, at most MAX_LISTED paths (None: none)."""
        if not self.not_read:
            return None
        groups: dict[str, list[str]] = {}
        for path, why in self.not_read[:MAX_LISTED]:
            groups.setdefault(why, []).append(path)
        listed = "; ".join(f"{', '.join(paths)} ({why})" for why, paths in groups.items())
        more = len(self.not_read) - MAX_LISTED
        return f"skipped {len(self.not_read)} input path(s) of {self.data}: {listed}" + (
            f"; … ({more} more)" if more > 0 else ""
        )


def _positions(skipped: list[SkippedRecord], names: dict[str, str]) -> str:
    """'a.jsonl lines 2, 5; b.json records 0, 3' for the first MAX_LISTED, then how many more."""
    groups: dict[tuple[str, bool], list[str]] = {}
    for s in skipped[:MAX_LISTED]:
        groups.setdefault((s.file, s.line is not None), []).append(
            str(s.line if s.line is not None else s.position)
        )
    parts = [
        f"{names.get(f, f)} {('line' if lined else 'record') + ('s' if len(v) > 1 else '')} {', '.join(v)}"
        for (f, lined), v in groups.items()
    ]
    more = f", … ({len(skipped) - MAX_LISTED} more)" if len(skipped) > MAX_LISTED else ""
    return "; ".join(parts) + more


def _words(text: str, limit: int) -> str:
    """`text`, or its first words up to about `limit` characters and '…' (never cut mid-word)."""
    if len(text) <= limit:
        return text
    cut = text[: limit + 1].rsplit(" ", 1)[0].rstrip(",;:")
    return (cut or text[:limit]) + " …"


def _advice(
    files: list[str],
    names: dict[str, str],
    formats: dict[str, FileFormat],
    forced: str | None,
    looks: dict[str, str],
    skipped: list[SkippedRecord],
) -> str:
    """What to do about the files that lost the most: a format forced on a file that looks like
    another, a file that fits no format, a file that mixes formats; and --on-error error."""
    tips = []
    unlike = [
        f"{names.get(f, f)} looks {looks[f]}"
        for f in files
        if forced and looks.get(f) not in (None, forced)
    ]
    if unlike:
        more = f" and {len(unlike) - 3} more files" if len(unlike) > 3 else ""
        tips.append(
            f"--format {forced} applies to every file, but {', '.join(unlike[:3])}{more}: leave --format out "
            "to detect each file's format"
        )
    for f in files[:3]:
        info, name = formats.get(f), names.get(f, f)
        if forced and looks.get(f) not in (None, forced):
            continue
        if info is not None and info.format == NO_FORMAT:
            tips.append(
                f"no record of {name} fits a known format: map its columns with --column OURS=THEIRS or "
                "force one with --format NAME"
            )
        elif info is not None and any(
            s.file == f and s.reason.startswith(f"{info.format} record has no ") for s in skipped
        ):
            tips.append(
                f"{name} was read as {info.format} (its first record's format) but holds records of "
                "another format: split it into one file per format"
            )
    tips.append("--on-error error stops at the first bad record with its whole message")
    return "Fix: " + "; ".join(tips)


def not_a_pack(data: str) -> None:
    """A pack folder given where training data is expected: say what it is and what to run."""
    m = read_pack_manifest(data)
    if m is not None:
        sources = ", ".join(
            str(x.get("path")) for x in m.get("sources") or [] if isinstance(x, dict)
        )
        raise UsageError(
            f"{data} is a packtool pack, not training data: `packtool verify {data}` checks it"
            + (f"; it was packed from {sources}" if sources else "")
        )


# -- what each file is ------------------------------------------------------------------------------
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
    """The records of a batch, parsed one at a time (None where unreadable): detection usually needs
    only the first."""
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
    names = b.column_names()
    if names is None or not (b.arrow.num_rows and is_pretokenized(names, read)):
        hit = _detect(b, read, kind_too=True)
        if hit is None or hit[0] != "pretokenized":
            return ("chat", None) if hit is not None else None
        names = hit[1]
    from packtool.tokenization.pretokenized import label_source_of  # (pre-tokenized input only)

    return "pretokenized", label_source_of(names)


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
    """The local pipeline's input, read once: (kind, [FileDecision], the batches in order, chat
    batches with their file's `fmt` set). The kind is found first (on the batches up to the first
    readable record, held and read again); each file is then decided as the stream reaches it and
    appended to the list. A file's detection error is raised there, before any of its batches."""
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
            if kind == "chat" and d.error is not None:
                raise UsageError(d.error)
            for b in itertools.chain(d.first, own):  # noqa: B031 - the rest of the file
                if kind == "chat":
                    b.fmt = d.fmt
                yield b

    return kind, decisions, stream()


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
