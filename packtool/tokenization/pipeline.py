"""source → encode → cache: the tokenized input of `profile` and `pack`, computed once.

    RecordSource ──RawBatch──▶ FileFormats (batch.fmt: its file's format) ──▶ EncodeStep (in `num_proc`
    worker processes, in order) ──StepResult──▶
        rejects ──▶ RecordSource.reject (file:line or file record N; --on-error)
        Arrow batch ──▶ EntryWriter (data.arrow, hashed as written) ──commit──▶ tok-<key>/ ──mmap──▶ TokenizedData

Each file of a folder or glob is read in its own format, detected from its own first record whose
format is found (or forced by --format); TokenizedData.formats lists them, and .format is the one
format, or a "mixed: ..." summary. Whether the input is pre-tokenized is decided once, by its first
readable record. A skip run that drops more than SKIP_SHARE of the records read, or a whole file,
says so in one warning (RecordSource.skip_warning).

The cache key hashes the source files' bytes, the tokenizer files, the chat template, the options
that shape labels and the library versions: the same input tokenized again is loaded from the cache
(checked, memory-mapped) without importing transformers at all. A record that carries `input_ids`
is pre-tokenized: validated batch by batch (packtool.tokenization.pretokenized), never templated.

Tokenizer backend (`--tokenizer-backend`): `auto` runs the fast path (fastokens, and the native
renderer for the built-in template) when fastokens supports the tokenizer and the fast path gives
ids, labels and refusals identical to the reference path (tokenizers + transformers' jinja) on the
run's first CHECK_EXAMPLES examples and the first CHECK_PER_FILE examples of every later file (of
the first CHECK_FILES files; after them, of each file whose format was not probed yet), so a folder
whose second file is another format is probed on that format too (`_Check`: in a worker while the
others encode; settled before any refusal is reported or the entry is committed); otherwise hf,
from the start again, with a warning saying why. A mixture's inputs are each their own run, each
probed. The manifest records which one ran.

Memory: at most IN_FLIGHT_PER_WORKER batches per worker are in flight; the parent holds one
batch's result at a time; the finished table is memory-mapped, not loaded.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing as mp
import os
import time
from collections import deque

import packtool
from packtool.config import ReadConfig, TokenizeConfig
from packtool.data.arrow import arrow_numpy, token_schema
from packtool.data.provenance import (
    NO_FORMAT,
    FileFormat,
    SkippedRecord,
    SourceFile,
    formats_summary,
)
from packtool.data.tokenized import TokenizedData
from packtool.errors import PacktoolError, UsageError
from packtool.progress import Reporter, reporter
from packtool.tokenization import cache
from packtool.tokenization.encode import EncodeStep, StepResult
from packtool.tokenization.loading import load_spec, tokenizer_key
from packtool.tokenization.source import RecordSource

SMALL_BYTES = 4 << 20  # below this much input one process is faster than starting workers
CHECK_EXAMPLES = 256  # examples encoded by both backends before fastokens is trusted
CHECK_PER_FILE = 32  # ...and of each later file's first batch (a folder's files differ in format)
CHECK_FILES = 64  # files probed in full; beyond them only a file of a format not probed yet
IN_FLIGHT_PER_WORKER = 2
MAX_LISTED = 20  # source indices quoted in a warning
BACKENDS = ("auto", "fastokens", "hf")


def _quote(indices, per_file: dict[str, int] | None = None) -> str:
    """'3, 7, 12, … (40 more)'; with two or more files read ({file: records} in reading order),
    each index also named within its own file: '3 (a.jsonl record 3), 7 (b.json record 1)'."""
    idx = list(indices)
    where = _within_files(idx[:MAX_LISTED], per_file) if per_file and len(per_file) > 1 else None
    shown = [
        str(i) if where is None else f"{i} ({where[j]})" for j, i in enumerate(idx[:MAX_LISTED])
    ]
    head = ", ".join(shown)
    return head + (f", … ({len(idx) - MAX_LISTED} more)" if len(idx) > MAX_LISTED else "")


def _where(i: int, per_file: dict[str, int]) -> str:
    """'b.json record 1' for source index i (the file named even when it is the only one)."""
    from packtool.data.provenance import short_names

    if len(per_file) > 1:
        return _within_files([i], per_file)[0]
    name = next(iter(short_names(per_file).values()), "the input") if per_file else "the input"
    return f"{name} record {i}"


def _within_files(idx: list[int], per_file: dict[str, int]) -> list[str]:
    """'b.json record 1' for each source index: the files' records lie end to end in reading order."""
    import numpy as np

    from packtool.data.provenance import short_names

    names = short_names(per_file)
    files = list(per_file)
    ends = np.cumsum([per_file[f] for f in files])
    out = []
    for i in idx:
        k = min(int(np.searchsorted(ends, i, side="right")), len(files) - 1)
        out.append(f"{names[files[k]]} record {i - (int(ends[k - 1]) if k else 0)}")
    return out


