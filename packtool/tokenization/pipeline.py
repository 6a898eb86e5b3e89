"""One tokenize run: cache → decide → plan → executor.map(step, parts) → probes / retry → commit.

    load_tokenized(data, cfg)            the local engine (packtool.cluster.tokenize: the Ray one)
      cache_key hit ──▶ the entry, checked and memory-mapped (transformers never imported)
      RecordSource ──RawBatch──▶ source.decided_stream (each file's FileDecision; batch.fmt)
      run_plan.plan_run ──RunPlan──▶ Run (data, cfg, source, decisions, plan, batches)
      checked(run, attempt)                attempt(run, check, stats); a probe that differs
                                           (UseReference): again on Run.again, the reference path
        local attempt: forking.ordered_map(Work(step, reference), items, num_proc)
            items   (True, probe) (False, batch) ...  a probe (FastCheck.take) just before its batch
            probe  ──where──▶ Stats.conclude, as it is ready, and every one before a refusal is
                   reported and at the end (identical, or UseReference before the commit)
            batch  ──StepResult──▶ rejects ──▶ RecordSource.reject (file:line; --on-error)
                                   Stats.add;  Arrow batch ──▶ EntryWriter (data.arrow)
        ──commit(meta(run, stats))──▶ tok-<key>/ ──mmap──▶ TokenizedData

    Stats   what the steps fill: removed padding; source indices (reading order) of examples
            without loss, with control tokens in text; label notes; the backend report; the
            preference pairs TRL's DPOTrainer would tokenize otherwise
    meta(run, stats) -> the entry's meta: format, format_reason, formats {file: [format, why,
            records]}, tokenizer (+ label_audit, special_in_content, pairs_unlike_trl), backend,
            warnings, sources, options, num_read, skipped (, not_read); meta_fields(meta):
            TokenizedData's fields

The Ray engine runs the same plan, check, Stats and meta with its own executor (Session.run over
the files' parts). The modules in reading order: packtool/tokenization/__init__.py.

The cache key hashes the source files' bytes, the tokenizer files, the chat template, the options
that shape labels and the library versions. The sources are hashed in a thread (RecordSource) while
they are read: the key is waited for first only when the cache holds entries (an empty cache, or
--no-cache, needs it at commit). A skip run that drops more than SKIP_SHARE of the records read, or a
whole file, says so in one warning (RecordSource.skip_warning).
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import packtool
from packtool import idle
from packtool.config import TokenizeConfig
from packtool.data.tokenized import (
    FileFormat,
    SkippedRecord,
    SourceFile,
    TokenizedData,
    arrow_numpy,
    token_schema,
    where,
)
from packtool.errors import PacktoolError
from packtool.forking import ordered_map
from packtool.progress import Reporter, reporter
from packtool.tokenization import cache
from packtool.tokenization.loading import library_versions, load_spec, tokenizer_key
from packtool.tokenization.run_plan import (
    BackendReport,
    FastCheck,
    RunPlan,
    UseReference,
    check_backend,
    compare,
    plan_run,
)
from packtool.tokenization.source import (
    RecordSource,
    decided_stream,
    formats_table,
    input_format,
)

SMALL_BYTES = 4 << 20  # below this much input one process is faster than starting workers
MAX_LISTED = 20  # source indices quoted in a warning


@dataclass(frozen=True)
class Run:
    """One run's inputs, decided before a record is encoded. `batches`: the local engine's record
    stream (None on Ray, whose tasks read the parts themselves)."""

    data: str
    cfg: TokenizeConfig
    source: RecordSource
    decisions: list
    plan: RunPlan
    batches: Any = None

    def again(self, why: str) -> Run:
        """This run on the reference path after a probe differed (`why`): the records read again."""
        plan = self.plan.on_difference(why)
        if self.batches is None:
            return dataclasses.replace(self, plan=plan)
        source = RecordSource(self.data, self.cfg.read)
        _, _, decisions, batches = decided_stream(source.batches(), self.cfg.read)
        return Run(self.data, self.cfg, source, decisions, plan, batches)


@dataclass
class Stats:
    """What the steps of one run fill, in reading order (module docstring)."""

    backend: BackendReport
    removed: int = 0
    zero_loss: list[int] = field(default_factory=list)
    special: list[int] = field(default_factory=list)
    notes: list[tuple[int, dict]] = field(default_factory=list)
    unlike_trl: int = 0  # preference pairs TRL's DPOTrainer would tokenize otherwise

    def add(self, result) -> None:
        """One batch's StepResult."""
        self.removed += result.removed_padding
        self.unlike_trl += result.unlike_trl
        self.special += result.special
        self.notes += result.notes
        loss = arrow_numpy(result.table.column("num_loss_tokens"))
        if not loss.all():
            self.zero_loss += arrow_numpy(result.table.column("source_index"))[loss == 0].tolist()

    def conclude(self, check: FastCheck, n: int, where: str | None) -> None:
        """One probe of n examples compared (`where` they differ, or None); raises UseReference."""
        check.conclude(n, where)
        self.backend = check.report


