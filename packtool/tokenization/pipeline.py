"""source → decide → plan → execute → cache: the tokenized input of `profile` and `pack`, computed once.

    RecordSource ──RawBatch──▶ decide.decided_stream (each file's FileDecision; batch.fmt) ──▶
    run_plan.plan_run ──RunPlan──▶ execute.run_local (EncodeStep in `num_proc` worker processes, in
    order; fast_check.FastCheck on the probes) ──StepResult──▶
        rejects ──▶ RecordSource.reject (file:line or file record N; --on-error)
        Arrow batch ──▶ EntryWriter (data.arrow, hashed as written) ──commit(run_meta)──▶ tok-<key>/
        ──mmap──▶ TokenizedData

The modules in reading order: packtool/tokenization/__init__.py. A difference on a probe
(UseReference) starts the run again on the reference path (run_plan.py draws it), before anything
is committed.

The cache key hashes the source files' bytes, the tokenizer files, the chat template, the options
that shape labels and the library versions: the same input tokenized again is loaded from the cache
(checked, memory-mapped) without importing transformers at all. The sources are hashed in a thread
(RecordSource) while they are read: the key is waited for first only when the cache holds entries
(an empty cache, or --no-cache, needs it at commit). A skip run that drops more than
SKIP_SHARE of the records read, or a whole file, says so in one warning (RecordSource.skip_warning).
The finished table is memory-mapped, not loaded.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import time
from pathlib import Path

import packtool
from packtool.config import TokenizeConfig
from packtool.data.arrow import arrow_numpy, token_schema
from packtool.data.provenance import SourceFile
from packtool.data.tokenized import TokenizedData
from packtool.errors import PacktoolError
from packtool.progress import Reporter, reporter
from packtool.tokenization import cache
from packtool.tokenization.decide import decided_stream
from packtool.tokenization.execute import run_local, workers
from packtool.tokenization.fast_check import FastCheck, UseReference
from packtool.tokenization.loading import library_versions, load_spec, tokenizer_key
from packtool.tokenization.run_meta import (
    Tally,
    check_strict_labels,
    meta_fields,
    no_examples,
    run_meta,
)
from packtool.tokenization.run_plan import check_backend, plan_run
from packtool.tokenization.source import RecordSource


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
        "encoder": 5,  # 5: UTF-16/32 JSON Lines decoded (were cut at b"\n"); 4: label notes
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
    while True:  # a difference: again on the reference path (not checked)
        try:
            td = _tokenize(data, cfg, source, tok_key, progress, t0, plan, decisions, batches)
            break
        except UseReference as e:
            source = RecordSource(data, cfg.read)
            _, _, decisions, batches = decided_stream(source.batches(), cfg.read)
            plan = plan.on_difference(str(e))
    return check_strict_labels(td, cfg)


def _tokenize(data, cfg, source, tok_key, progress, t0, plan, decisions, batches) -> TokenizedData:
    """The run; its entry is committed under the cache key once the sources are hashed."""
    num_proc = workers(plan, cfg.num_proc, source.total_bytes)
    if num_proc > 1:
        _ = source.files  # hashed before the worker processes fork (no thread running then)
    check = FastCheck.of(plan)
    t_enc = time.perf_counter()
    tally = Tally()
    try:
        with (
            cache.EntryWriter(token_schema()) as writer,
            reporter(progress).stage(
                "tokenizing" if plan.kind == "chat" else "reading",
                unit="examples",
                detail=f"{num_proc} processes" if num_proc > 1 else None,
            ) as bar,
        ):
            for batch, result in run_local(plan, batches, num_proc, check):
                for i, why in result.rejects:
                    source.reject(batch, i, why)
                writer.write(result.table)
                tally.add(result)
                lengths = arrow_numpy(result.table.column("length"))
                bar.advance(result.table.num_rows, int(lengths.sum()))
            if writer.rows == 0:
                raise no_examples(data, source)
            backend = check.report if check is not None and check.report else plan.backend
            meta = run_meta(source, cfg, plan, decisions, tally, backend)
            key = cache_key(source.files, cfg, tok_key, source.not_read)
            final = writer.commit(key, meta, replace=not cfg.cache)
    except OSError as e:
        root = str(cache.cache_root())
        if e.filename and not str(e.filename).startswith(root):
            raise  # reading the input, not writing the cache: the CLI names that path
        raise PacktoolError(
            f"cannot write the tokenization cache in {root}: "
            f"{e.strerror or e}; free space or set PACKTOOL_CACHE to a writable folder"
        ) from None
    finally:
        plan.wait()
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


def _finish(entry: cache.MappedEntry, cache_hit: bool, seconds: dict) -> TokenizedData:
    td = TokenizedData.from_table(
        entry.table, cache_hit=cache_hit, seconds=seconds, **meta_fields(entry.meta)
    )
    td.release_pages = entry.release
    td.mapped_files = [entry.mapped_file]
    return td
