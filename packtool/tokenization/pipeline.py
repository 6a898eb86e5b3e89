"""source → encode → cache: the tokenized input of `profile` and `pack`, computed once.

    RecordSource ──RawBatch──▶ EncodeStep (in `num_proc` worker processes, in order) ──StepResult──▶
        rejects ──▶ RecordSource.reject (file:line; --on-error)
        Arrow batch ──▶ EntryWriter (data.arrow, hashed as written) ──commit──▶ tok-<key>/ ──mmap──▶ TokenizedData

The cache key hashes the source files' bytes, the tokenizer files, the chat template, the options
that shape labels and the library versions: the same input tokenized again is loaded from the cache
(checked, memory-mapped) without importing transformers at all. A record that carries `input_ids`
is pre-tokenized: validated batch by batch (packtool.tokenization.pretokenized), never templated.

Tokenizer backend (`--tokenizer-backend`): `auto` runs fastokens when it supports the tokenizer and
gives ids and labels identical to the `tokenizers` path on the run's first CHECK_EXAMPLES examples;
otherwise hf, with a note saying why. The manifest records which one ran.

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

import numpy as np

import packtool
from packtool.config import TokenizeConfig
from packtool.data import SkippedRecord, SourceFile, TokenizedData, token_schema
from packtool.errors import PacktoolError, UsageError
from packtool.progress import Progress
from packtool.tokenization import cache
from packtool.tokenization.encode import EncodeStep, StepResult
from packtool.tokenization.source import RecordSource

SMALL_BYTES = 4 << 20  # below this much input one process is faster than starting workers
CHECK_EXAMPLES = 256  # examples encoded by both backends before fastokens is trusted
IN_FLIGHT_PER_WORKER = 2
MAX_LISTED = 20  # source indices quoted in a warning
BACKENDS = ("auto", "fastokens", "hf")


def _quote(indices) -> str:
    idx = list(indices)
    head = ", ".join(str(i) for i in idx[:MAX_LISTED])
    return head + (f", … ({len(idx) - MAX_LISTED} more)" if len(idx) > MAX_LISTED else "")


def _template_key(chat_template: str | None) -> str:
    """The template's bytes: a file, or a built-in (edited built-ins must not hit old entries)."""
    from pathlib import Path

    from packtool.tokenization.loading import BUILTIN_TEMPLATES

    if chat_template is None:  # the tokenizer's own (its files are hashed) or, for the built-in one:
        chat_template = "chatml-train"
    path = BUILTIN_TEMPLATES.get(chat_template) or Path(chat_template).expanduser()
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return f"name:{chat_template}"