def checked(run: Run, attempt: Callable) -> tuple[Run, Stats, Any]:
    """attempt(run, check, stats) on the run's plan; after a probe that differs (UseReference), once
    more on the reference path (not checked). (the run that finished, its Stats, what it returned)"""
    while True:
        check, stats = FastCheck.of(run.plan), Stats(run.plan.backend)
        try:
            return run, stats, attempt(run, check, stats)
        except UseReference as e:
            run = run.again(str(e))


@dataclass(frozen=True)
class Work:
    """The local executor's function: a batch → its StepResult; a probe → where the step and the
    reference differ on it (None: identical). The reference first: in this process the fast
    backend may still be building on its thread meanwhile."""

    step: Any
    reference: Any

    def __call__(self, item):
        probe, batch = item
        if not probe:
            return self.step(batch)
        expected = self.reference(batch)
        return compare(self.step(batch), expected, batch)


def workers(plan: RunPlan, num_proc: int | None, total_bytes: int) -> int:
    """Processes for the run: one for pre-tokenized input (vectorized validation outruns reading:
    workers would only add copies) and for small input; else --num-proc, or every core."""
    if plan.kind == "pretokenized" or (num_proc is None and total_bytes < SMALL_BYTES):
        return 1
    return num_proc or os.cpu_count() or 1


def _items(batches, check: FastCheck | None):
    for b in batches:
        n = check.take(b.file, b.fmt, len(b)) if check is not None else 0
        if n:
            yield True, b.head(n)
        yield False, b


def _template_key(choice: str | None) -> str:
    """The chosen template's bytes where they are not covered by the tokenizer's files and the
    library versions (TRL's included): a file, a built-in, a TRL template (edits never hit old entries)."""
    from packtool.tokenization.chat_template import BUILTIN_TEMPLATES, trl_dir

    choice = choice or "auto"
    if choice in ("auto", "tokenizer"):  # auto may pick the built-in chatml-train: its bytes count
        builtin = BUILTIN_TEMPLATES["chatml-train"].read_bytes()
        return f"{choice}:{hashlib.sha256(builtin).hexdigest()}"
    if choice.startswith("trl:"):
        folder = trl_dir()
        path = folder / f"{choice[4:]}.jinja" if folder else None
    else:
        path = BUILTIN_TEMPLATES.get(choice) or Path(choice).expanduser()
    if path is not None and path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return f"name:{choice}"


def cache_key(
    sources: list[SourceFile], cfg: TokenizeConfig, tokenizer: str | None = None, not_read=()
) -> str:
    """`tokenizer`: tokenizer_key(cfg.tokenizer) when the caller has it (it hashes the tokenizer's
    files); `not_read`: the paths found and not read (their warning is in the entry)."""
    parts = {
        "packtool": packtool.__version__,
        "encoder": 6,  # 6: preference runs count the pairs TRL tokenizes otherwise
        # (tokenizer.pairs_unlike_trl: entries without it are not hit); 5: UTF-16/32 JSON Lines decoded (were cut at b"\n"); 4: label notes
        # (label_audit); 3: each file of a folder or glob in its own format
        "libraries": library_versions(),
        "sources": [(s.path, s.size, s.sha256) for s in sources],
        "tokenizer": tokenizer or tokenizer_key(cfg.tokenizer),
        "template": _template_key(cfg.chat_template),
        "options": cfg.fingerprint_dict(),
    }
    if not_read:  # (only then: other entries keep their keys)
        parts["not_read"] = list(not_read)
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def load_tokenized(
    data: str, cfg: TokenizeConfig, progress: bool | Reporter = True
) -> TokenizedData:
    """Read, normalize and tokenize `data`, or load the checked cache entry of an earlier run.

    `progress`: where the tokenizing stage reports (packtool.progress.reporter: a Reporter, True for
    the default terminal drawing, False for none)."""
    check_backend(cfg)
    t0 = time.perf_counter()
    source = RecordSource(data, cfg.read)
    tok_key = tokenizer_key(cfg.tokenizer)
    if tok_key.endswith(":uncached"):
        load_spec(cfg.tokenizer)  # fails fast, or (--allow-download) fetches it: key on its files
        tok_key = tokenizer_key(cfg.tokenizer)
    # the sources' sha256 are still being hashed (source.files waits): an empty cache has no hit
    if cfg.cache and cache.has_entries():
        entry = cache.open_entry(
            cache.entry_path(cache_key(source.files, cfg, tok_key, source.not_read))
        )
        if entry is not None:
            td = _finish(entry, cache_hit=True, seconds={"load_cache": time.perf_counter() - t0})
            return check_strict_labels(td, cfg)
    cache.remove_stale_work()
    kind, _, decisions, batches = decided_stream(source.batches(), cfg.read)
    first = next(batches, None)  # its file decided: the plan's reference format
    plan = plan_run(cfg, decisions, preload=kind == "chat")
    batches = itertools.chain([first] if first is not None else [], batches)
    run = Run(data, cfg, source, decisions, plan, batches)
    t_enc = time.perf_counter()

    def attempt(run: Run, check: FastCheck | None, stats: Stats) -> Path:
        try:
            return _tokenize(run, check, stats, tok_key, progress)
        finally:
            run.plan.wait()

    try:
        _, _, final = checked(run, attempt)
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
    seconds = {"read_tokenize": time.perf_counter() - t_enc, "total": time.perf_counter() - t0}
    return check_strict_labels(_finish(entry, cache_hit=False, seconds=seconds), cfg)


