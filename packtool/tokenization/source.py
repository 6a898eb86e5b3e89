"""The record source: where the input is, its batches of raw records, and what was skipped.

    RecordSource(data, read)
        .files      [SourceFile(path, size, sha256)]      located once (raises for a missing path);
                                                           hashed in a thread meanwhile (`.files`
                                                           waits for it; `.paths` does not)
        .batches()  RawBatch, RawBatch, ...                one file each, with start index, offset and lines
        .per_file   {file: records read}                   in reading order
        .reject(batch, i, reason) / .reject_at(index, file, line, reason, record)
                    --on-error error: PacktoolError "data.jsonl:12: <reason>; fix the record, or ..."
                    --on-error skip:  counted and listed in .skipped (file, line or record, reason)
        .skip_warning(formats, forced, looks)
                    the one line that says what was skipped: where (small counts), or the share, the
                    files skipped whole, the top reasons and what to do (more than SKIP_SHARE of the
                    records read, or a whole file)
        .not_read / .not_read_warning()
                    paths the folder or glob holds but that were not read ((path, why):
                    io.sources.Located.not_read: link loops, broken links, a file seen twice), and
                    the one line that names them

Every stage that can refuse a record (reading, format, template, tokenization, pre-tokenized
validation) reports it here with the record's real provenance, so the manifest names the file and
line (or the position within its file) of each skipped record, whichever process found the problem.
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from collections.abc import Iterator

from packtool.config import ReadConfig
from packtool.data.provenance import NO_FORMAT, FileFormat, SkippedRecord, SourceFile, short_names
from packtool.errors import PacktoolError, UsageError
from packtool.io import readers
from packtool.io.files import sha256_file
from packtool.io.sources import locate
from packtool.schema import notices, read_pack_manifest

SKIP_SHARE = 0.01  # above this share of the records read, a skip run says so loudly
MAX_LISTED = 20  # record positions quoted
TOP_REASONS = 3
REASON_CHARS = 100  # a reason quoted in the warning is cut at a word boundary beyond this


def _hash_in_thread(paths: list[str]):
    """A future of the files' sha256 (hashlib releases the GIL: the hash runs beside the reading;
    ~1.3 GB/s here, 3 s for a 3.9 GiB input that used to be hashed before anything else)."""
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
        """`located` and `files`: located and hashed elsewhere (the Ray engine hashes them in its
        workers; it reads the records there too, and counts them in with `count`)."""
        self.data, self.read = data, read
        self.skipped: list[SkippedRecord] = []
        self.num_read = 0
        self.per_file: dict[str, int] = {}
        if located is None:
            not_a_pack(data)
            located = locate(data, read.split)
            if located.kind == "files":
                paths = list(located.files)
            else:
                paths = [f["filename"] for f in located.dataset.cache_files]
            self.paths = [(p, os.path.getsize(p)) for p in sorted(paths)]
            self._hashing = _hash_in_thread([p for p, _ in self.paths])
        else:
            self.paths = [(f.path, f.size) for f in files or []]
        self.located, self._files = located, files
        self.not_read: tuple[tuple[str, str], ...] = located.not_read

    @property
    def files(self) -> list[SourceFile]:
        """The files with their sha256 (the cache key, the manifest's sources): waits for the hashing
        thread the first time (an error reading a file is raised here)."""
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
        top reasons (whole words) and what to do. `formats`: how each file was read; `forced`: --format;
        `looks`: the format each file's first record has without --format."""
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
        groups = notices.group_reasons(s.reason for s in self.skipped)  # one per cause
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
        """'skipped 2 input path(s) of DATA: a/self, a/sub/up (symlink to a folder already read);
        a/x.jsonl (broken symlink: ...)': each reason once, at most MAX_LISTED paths (None: none)."""
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