def _template_key(choice: str | None) -> str:
    """The chosen template's bytes where they are not covered by the tokenizer's files and the
    library versions (TRL's included): a file, a built-in, a TRL template (edits never hit old entries)."""
    from pathlib import Path

    from packtool.tokenization.chat_template import BUILTIN_TEMPLATES, trl_dir

    choice = choice or "auto"
    if choice in ("auto", "tokenizer"):  # auto may pick the built-in chatml-train: its bytes count
        return (
            f"{choice}:"
            + hashlib.sha256(BUILTIN_TEMPLATES["chatml-train"].read_bytes()).hexdigest()
        )
    if choice.startswith("trl:"):
        folder = trl_dir()
        path = folder / f"{choice[4:]}.jinja" if folder else None
    else:
        path = BUILTIN_TEMPLATES.get(choice) or Path(choice).expanduser()
    if path is not None and path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return f"name:{choice}"


def cache_key(sources: list[SourceFile], cfg: TokenizeConfig, tokenizer: str | None = None) -> str:
    """`tokenizer`: tokenizer_key(cfg.tokenizer) when the caller has it (it hashes the tokenizer's files)."""
    from packtool.tokenization.loading import library_versions

    parts = {
        "packtool": packtool.__version__,
        "encoder": 4,  # 4: label notes (label_audit); 3: each file of a folder or glob in its own format
        "libraries": library_versions(),
        "sources": [(s.path, s.size, s.sha256) for s in sources],
        "tokenizer": tokenizer or tokenizer_key(cfg.tokenizer),
        "template": _template_key(cfg.chat_template),
        "options": cfg.fingerprint_dict(),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


# ---------------------------------------------------------------------------------------------
# running the step over batches, in order


_WORKER_STEP: EncodeStep | None = None  # the step of this worker process (set once, at its start)


def _worker_init(step: EncodeStep) -> None:
    global _WORKER_STEP
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    if hasattr(signal, "pthread_sigmask"):  # blocked by _start_pool around the fork
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    _WORKER_STEP = step


def _worker_run(batch) -> StepResult:
    return _WORKER_STEP(batch)


def _worker_check(reference: EncodeStep, probe) -> tuple[StepResult, StepResult]:
    return _WORKER_STEP(probe), reference(probe)


class UseReference(Exception):
    """The fast path differed from the reference path on the probe: start again with the reference."""


class _Check:
    """fastokens (and the native renderer) against tokenizers + jinja on the run's first examples,
    and on the head of each later file's first batch (`probe_of`, module docstring).

        probe    the first: min(CHECK_EXAMPLES, first batch) examples of the run's first file
        probe_of(batch) -> the head of a file not probed yet (CHECK_PER_FILE examples), or None

    With worker processes the reference runs in a worker while the others encode: every result is
    settled before any refused record is reported and before the cache entry is committed.
    """

    def __init__(self, fast: EncodeStep, reference: EncodeStep, probe, requested: str):
        self.fast, self.reference, self.probe, self.requested = fast, reference, probe, requested
        self.report: dict | None = None
        self.files = {probe.file}  # files with a probe
        self.formats = {probe.fmt}
        self.examples = 0  # examples compared so far

    @property
    def _renderer(self) -> str:
        return self.fast.renderer if self.fast is not None else self.renderer

    def probe_of(self, batch):
        """The probe of `batch` when it is the first batch of a file to probe, else None."""
        if batch.file in self.files or not len(batch):
            return None
        if len(self.files) >= CHECK_FILES and batch.fmt in self.formats:
            return None
        self.files.add(batch.file)
        self.formats.add(batch.fmt)
        return batch.head(min(len(batch), CHECK_PER_FILE))

    def settle(self, a: StepResult, b: StepResult, probe=None) -> None:
        probe = self.probe if probe is None else probe
        where = compare_probe(a, b, probe)
        self.examples += len(probe)
        self.conclude(where, len(self.files))

    def conclude(self, where: str | None, files: int) -> None:
        """The report after a probe that was identical (`where` None) or first differed at `where`,
        with `self.examples` compared so far over `files` files; raises on a difference."""
        same = where is None
        check = {"examples": self.examples, "identical": bool(same)}
        if files > 1:  # (one file: the report as it always was)
            check["files"] = files
        if same:
            self.report = {
                "name": "fastokens",
                "requested": self.requested,
                "renderer": self._renderer,
                "check": check,
            }
            return
        why = f"fastokens differs from tokenizers on {where}"
        if self._renderer != "jinja":
            why = f"the fast path (fastokens, {self._renderer} renderer) differs from tokenizers + jinja on {where}"
        if self.requested == "fastokens":
            raise PacktoolError(f"--tokenizer-backend fastokens: {why}; use --tokenizer-backend hf")
        self.report = {
            "name": "hf",
            "requested": self.requested,
            "renderer": "jinja",
            "check": check,
            "reason": why,
        }
        raise UseReference(why)

    def run_here(self, probe=None) -> None:
        probe = self.probe if probe is None else probe
        self.settle(self.fast(probe), self.reference(probe), probe)


def compare_probe(a: StepResult, b: StepResult, probe) -> str | None:
    """None when the fast path's result `a` of the probe is the reference's `b`, else where they
    first differ."""
    if a.rejects == b.rejects and a.table.equals(b.table):
        return None
    return _first_difference(a, b, probe)


def select_probes(files: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
    """The probes _Check takes, for an engine that reads the files apart (packtool.cluster):
    [(file, format, records of its first batch)] in reading order, files with records only ->
    [(file, format, examples to compare from its first batch)]."""
    out: list[tuple[str, str, int]] = []
    formats: set[str] = set()
    for file, fmt, first in files:
        if not first:
            continue
        if out and len(out) >= CHECK_FILES and fmt in formats:
            continue
        out.append((file, fmt, min(first, CHECK_PER_FILE if out else CHECK_EXAMPLES)))
        formats.add(fmt)
    return out


def conclude_probes(renderer: str, requested: str, results: list[tuple[int, str | None]]) -> dict:
    """The backend report of probes compared elsewhere (packtool.cluster), [(examples, None or
    where the fast path first differed)] in reading order, exactly as _Check reports them: raises
    UseReference (or, for --tokenizer-backend fastokens, PacktoolError) at the first difference."""
    check = _Check.__new__(_Check)
    check.fast, check.requested, check.report, check.examples = None, requested, None, 0
    check.renderer = renderer
    for n, where in results:
        check.examples += n
        check.conclude(where, len(results))
    return check.report


def _start_pool(step: EncodeStep, num_proc: int):
    """The worker pool, with SIGINT blocked while it forks: a Ctrl-C (sent to the whole process
    group) waits until every worker ignores it, then reaches the parent alone, which terminates them."""
    import signal

    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    mask = hasattr(signal, "pthread_sigmask")
    if mask:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return mp.get_context(method).Pool(num_proc, initializer=_worker_init, initargs=(step,))
    finally:
        if mask:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _run(step: EncodeStep, batches, num_proc: int, check: _Check | None = None):
    """Yields (batch, result) in input order; at most IN_FLIGHT_PER_WORKER batches per worker are
    read ahead, so memory does not grow with the input."""
    if num_proc <= 1:
        if check is not None:
            check.run_here()
        for b in batches:
            probe = check.probe_of(b) if check is not None else None
            if probe is not None:
                check.run_here(probe)
            yield b, step(b)
        return
    pool = _start_pool(step, num_proc)
    try:
        checking: deque = deque()  # (probe, its async pair of results), in submission order
        if check is not None:
            checking.append(
                (check.probe, pool.apply_async(_worker_check, (check.reference, check.probe)))
            )

        def settled(result: StepResult | None) -> None:
            # every probe before a refusal is reported, and at the end; the ready ones as they come
            while checking and (result is None or result.rejects or checking[0][1].ready()):
                probe, res = checking.popleft()
                check.settle(*res.get(), probe)

        pending: deque = deque()
        for b in batches:
            probe = check.probe_of(b) if check is not None else None
            if probe is not None:
                checking.append((probe, pool.apply_async(_worker_check, (check.reference, probe))))
            pending.append((b, pool.apply_async(_worker_run, (b,))))
            if len(pending) >= num_proc * IN_FLIGHT_PER_WORKER:
                done, res = pending.popleft()
                result = res.get()
                settled(result)
                yield done, result
        while pending:
            done, res = pending.popleft()
            result = res.get()
            settled(result)
            yield done, result
        settled(None)
        pool.close()
    finally:
        pool.terminate()
        pool.join()


# ---------------------------------------------------------------------------------------------
# deciding what the input is


def _records_of(b):
    """The records of a batch, parsed one by one (None where unreadable): detection usually needs
    only the first, so the parent parses no more than that."""
    from packtool.io.readers import parse_json_record

    if b.raw is not None:
        for raw in b.raw:
            yield parse_json_record(raw)[0]
    elif b.records is not None:
        yield from b.records
    else:
        for a in range(0, b.arrow.num_rows, 64):
            yield from b.arrow.slice(a, 64).to_pylist()


def _detect(b, read: ReadConfig, pretokenized_too: bool = False):
    """(format, why) of the first record of batch `b` whose format is found, ("pretokenized", rec)
    for a record carrying input_ids (when `pretokenized_too` and no --format), or None. Preference and
    KTO data raise UsageError, naming the record."""
    from packtool.formats import FormatError
    from packtool.formats.detect import detect_format

    for i, rec in enumerate(_records_of(b)):
        if rec is None:
            continue
        if pretokenized_too and "input_ids" in rec and read.format is None:
            return "pretokenized", rec
        try:
            return detect_format(rec, read)
        except FormatError:
            continue  # this record is refused by the step with its own message
        except UsageError as e:
            raise UsageError(f"{b.where(i)}: {e}") from None
    return None


class FileFormats:
    """The format of each file, detected from that file's own records as its batches stream past
    (or forced by --format): `assign` yields the batches in order with `fmt` set; the batches read
    to find a file's format are held back until it is known. A file none of whose records fits a
    format is read with formats.AUTO (each record refused with what detection says of it).

        found   {file: (format, why)}            in reading order
        looks   {file: format}                   with --format: what the file's first record is without it
    """

    def __init__(self, read: ReadConfig):
        self.read = read
        self.found: dict[str, tuple[str, str]] = {}
        self.looks: dict[str, str] = {}

    def assign(self, batches):
        from packtool.formats import AUTO

        held: list = []
        current = None
        for b in batches:
            if b.file != current:
                yield from self._release(current, held, (AUTO, "no record fits a known format"))
                held, current = [], b.file
            if current in self.found:
                b.fmt = self.found[current][0]
                yield b
                continue
            held.append(b)
            hit = _detect(b, self.read)
            if hit is not None:
                yield from self._release(current, held, hit)
                held = []
        yield from self._release(current, held, (AUTO, "no record fits a known format"))

    def _release(self, file, held: list, hit: tuple[str, str]):
        if not held:
            return
        self.found[file] = hit
        if self.read.format is not None:
            self._look(file, held)
        for b in held:
            b.fmt = hit[0]
            yield b

    def _look(self, file, held: list) -> None:
        import dataclasses

        try:
            free = dataclasses.replace(self.read, format=None)
            hit = next((h for h in (_detect(b, free) for b in held) if h is not None), None)
        except PacktoolError:  # preference data, say: what --format was given for
            return
        if hit is not None:
            self.looks[file] = hit[0]

    def table(self, per_file: dict[str, int]) -> dict[str, FileFormat]:
        """{file: FileFormat} of every file read, in reading order."""
        from packtool.formats import AUTO

        out = {}
        for f, n in per_file.items():
            fmt, why = self.found.get(f, (AUTO, "no record fits a known format"))
            if fmt == AUTO:
                fmt = NO_FORMAT
            elif self.looks.get(f) not in (None, fmt):
                why = f"{why}; its first record looks {self.looks[f]}"
            out[f] = FileFormat(fmt, why, n)
        return out

    def input_format(self, per_file: dict[str, int]) -> tuple[str, str]:
        """(format, why) of the whole input: one format (the first file's reason, as for one file), or
        a 'mixed: ...' summary (data.formats_summary)."""
        from packtool.formats import AUTO

        mixed = formats_summary(self.table(per_file))
        if mixed is not None:
            return mixed
        first = next((hit for hit in self.found.values() if hit[0] != AUTO), None)
        return (
            first if first is not None else (self.read.format or "messages", "no readable record")
        )


def _first_batches(source: RecordSource, cfg: TokenizeConfig):
    """(kind, label_source, batches, file formats): the input is classified (chat or pre-tokenized)
    by its first readable record; the batches read to find it are put back in front of the rest.
    Chat batches come with their file's format set (FileFormats.assign)."""
    it = source.batches()
    seen = []
    formats = FileFormats(cfg.read)
    for b in it:
        seen.append(b)
        names = b.column_names()
        if (
            names is not None
            and b.arrow.num_rows
            and "input_ids" in names
            and cfg.read.format is None
        ):
            from packtool.tokenization.pretokenized import label_source_of

            return "pretokenized", label_source_of(names), _chain(seen, it), formats
        hit = _detect(b, cfg.read, pretokenized_too=True)
        if hit is not None and hit[0] == "pretokenized":
            from packtool.tokenization.pretokenized import label_source

            return "pretokenized", label_source(hit[1]), _chain(seen, it), formats
        if hit is not None:
            break
    return "chat", None, formats.assign(_chain(seen, it)), formats


def file_decision(batches, read: ReadConfig) -> dict:
    """What this pipeline decides from one file's leading batches, for an engine that reads the
    files of an input apart (packtool.cluster): the same rules as _first_batches (the input's kind,
    from its first file that has a readable record) and FileFormats (the file's own format, and
    with --format what its first record looks like).

        kind       None | ["pretokenized", label source] | ["chat", None]
        hit        None | [format, why]       None: no record fits a format (read with formats.AUTO)
        hit_error  the UsageError detection raised on this file's records (preference data), if any
        looks      with --format: the format its records have without it, else None
        first_len  records of its first batch (0: the file holds none)
    """
    import dataclasses

    kind = hit = hit_error = None
    held: list = []
    first_len = None
    for b in batches:
        if first_len is None:
            first_len = len(b)
        if kind is None:
            names = b.column_names()
            if (
                names is not None
                and b.arrow.num_rows
                and "input_ids" in names
                and read.format is None
            ):
                from packtool.tokenization.pretokenized import label_source_of

                kind = ["pretokenized", label_source_of(names)]
            else:
                h = _detect(b, read, pretokenized_too=True)
                if h is not None and h[0] == "pretokenized":
                    from packtool.tokenization.pretokenized import label_source

                    kind = ["pretokenized", label_source(h[1])]
                elif h is not None:
                    kind = ["chat", None]
        if hit is None and hit_error is None:
            held.append(b)
            try:
                hit = _detect(b, read)
            except UsageError as e:
                hit_error = str(e)
        if kind is not None and (
            hit is not None or hit_error is not None or kind[0] == "pretokenized"
        ):
            break
    looks = None
    if read.format is not None and held:
        try:
            free = dataclasses.replace(read, format=None)
            found = next((h for h in (_detect(b, free) for b in held) if h is not None), None)
            looks = found[0] if found is not None else None
        except PacktoolError:
            looks = None
    return {
        "kind": kind,
        "hit": list(hit) if hit is not None else None,
        "hit_error": hit_error,
        "looks": looks,
        "first_len": first_len or 0,
    }


def _chain(seen, it):
    yield from seen
    yield from it


# ---------------------------------------------------------------------------------------------
# the tokenizer backend


def renderer_of(template) -> str:
    """ "native" for the built-in chatml-train template (byte for byte), else "jinja"."""
    from packtool.tokenization.chat_template import BUILTIN_TEMPLATES

    return "native" if template.source == BUILTIN_TEMPLATES["chatml-train"].read_text() else "jinja"


def fast_refused(spec, requested: str) -> str | None:
    """Why the fast path is not tried (None: it is); --tokenizer-backend fastokens on a tokenizer
    it cannot serve is a UsageError."""
    if requested == "hf":
        return "--tokenizer-backend hf"
    from packtool.tokenization.backends import supports_fast

    why = supports_fast(spec.backend_json, load=False)
    if why is not None and requested == "fastokens":
        raise UsageError(
            f"--tokenizer-backend fastokens: {why}; use --tokenizer-backend auto or hf"
        )
    return why


def _fast_backend(spec, requested: str):
    """(the fastokens backend, already building on a thread, None) or (None, why not). Building
    takes ~1 s for a 150k vocabulary and releases the GIL, so it overlaps what follows."""
    why = fast_refused(spec, requested)
    if why is not None:
        return None, why
    from packtool.tokenization.backends import FastBackend

    backend = FastBackend(spec.backend_json)
    backend.preload()
    return backend, None


def _first_difference(a: StepResult, b: StepResult, probe) -> str:
    """Where the two results of the probe (at most CHECK_EXAMPLES rows) first differ."""
    ra, rb = a.table.to_pydict(), b.table.to_pydict()
    for j, (x, y) in enumerate(zip(ra["input_ids"], rb["input_ids"], strict=False)):
        if x != y or ra["labels"][j] != rb["labels"][j]:
            i = int(ra["source_index"][j]) - probe.start
            return probe.where(i)
    return "the first batch"


# ---------------------------------------------------------------------------------------------


def load_tokenized(
    data: str, cfg: TokenizeConfig, progress: bool | Reporter = True
) -> TokenizedData:
    """Read, normalize and tokenize `data`, or load the checked cache entry of an earlier run.

    `progress`: where the tokenizing stage reports (packtool.progress.reporter: a Reporter, True for
    the default terminal drawing, False for none)."""
    if cfg.tokenizer_backend not in BACKENDS:
        raise UsageError(
            f"--tokenizer-backend {cfg.tokenizer_backend!r} is not one of {'|'.join(BACKENDS)}"
        )
    t0 = time.perf_counter()
    source = RecordSource(data, cfg.read)
    tok_key = tokenizer_key(cfg.tokenizer)
    if tok_key.endswith(":uncached"):
        load_spec(
            cfg.tokenizer
        )  # fails fast, or (--allow-download) fetches it: key the cache on its files
        tok_key = tokenizer_key(cfg.tokenizer)
    key = cache_key(source.files, cfg, tok_key)
    path = cache.entry_path(key)
    if cfg.cache:
        entry = cache.open_entry(path)
        if entry is not None:
            td = _finish(entry, cache_hit=True, seconds={"load_cache": time.perf_counter() - t0})
            return check_strict_labels(td, cfg)
    cache.remove_stale_work()
    try:
        td = _tokenize(data, cfg, source, key, progress, t0, mismatch=None)
    except UseReference as e:
        td = _tokenize(data, cfg, RecordSource(data, cfg.read), key, progress, t0, mismatch=str(e))
    return check_strict_labels(td, cfg)


def check_strict_labels(td: TokenizedData, cfg: TokenizeConfig) -> TokenizedData:
    """--strict-labels: a run whose audit (tokenizer.label_audit) found anything is refused."""
    from packtool.tokenization.label_audit import strict_problem

    problem = strict_problem((td.tokenizer or {}).get("label_audit")) if cfg.strict_labels else None
    if problem:
        raise PacktoolError(problem)
    return td


def pretokenized_setup(cfg: TokenizeConfig, label_src: str):
    """(step, tokenizer info, backend report, warnings, (format, why)) of pre-tokenized input."""
    step = EncodeStep("pretokenized", cfg.read, label_source=label_src)
    backend = {"name": None, "reason": "pre-tokenized input is not tokenized"}
    labels_from = label_src if label_src != "all" else "every token"
    ignored = [
        opt
        for opt, given in (
            ("--chat-template", cfg.chat_template is not None),
            ("--train-on", cfg.train_on != "assistant"),
        )
        if given
    ]
    warnings = []
    if ignored:
        warnings.append(
            f"{' and '.join(ignored)} do not apply to pre-tokenized input: labels come from "
            f"{labels_from}"
        )
    why = f"records carry input_ids; labels from {labels_from}"
    return step, _pretokenized_tokenizer(cfg), backend, warnings, ("pretokenized", why)


def template_warnings(template) -> list[str]:
    """What a template without {% generation %} markers costs, said once."""
    if template.mode not in ("prefix", "last"):
        return []
    which = "assistant turns are" if template.mode == "prefix" else "the last assistant turn is"
    return [
        f"chat template '{template.name}' has no {{% generation %}} markers: {which} "
        "located by diffs of renders (slower; checked per example)"
    ]


def _tokenize(data, cfg, source, key, progress, t0, mismatch: str | None) -> TokenizedData:
    kind, label_src, batches, formats = _first_batches(source, cfg)
    fmt = reason = None
    warnings: list[str] = []
    check = None
    if kind == "pretokenized":
        step, tokenizer, backend, warnings, (fmt, reason) = pretokenized_setup(cfg, label_src)
        num_proc = 1  # vectorized validation outruns reading: workers would only add copies
    else:
        step, check, tokenizer, backend, batches, num_proc = _chat_step(
            source, cfg, batches, mismatch
        )
        warnings += template_warnings(step.template)
    t_enc = time.perf_counter()
    removed = 0
    zero_loss: list[int] = []
    special: list[int] = []
    notes: list[tuple[int, dict]] = []
    try:
        with (
            cache.EntryWriter(key, token_schema()) as writer,
            reporter(progress).stage(
                "tokenizing" if kind == "chat" else "reading",
                unit="examples",
                detail=f"{num_proc} processes" if num_proc > 1 else None,
            ) as bar,
        ):
            for batch, result in _run(step, batches, num_proc, check):
                for i, why in result.rejects:
                    source.reject(batch, i, why)
                writer.write(result.table)
                removed += result.removed_padding
                special += result.special
                notes += result.notes
                loss = arrow_numpy(result.table.column("num_loss_tokens"))
                if not loss.all():
                    zero_loss += arrow_numpy(result.table.column("source_index"))[
                        loss == 0
                    ].tolist()
                bar.advance(
                    result.table.num_rows, int(arrow_numpy(result.table.column("length")).sum())
                )
            if writer.rows == 0:
                raise PacktoolError(
                    f"{data}: no usable examples ({source.num_read} records read, "
                    f"{len(source.skipped)} skipped)"
                )
            if check is not None:
                backend = check.report
            meta = summary_meta(
                source,
                cfg,
                formats,
                kind,
                label_src,
                (fmt, reason),
                tokenizer,
                backend,
                warnings,
                removed,
                zero_loss,
                special,
                notes,
            )
            final = writer.commit(meta, replace=not cfg.cache)
    except OSError as e:
        root = str(cache.cache_root())
        if e.filename and not str(e.filename).startswith(root):
            raise  # reading the input, not writing the cache: the CLI names that path
        raise PacktoolError(
            f"cannot write the tokenization cache in {root}: "
            f"{e.strerror or e}; free space or set PACKTOOL_CACHE to a writable folder"
        ) from None
    entry = cache.open_entry(final, verify=False)  # just written and hashed on the way out
    if entry is None:
        raise PacktoolError(
            f"the tokenization cache entry {final} could not be read back; check the disk"
        )
    return _finish(
        entry,
        cache_hit=False,
        seconds={"read_tokenize": time.perf_counter() - t_enc, "total": time.perf_counter() - t0},
    )


def summary_meta(
    source,
    cfg: TokenizeConfig,
    formats: FileFormats,
    kind: str,
    label_src,
    pretokenized: tuple,
    tokenizer: dict,
    backend: dict,
    warnings: list[str],
    removed: int,
    zero_loss: list[int],
    special: list[int],
    notes: list[tuple[int, dict]] = (),
) -> dict:
    """The meta of a finished run (the cache entry's, TokenizedData's): the warnings about
    examples without loss and control tokens in text (`zero_loss`, `special`: source indices in
    reading order), the tokenizer with its special_in_content count, and _meta's fields. Shared
    by the local pipeline and the Ray engine (packtool.cluster), so both say the same."""
    from packtool.tokenization.label_audit import audit_warnings, label_audit

    warnings = list(warnings)
    audit, idx = label_audit(notes, zero_loss, lambda i: _where(i, source.per_file))
    if audit:  # manifest tokenizer.label_audit, only when found: clean packs keep their bytes
        tokenizer = {**tokenizer, "label_audit": audit}
    warnings += audit_warnings(
        audit, idx, tokenizer.get("chat_template"), lambda x: _quote(x, source.per_file)
    )
    if zero_loss:
        what = (
            "pre-tokenized example(s) have no loss token"
            if kind == "pretokenized"
            else "example(s) have no loss token (no assistant turn, or every assistant weight 0)"
        )
        warnings.append(
            f"{len(zero_loss)} {what}: source indices {_quote(zero_loss, source.per_file)}"
        )
    if kind == "chat":
        tokenizer = {
            **tokenizer,
            "special_in_content": {
                "mode": cfg.special_in_content,
                "examples": len(special),
            },
        }
        if special:
            how = {
                "keep": "kept as control tokens, as apply_chat_template does (--special-in-content "
                "split reads them as text, error refuses them)",
                "split": "tokenized as plain text (--special-in-content split)",
            }[cfg.special_in_content]
            warnings.append(
                f"{len(special)} example(s) hold control tokens in message text, {how}: source "
                f"indices {_quote(special, source.per_file)}"
            )
    return _meta(
        source,
        cfg,
        formats,
        pretokenized,
        tokenizer,
        backend,
        warnings,
        removed,
        kind,
        label_src,
    )


def _chat_step(source, cfg: TokenizeConfig, batches, mismatch: str | None):
    """(step, check, tokenizer info, backend report, batches, num_proc) for chat-like input.

    The reference path is tokenizers + transformers' jinja renderer. The fast path (fastokens, and
    the native renderer for the built-in template) is used when `auto` allows it, and checked on
    the first CHECK_EXAMPLES examples (`_Check`); after a failed check (`mismatch`) it is skipped."""
    spec = load_spec(cfg.tokenizer)
    built, why = _fast_backend(spec, "hf" if mismatch else cfg.tokenizer_backend)
    try:
        return _chat_step_on(spec, built, why, source, cfg, batches, mismatch)
    except BaseException:
        if (
            built is not None
        ):  # a process must not exit while the preload thread is inside native code
            built.wait()
        raise


def _chat_step_on(spec, built, why, source, cfg: TokenizeConfig, batches, mismatch: str | None):
    from packtool.tokenization.template_probe import choose

    template = choose(spec, cfg.chat_template, cfg.train_on, cfg.template_date)
    first = next(batches, None)  # every batch carries its file's format (FileFormats.assign)
    fmt = (
        first.fmt if first is not None and first.fmt is not None else cfg.read.format or "messages"
    )
    reference = EncodeStep(
        "chat",
        cfg.read,
        fmt=fmt,
        spec=spec,
        template=template,
        train_on=cfg.train_on,
        special_in_content=cfg.special_in_content,
    )
    probe = first.head(min(len(first), CHECK_EXAMPLES)) if first is not None else None
    num_proc = cfg.num_proc or os.cpu_count() or 1
    if cfg.num_proc is None and source.total_bytes < SMALL_BYTES:
        num_proc = 1
    check = None
    if built is None:
        step = reference
        backend = {
            "name": "hf",
            "requested": cfg.tokenizer_backend,
            "renderer": "jinja",
            "reason": mismatch or why,
        }
    else:  # the fast path: fastokens, and the native renderer for the built-in template
        step = reference.with_backend("fastokens", renderer_of(template), built)
        backend = {
            "name": "fastokens",
            "requested": cfg.tokenizer_backend,
            "renderer": step.renderer,
            "check": {"examples": 0},
        }
        if probe is not None and len(probe):
            check = _Check(step, reference, probe, cfg.tokenizer_backend)
        if num_proc > 1:
            built.wait()  # built before forking: workers inherit it
    tokenizer = {**spec.info(), **template.info()}
    rest = _chain([first] if first is not None else [], batches)
    return step, check, tokenizer, backend, rest, num_proc


def _pretokenized_tokenizer(cfg: TokenizeConfig) -> dict:
    if cfg.tokenizer is None:  # ids come as they are; a tokenizer only names the pad/eos ids
        return {"name": None, "pad_id": None, "eos_id": None, "vocab_size": None}
    return load_spec(cfg.tokenizer).info()


def _meta(
    source,
    cfg,
    formats: FileFormats,
    pretokenized,
    tokenizer,
    backend,
    warnings,
    removed,
    kind,
    label_src,
) -> dict:
    """The cache entry's meta: what TokenizedData carries besides the table. `pretokenized`: the
    (format, why) of pre-tokenized input; chat input's come from `formats`."""
    warnings = list(warnings)
    if removed:
        warnings.append(f"removed {removed} padding token(s) marked 0 in attention_mask")
    if kind == "pretokenized":
        fmt, reason = pretokenized
        per_file = {f: FileFormat(fmt, reason, n) for f, n in source.per_file.items()}
    else:
        fmt, reason = formats.input_format(source.per_file)
        per_file = formats.table(source.per_file)
    said = source.skip_warning(per_file, cfg.read.format, formats.looks)
    if said:
        warnings.insert(0, said)
    if backend.get("reason") and backend.get("requested") == "auto" and kind == "chat":
        warnings.append(f"tokenizer backend hf: {backend['reason']}")
    options = (
        cfg.fingerprint_dict()
    )  # everything that shapes ids and labels (verify --sources reads it)
    if kind == "pretokenized":
        options.update(labels_from=label_src, train_on=None, chat_template=None)
    return {
        "format": fmt,
        "format_reason": reason,
        "formats": {f: list(x) for f, x in per_file.items()},
        "tokenizer": tokenizer,
        "backend": backend,
        "warnings": warnings,
        "sources": [s.__dict__ for s in source.files],
        "options": options,
        "num_read": source.num_read,
        "skipped": [s.to_json() for s in source.skipped],
    }


def meta_fields(meta: dict) -> dict:
    """The TokenizedData fields of a run's meta (as a cache entry stores it: JSON)."""
    return {
        "num_read": meta["num_read"],
        "skipped": [SkippedRecord(**s) for s in meta["skipped"]],
        "format": meta["format"],
        "format_reason": meta["format_reason"],
        "formats": {f: FileFormat(*x) for f, x in (meta.get("formats") or {}).items()},
        "tokenizer": meta["tokenizer"],
        "sources": [SourceFile(**s) for s in meta["sources"]],
        "options": meta["options"],
        "warnings": list(meta["warnings"]),
        "backend": meta.get("backend", {}),
    }


def _finish(entry: cache.MappedEntry, cache_hit: bool, seconds: dict) -> TokenizedData:
    td = TokenizedData.from_table(
        entry.table, cache_hit=cache_hit, seconds=seconds, **meta_fields(entry.meta)
    )
    td.release_pages = entry.release
    td.mapped_files = [entry.mapped_file]
    return td