def cache_key(sources: list[SourceFile], cfg: TokenizeConfig) -> str:
    from packtool.tokenization.loading import library_versions, tokenizer_key

    parts = {
        "packtool": packtool.__version__,
        "encoder": 2,
        "libraries": library_versions(),
        "sources": [(s.path, s.size, s.sha256) for s in sources],
        "tokenizer": tokenizer_key(cfg.tokenizer),
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
    _WORKER_STEP = step


def _worker_run(batch) -> StepResult:
    return _WORKER_STEP(batch)


def _run(step: EncodeStep, batches, num_proc: int):
    """Yields (batch, result) in input order; at most IN_FLIGHT_PER_WORKER batches per worker are
    read ahead, so memory does not grow with the input."""
    if num_proc <= 1:
        for b in batches:
            yield b, step(b)
        return
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    pool = mp.get_context(method).Pool(num_proc, initializer=_worker_init, initargs=(step,))
    try:
        pending: deque = deque()
        for b in batches:
            pending.append((b, pool.apply_async(_worker_run, (b,))))
            if len(pending) >= num_proc * IN_FLIGHT_PER_WORKER:
                done, res = pending.popleft()
                yield done, res.get()
        while pending:
            done, res = pending.popleft()
            yield done, res.get()
        pool.close()
    finally:
        pool.terminate()
        pool.join()


# ---------------------------------------------------------------------------------------------
# deciding what the input is


def _first_batches(source: RecordSource, cfg: TokenizeConfig):
    """(kind, fmt, reason, label_source, batches): the input is classified by its first readable
    record; the batches read to find it are put back in front of the rest."""
    from packtool.formats import FormatError, detect_format

    it = source.batches()
    seen = []
    for b in it:
        seen.append(b)
        names = b.column_names()
        if names is not None and b.arrow.num_rows and "input_ids" in names and cfg.read.format is None:
            from packtool.tokenization.pretokenized import label_source_of

            return "pretokenized", None, None, label_source_of(names), _chain(seen, it)
        records, _ = b.parsed() if names is None else (b.arrow.slice(0, 64).to_pylist(), None)
        for rec in records:
            if rec is None:
                continue
            if "input_ids" in rec and cfg.read.format is None:
                from packtool.tokenization.pretokenized import label_source

                return "pretokenized", None, None, label_source(rec), _chain(seen, it)
            try:
                fmt, reason = detect_format(rec, cfg.read)
            except FormatError:
                continue  # this record is refused by the step with its own message
            return "chat", fmt, reason, None, _chain(seen, it)
    return "chat", cfg.read.format or "messages", "no readable record", None, _chain(seen, it)


def _chain(seen, it):
    yield from seen
    yield from it


# ---------------------------------------------------------------------------------------------
# the tokenizer backend


def _renderer(template) -> str:
    """"native" for the built-in chatml-train template (byte for byte), else "jinja"."""
    from packtool.tokenization.loading import BUILTIN_TEMPLATES

    if template is None:
        return "jinja"
    builtin = hashlib.sha256(BUILTIN_TEMPLATES["chatml-train"].read_bytes()).hexdigest()[:16]
    return "native" if template.hash == builtin else "jinja"


def _fast_step(step: EncodeStep, requested: str) -> tuple[EncodeStep | None, str | None]:
    """The fastokens variant of `step` with its Rust tokenizer already building on a thread (it
    takes ~1 s for a 150k vocabulary and releases the GIL), or (None, why not)."""
    if requested == "hf":
        return None, "--tokenizer-backend hf"
    from packtool.tokenization.backends import supports_fast

    why = supports_fast(step.spec.backend_json, load=False)
    if why is not None:
        if requested == "fastokens":
            raise UsageError(f"--tokenizer-backend fastokens: {why}; use --tokenizer-backend auto or hf")
        return None, why
    fast = step.with_backend("fastokens")
    backend = fast.encoder.backend
    if hasattr(backend, "preload"):
        backend.preload()
    return fast, None


def _choose_backend(step: EncodeStep, fast: EncodeStep | None, why: str | None, requested: str,
                    probe) -> tuple[EncodeStep, dict]:
    """`probe`: the first raw batch, at most CHECK_EXAMPLES records. fastokens is used only when
    it gives exactly the hf path's ids, labels and refusals on it."""
    if fast is None:
        return step, {"name": "hf", "requested": requested, "reason": why}
    if probe is None or not len(probe):
        return fast, {"name": "fastokens", "requested": requested, "check": {"examples": 0}}
    try:
        a = fast(probe)
    except Exception as e:  # fastokens cannot load or map this tokenizer after all
        why = f"fastokens failed: {str(e).splitlines()[0] if str(e) else type(e).__name__}"
        if requested == "fastokens":
            raise PacktoolError(f"--tokenizer-backend fastokens: {why}; use --tokenizer-backend hf") from None
        return step, {"name": "hf", "requested": requested, "reason": why}
    b = step(probe)
    same = a.rejects == b.rejects and a.table.equals(b.table)
    report = {"name": "fastokens" if same else "hf", "requested": requested,
              "renderer": fast.renderer if same else "jinja",
              "check": {"examples": len(probe), "identical": bool(same)}}
    if same:
        return fast, report
    report["reason"] = f"fastokens differs from tokenizers on {_first_difference(a, b, probe)}"
    if requested == "fastokens":
        raise PacktoolError(f"--tokenizer-backend fastokens: {report['reason']}; use --tokenizer-backend hf")
    return step, report


def _first_difference(a: StepResult, b: StepResult, probe) -> str:
    ra = a.table.to_pydict() if a.table.num_rows < 10_000 else {}
    rb = b.table.to_pydict() if b.table.num_rows < 10_000 else {}
    for j, (x, y) in enumerate(zip(ra.get("input_ids", []), rb.get("input_ids", []), strict=False)):
        if x != y or ra["labels"][j] != rb["labels"][j]:
            i = int(ra["source_index"][j]) - probe.start
            return probe.where(i)
    return "the first batch"


# ---------------------------------------------------------------------------------------------


def load_tokenized(data: str, cfg: TokenizeConfig, progress: bool = True) -> TokenizedData:
    """Read, normalize and tokenize `data`, or load the checked cache entry of an earlier run."""
    if cfg.tokenizer_backend not in BACKENDS:
        raise UsageError(f"--tokenizer-backend {cfg.tokenizer_backend!r} is not one of {'|'.join(BACKENDS)}")
    t0 = time.perf_counter()
    source = RecordSource(data, cfg.read)
    key = cache_key(source.files, cfg)
    path = cache.entry_path(key)
    if cfg.cache:
        entry = cache.open_entry(path)
        if entry is not None:
            return _finish(entry, cache_hit=True, seconds={"load_cache": time.perf_counter() - t0})
    cache.remove_stale_work()
    kind, fmt, reason, label_src, batches = _first_batches(source, cfg)
    warnings: list[str] = []
    if kind == "pretokenized":
        step = EncodeStep("pretokenized", cfg.read, label_source=label_src)
        tokenizer = _pretokenized_tokenizer(cfg)
        backend = {"name": None, "reason": "pre-tokenized input is not tokenized"}
        num_proc = 1  # vectorized validation outruns reading: workers would only add copies
        ignored = [opt for opt, given in (("--chat-template", cfg.chat_template is not None),
                                          ("--train-on", cfg.train_on != "assistant")) if given]
        if ignored:
            warnings.append(f"{' and '.join(ignored)} do not apply to pre-tokenized input: labels come from "
                            f"{label_src if label_src != 'all' else 'every token'}")
        fmt, reason = "pretokenized", f"records carry input_ids; labels from " \
                                      f"{label_src if label_src != 'all' else 'every token'}"
    else:
        step, tokenizer, backend, batches, num_proc = _chat_step(source, cfg, fmt, batches)
        if not step.template.has_generation and cfg.train_on != "all":
            warnings.append(f"chat template '{step.template.name}' has no {{% generation %}} markers: assistant "
                            "turns are located by a prefix diff of renders (slower; checked per example)")
    t_enc = time.perf_counter()
    removed = 0
    zero_loss: list[int] = []
    try:
        with cache.EntryWriter(key, token_schema()) as writer, \
                Progress("tokenizing" if kind == "chat" else "reading", enabled=progress) as bar:
            for batch, result in _run(step, batches, num_proc):
                for i, why in result.rejects:
                    source.reject(batch, i, why)
                writer.write(result.table)
                removed += result.removed_padding
                loss = result.table.column("num_loss_tokens").to_numpy()
                if not loss.all():
                    zero_loss += result.table.column("source_index").to_numpy()[loss == 0].tolist()
                bar.advance(result.table.num_rows, int(np.sum(result.table.column("length").to_numpy())))
            if writer.rows == 0:
                raise PacktoolError(f"{data}: no usable examples ({source.num_read} records read, "
                                    f"{len(source.skipped)} skipped)")
            if zero_loss:
                what = "pre-tokenized example(s) have no loss token" if kind == "pretokenized" else \
                    "example(s) have no loss token (no assistant turn, or every assistant weight 0)"
                warnings.append(f"{len(zero_loss)} {what}: source indices {_quote(zero_loss)}")
            meta = _meta(source, cfg, fmt, reason, tokenizer, backend, warnings, removed, kind, label_src)
            final = writer.commit(meta, replace=not cfg.cache)
    except OSError as e:
        raise PacktoolError(f"cannot write the tokenization cache in {cache.cache_root()}: "
                            f"{e.strerror or e}; free space or set PACKTOOL_CACHE to a writable folder") from None
    entry = cache.open_entry(final)
    if entry is None:
        raise PacktoolError(f"the tokenization cache entry {final} could not be read back; check the disk")
    return _finish(entry, cache_hit=False, seconds={"read_tokenize": time.perf_counter() - t_enc,
                                                   "total": time.perf_counter() - t0})


def _chat_step(source, cfg: TokenizeConfig, fmt: str, batches):
    from packtool.tokenization.loading import load_spec, resolve_template

    spec = load_spec(cfg.tokenizer)
    step = EncodeStep("chat", cfg.read, fmt=fmt, spec=spec, template=None, train_on=cfg.train_on)
    fast, why = _fast_step(step, cfg.tokenizer_backend)  # builds on a thread while we go on
    template = resolve_template(spec, cfg.chat_template)
    step.template = template
    if fast is not None:  # the fast path: fastokens, and the native renderer for the built-in template
        fast.template = fast.encoder.template = template
        fast.renderer = fast.encoder.renderer = _renderer(template)
    first = next(batches, None)
    probe = first.head(min(len(first), CHECK_EXAMPLES)) if first is not None else None
    step, backend = _choose_backend(step, fast, why, cfg.tokenizer_backend, probe)
    num_proc = cfg.num_proc or os.cpu_count() or 1
    if cfg.num_proc is None and source.total_bytes < SMALL_BYTES:
        num_proc = 1
    if num_proc > 1 and hasattr(step.encoder.backend, "wait"):
        step.encoder.backend.wait()  # built before forking: workers inherit it
    tokenizer = {**spec.info(), "chat_template": template.name, "chat_template_hash": template.hash,
                 "generation_markers": template.has_generation}
    rest = _chain([first] if first is not None else [], batches)
    return step, tokenizer, backend, rest, num_proc


def _pretokenized_tokenizer(cfg: TokenizeConfig) -> dict:
    if cfg.tokenizer is None:  # ids come as they are; a tokenizer only names the pad/eos ids
        return {"name": None, "pad_id": None, "eos_id": None, "vocab_size": None}
    from packtool.tokenization.loading import load_spec

    return load_spec(cfg.tokenizer).info()


def _meta(source, cfg, fmt, reason, tokenizer, backend, warnings, removed, kind, label_src) -> dict:
    warnings = list(warnings)
    if removed:
        warnings.append(f"removed {removed} padding token(s) marked 0 in attention_mask")
    if source.skipped:
        warnings.insert(0, f"skipped {len(source.skipped)} bad record(s): source indices "
                           f"{_quote(s.source_index for s in source.skipped)}")
    if backend.get("reason") and backend.get("requested") == "auto" and kind == "chat":
        warnings.append(f"tokenizer backend hf: {backend['reason']}")
    options = {"train_on": cfg.train_on, "chat_template": cfg.chat_template}
    if kind == "pretokenized":
        options = {"labels_from": label_src, "train_on": None, "chat_template": None}
    return {
        "format": fmt, "format_reason": reason, "tokenizer": tokenizer, "backend": backend,
        "warnings": warnings, "sources": [s.__dict__ for s in source.files], "options": options,
        "num_read": source.num_read, "skipped": [s.to_json() for s in source.skipped],
    }


def _finish(entry: cache.MappedEntry, cache_hit: bool, seconds: dict) -> TokenizedData:
    meta = entry.meta
    td = TokenizedData.from_table(
        entry.table,
        num_read=meta["num_read"],
        skipped=[SkippedRecord(**s) for s in meta["skipped"]],
        format=meta["format"],
        format_reason=meta["format_reason"],
        tokenizer=meta["tokenizer"],
        sources=[SourceFile(**s) for s in meta["sources"]],
        options=meta["options"],
        cache_hit=cache_hit,
        warnings=list(meta["warnings"]),
        backend=meta.get("backend", {}),
        seconds=seconds,
    )
    td.release_pages = entry.release
    return td