def _tokenize(run: Run, check: FastCheck | None, stats: Stats, tok_key: str, progress) -> Path:
    """One attempt on the local executor; its entry is committed under the cache key once the
    sources are hashed and every probe concluded."""
    plan, source, cfg = run.plan, run.source, run.cfg
    num_proc = workers(plan, cfg.num_proc, source.total_bytes)
    if num_proc > 1:
        _ = source.files  # hashed before the worker processes fork (no thread running then)
    if plan.building():
        idle.run()  # what the caller needs later (packtool.idle), while the fast backend builds
    if num_proc > 1:
        plan.wait()  # built before forking: workers inherit it (and what the idle work imported)
    with (
        cache.EntryWriter(token_schema()) as writer,
        reporter(progress).stage(
            "tokenizing" if plan.kind == "chat" else "reading",
            unit="examples",
            detail=f"{num_proc} processes" if num_proc > 1 else None,
        ) as bar,
    ):
        checking: deque = deque()  # (probe, its pending result), in input order

        def settle(every: bool) -> None:  # every: before a refusal is reported, and at the end
            while checking and (every or checking[0][1].ready()):
                probe, res = checking.popleft()
                stats.conclude(check, len(probe), res.get())

        items = _items(run.batches, check)
        for (probe, b), res in ordered_map(Work(plan.step, plan.reference), items, num_proc):
            if probe:
                checking.append((b, res))
                continue
            result = res.get()
            settle(every=bool(result.rejects))
            for i, why in result.rejects:
                source.reject(b, i, why)
            writer.write(result.table)
            stats.add(result)
            bar.advance(
                result.table.num_rows, int(arrow_numpy(result.table.column("length")).sum())
            )
        settle(every=True)
        if writer.rows == 0:
            raise no_examples(run)
        key = cache_key(source.files, cfg, tok_key, source.not_read)
        return writer.commit(key, meta(run, stats), replace=not cfg.cache)


def _finish(entry: cache.MappedEntry, cache_hit: bool, seconds: dict) -> TokenizedData:
    td = TokenizedData.from_table(
        entry.table, cache_hit=cache_hit, seconds=seconds, **meta_fields(entry.meta)
    )
    td.release_pages = entry.release
    td.mapped_files = [entry.mapped_file]
    return td


def no_examples(run: Run) -> PacktoolError:
    """Nothing left to tokenize: says why with the first skipped record's reason, when one was."""
    source, why = run.source, ""
    if source.skipped:
        first = source.skipped[0]
        at = first.record if first.record is not None else first.source_index
        why = f"; the first skipped, {where(first.file, first.line, at)}: {first.reason}"
    return PacktoolError(
        f"{run.data}: no usable examples ({source.num_read} records read, "
        f"{len(source.skipped)} skipped{why})"
    )


def meta(run: Run, stats: Stats) -> dict:
    """The meta of a finished run (module docstring): the warnings about examples without loss and
    control tokens in text, the tokenizer with its label audit and special_in_content count."""
    from packtool.tokenization.label_audit import audit_warnings, label_audit

    source, cfg, plan, decisions = run.source, run.cfg, run.plan, run.decisions
    per_file, kind, backend = source.per_file, plan.kind, stats.backend
    tokenizer = plan.tokenizer
    warnings = list(plan.warnings)
    audit, idx = label_audit(stats.notes, stats.zero_loss, lambda i: _where([i], per_file)[0])
    if audit:  # manifest tokenizer.label_audit, only when found: clean packs keep their bytes
        tokenizer = {**tokenizer, "label_audit": audit}
    warnings += audit_warnings(
        audit, idx, tokenizer.get("chat_template"), lambda x: _quote(x, per_file)
    )
    if stats.zero_loss:
        what = (
            "pre-tokenized example(s) have no loss token"
            if kind == "pretokenized"
            else "example(s) have no loss token (no assistant turn, or every assistant weight 0)"
        )
        warnings.append(
            f"{len(stats.zero_loss)} {what}: source indices {_quote(stats.zero_loss, per_file)}"
        )
    if kind == "chat":
        special = stats.special
        tokenizer = {
            **tokenizer,
            "special_in_content": {"mode": cfg.special_in_content, "examples": len(special)},
        }
        if special:
            how = {
                "keep": "kept as control tokens, as apply_chat_template does (--special-in-content "
                "split reads them as text, error refuses them)",
                "split": "tokenized as plain text (--special-in-content split)",
            }[cfg.special_in_content]
            warnings.append(
                f"{len(special)} example(s) hold control tokens in message text, {how}: source "
                f"indices {_quote(special, per_file)}"
            )
    if stats.removed:
        warnings.append(f"removed {stats.removed} padding token(s) marked 0 in attention_mask")
    if kind == "pretokenized":
        fmt, reason = plan.pretokenized
        formats = {f: FileFormat(fmt, reason, n) for f, n in per_file.items()}
        looks: dict[str, str] = {}
    else:
        fmt, reason = input_format(decisions, per_file, cfg.read)
        formats = formats_table(decisions, per_file)
        if fmt == "preference":  # manifest preference.unlike_trl (pack.pairs.pair_manifest)
            tokenizer = {**tokenizer, "pairs_unlike_trl": stats.unlike_trl}
        looks = {d.file: d.looks for d in decisions if d.looks is not None}
    said = [source.not_read_warning(), source.skip_warning(formats, cfg.read.format, looks)]
    warnings[:0] = [w for w in said if w]
    if backend.reason and backend.requested == "auto" and kind == "chat":
        which = "hf" if backend.name == "hf" else f"{backend.name}, {backend.renderer} renderer"
        warnings.append(f"tokenizer backend {which}: {backend.reason}")
    options = cfg.fingerprint_dict()  # everything that shapes ids and labels (verify --sources)
    if kind == "pretokenized":
        options.update(labels_from=plan.label_source, train_on=None, chat_template=None)
    return {
        "format": fmt,
        "format_reason": reason,
        "formats": {f: list(x) for f, x in formats.items()},
        "tokenizer": tokenizer,
        "backend": backend.to_dict(),
        "warnings": warnings,
        "sources": [s.__dict__ for s in source.files],
        "options": options,
        "num_read": source.num_read,
        "skipped": [s.to_json() for s in source.skipped],
        **(
            {"not_read": [{"path": p, "why": w} for p, w in source.not_read]}
            if source.not_read
            else {}
        ),
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
        "not_read": list(meta.get("not_read") or []),
    }


def check_strict_labels(td: TokenizedData, cfg: TokenizeConfig) -> TokenizedData:
    """--strict-labels: a run whose audit (tokenizer.label_audit) found anything is refused."""
    from packtool.tokenization.label_audit import strict_problem

    problem = strict_problem((td.tokenizer or {}).get("label_audit")) if cfg.strict_labels else None
    if problem:
        raise PacktoolError(problem)
    return td


def _quote(indices, per_file: dict[str, int]) -> str:
    """'3, 7, 12, … (40 more)'; with two or more files read ({file: records} in reading order),
    each index also named within its own file: '3 (a.jsonl record 3), 7 (b.json record 1)'."""
    idx = list(indices)
    head = idx[:MAX_LISTED]
    shown = map(str, head)
    if len(per_file) > 1:
        shown = (f"{i} ({w})" for i, w in zip(head, _where(head, per_file), strict=True))
    more = f", … ({len(idx) - MAX_LISTED} more)" if len(idx) > MAX_LISTED else ""
    return ", ".join(shown) + more


def _where(idx: list[int], per_file: dict[str, int]) -> list[str]:
    """'b.json record 1' for each source index (the file named even when it is the only one): the
    files' records lie end to end in reading order."""
    import numpy as np

    from packtool.data.tokenized import short_names

    if not per_file:
        return [f"the input record {i}" for i in idx]
    names = short_names(per_file)
    files = list(per_file)
    ends = np.cumsum([per_file[f] for f in files])
    out = []
    for i in idx:
        k = min(int(np.searchsorted(ends, i, side="right")), len(files) - 1)
        out.append(f"{names[files[k]]} record {i - (int(ends[k - 1]) if k else 0)}")
    return out
