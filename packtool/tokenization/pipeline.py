"""read → normalize → tokenize, cached on disk, Arrow-backed: the input of `profile` and `pack`.

    source files ──iter_records──▶ RawRecord ──normalize──▶ example JSON ──▶ normalized.arrow
                                      │ bad: skipped (counted, listed) or fatal (--on-error error)
    normalized.arrow ──datasets.map(Encoder, num_proc)──▶ tokenized dataset ──save_to_disk──▶ cache

The cache key hashes the source files' bytes, the tokenizer files, the chat template, the options
that shape labels and the packtool version: the same input tokenized again is loaded from the
cache (memory-mapped) without loading transformers at all.

A dataset whose records already carry `input_ids` (optionally `labels`, `completion_mask` or
`assistant_masks`) is pre-tokenized: it skips templates and tokenization entirely.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import numpy as np

import packtool
from packtool.config import TokenizeConfig
from packtool.data import SkippedRecord, SourceFile, TokenizedData
from packtool.errors import PacktoolError
from packtool.io.files import cache_root

IGNORE = -100
SMALL = 2000  # below this many examples one process is faster than forking workers
MAX_LISTED = 20  # source indices quoted in a warning


def _quote(indices) -> str:
    idx = list(indices)
    head = ", ".join(str(i) for i in idx[:MAX_LISTED])
    return head + (f", … ({len(idx) - MAX_LISTED} more)" if len(idx) > MAX_LISTED else "")


def _tokenizer_key(name: str | None) -> str:
    from packtool.tokenization.loading import (
        BUILTIN_TOKENIZER,
        _files_hash,
        builtin_tokenizer_dir,
        hub_folder,
    )

    if name is None or name == BUILTIN_TOKENIZER:
        return "builtin:" + _files_hash(builtin_tokenizer_dir())
    p = Path(name).expanduser()
    if p.is_dir():
        return f"dir:{p.resolve()}:" + _files_hash(p)
    snapshot = hub_folder(name)  # the cached snapshot's files: a new snapshot is a new key
    return f"hub:{name}:" + (_files_hash(snapshot) if snapshot else "uncached")


def _template_key(chat_template: str | None) -> str:
    """The template's bytes: a file, or a built-in (edited built-ins must not hit old entries)."""
    from packtool.tokenization.loading import BUILTIN_TEMPLATES

    if chat_template is None:  # the tokenizer's own (its files are hashed) or, for the built-in one:
        chat_template = "chatml-train"
    path = BUILTIN_TEMPLATES.get(chat_template) or Path(chat_template).expanduser()
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return f"name:{chat_template}"


def _library_versions() -> dict[str, str]:
    """Versions that change rendering or tokenization, read without importing the packages."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for pkg in ("transformers", "tokenizers", "jinja2"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "absent"
    return out


def cache_key(sources: list[SourceFile], cfg: TokenizeConfig) -> str:
    h = hashlib.sha256()
    parts = {
        "packtool": packtool.__version__,
        "encoder": 1,
        "libraries": _library_versions(),
        "sources": [(s.path, s.size, s.sha256) for s in sources],
        "tokenizer": _tokenizer_key(cfg.tokenizer),
        "template": _template_key(cfg.chat_template),
        "options": cfg.fingerprint_dict(),
    }
    h.update(json.dumps(parts, sort_keys=True, default=str).encode())
    return h.hexdigest()[:24]


# ---------------------------------------------------------------------------------------------
# the datasets.map worker


def _encode_batch(batch: dict, encoder) -> dict:
    examples = [json.loads(s) for s in batch["example"]]
    enc = encoder.encode(examples)
    return {
        "input_ids": enc.input_ids,
        "labels": enc.labels,
        "length": [len(x) for x in enc.input_ids],
        "num_loss_tokens": [int(np.count_nonzero(lab != IGNORE)) for lab in enc.labels],
        "source_index": batch["source_index"],
        "error": [e or "" for e in enc.errors],
    }


def _features():
    import datasets

    return datasets.Features(
        {
            "input_ids": datasets.Sequence(datasets.Value("int32")),
            "labels": datasets.Sequence(datasets.Value("int32")),
            "length": datasets.Value("int32"),
            "num_loss_tokens": datasets.Value("int32"),
            "source_index": datasets.Value("int64"),
            "error": datasets.Value("string"),
        }
    )


# ---------------------------------------------------------------------------------------------


class _Reader:
    """Reads and normalizes records, applying --on-error; remembers what it skipped and why."""

    def __init__(self, data: str, cfg: TokenizeConfig):
        self.data, self.cfg = data, cfg
        self.skipped: list[SkippedRecord] = []
        self.num_read = 0
        self.format = ""
        self.reason = ""
        self._records = None

    def _bad(self, rec, reason: str) -> None:
        where = f"{rec.file}:{rec.line}" if rec.line is not None else f"{rec.file} record {rec.index}"
        if self.cfg.read.on_error == "error":
            raise PacktoolError(
                f"{where}: {reason}; fix the record, or pass --on-error skip to count and list bad records"
            )
        self.skipped.append(SkippedRecord(rec.index, rec.file, rec.line, reason))

    def records(self):
        """Yields good records, in order. One pass: every call continues where the last stopped."""
        if self._records is None:
            self._records = self._read()
        return self._records

    def _read(self):
        from packtool.io.readers import iter_records

        for rec in iter_records(self.data, self.cfg.read):
            self.num_read += 1
            if rec.record is None:
                self._bad(rec, rec.error or "unreadable record")
                continue
            yield rec

    def examples(self, first=None):
        """Yields (source_index, normalized example) for records that fit the detected format."""
        from packtool.formats import FormatError, detect_format, normalize

        def gen():
            if first is not None:
                yield first
            yield from self.records()

        for rec in gen():
            if not self.format:
                try:
                    self.format, self.reason = detect_format(rec.record, self.cfg.read)
                except FormatError as e:
                    self._bad(rec, str(e))
                    continue
            try:
                ex = normalize(rec.record, self.format, self.cfg.read)
            except FormatError as e:
                self._bad(rec, str(e))
                continue
            yield rec.index, ex


def _write_normalized(reader: _Reader, first, path: Path, progress: bool) -> int:
    """Stream normalized examples into an Arrow file (source_index int64, example JSON string)."""
    import pyarrow as pa

    schema = pa.schema([("source_index", pa.int64()), ("example", pa.large_string())])
    n = 0
    idx: list[int] = []
    rows: list[str] = []
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:

        def flush():
            if idx:
                writer.write_batch(pa.record_batch([pa.array(idx, pa.int64()), pa.array(rows, pa.large_string())],
                                                   schema=schema))
                idx.clear()
                rows.clear()

        for i, ex in _progress(reader.examples(first), progress, "reading"):
            idx.append(i)
            rows.append(json.dumps(ex, ensure_ascii=False))
            n += 1
            if len(idx) >= 10_000:
                flush()
        flush()
    return n


def _progress(it, enabled: bool, what: str):
    if not enabled:
        yield from it
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from packtool.commands.common import console

    cols = (TextColumn(f"[bold]{what}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*cols, console=console(), transient=True) as bar:
        task = bar.add_task(what, total=None)
        for k, x in enumerate(it):
            yield x
            if k % 1000 == 0:
                bar.update(task, completed=k)


def _finish(ds, meta: dict, cache_hit: bool) -> TokenizedData:
    t = ds.data.table if hasattr(ds.data, "table") else ds.data
    return TokenizedData(
        dataset=ds,
        lengths=np.asarray(t.column("length").to_numpy(), dtype=np.int32),
        loss_counts=np.asarray(t.column("num_loss_tokens").to_numpy(), dtype=np.int32),
        source_index=np.asarray(t.column("source_index").to_numpy(), dtype=np.int64),
        num_read=meta["num_read"],
        skipped=[SkippedRecord(**s) for s in meta["skipped"]],
        format=meta["format"],
        format_reason=meta["format_reason"],
        tokenizer=meta["tokenizer"],
        sources=[SourceFile(**s) for s in meta["sources"]],
        options=meta["options"],
        cache_hit=cache_hit,
        warnings=meta["warnings"],
    )


def load_tokenized(data: str, cfg: TokenizeConfig, progress: bool = True) -> TokenizedData:
    import datasets

    from packtool.io.readers import resolve_sources

    sources = resolve_sources(data, cfg.read.split)
    key = cache_key(sources, cfg)
    final = cache_root() / f"tok-{key}"
    if cfg.cache and (final / "meta.json").is_file():
        meta = json.loads((final / "meta.json").read_text())
        with _quiet():
            return _finish(datasets.load_from_disk(str(final / "data")), meta, cache_hit=True)

    reader = _Reader(data, cfg)
    first = next(reader.records(), None)
    work = cache_root() / f"work-{key}-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        if first is not None and "input_ids" in first.record and cfg.read.format is None:
            from packtool.tokenization.pretokenized import pretokenized_dataset

            ds, meta = pretokenized_dataset(reader, first, cfg)
            if cfg.tokenizer is not None:  # ids come as they are; the tokenizer names pad/eos ids
                from packtool.tokenization.loading import load_tokenizer

                meta["tokenizer"] = load_tokenizer(cfg.tokenizer).info()
        else:
            ds, meta = _tokenize(reader, first, cfg, work, progress)
        meta.update(
            sources=[s.__dict__ for s in sources],
            options={"train_on": cfg.train_on, "chat_template": cfg.chat_template, **meta.get("options", {})},
            num_read=reader.num_read,
            skipped=[s.to_json() for s in reader.skipped],
        )
        if reader.skipped:
            meta["warnings"].insert(0, f"skipped {len(reader.skipped)} bad record(s): source indices "
                                       f"{_quote(s.source_index for s in reader.skipped)}")
        if len(ds) == 0:
            raise PacktoolError(f"{data}: no usable examples ({reader.num_read} records read, "
                                f"{len(reader.skipped)} skipped)")
        if not cfg.cache:
            shutil.rmtree(final, ignore_errors=True)
        tmp = work / "out"
        with _quiet():
            ds.save_to_disk(str(tmp / "data"))
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1, default=str))
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        with _quiet():
            return _finish(datasets.load_from_disk(str(final / "data")), meta, cache_hit=False)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _tokenize(reader: _Reader, first, cfg: TokenizeConfig, work: Path, progress: bool):
    import datasets

    from packtool.tokenization.encode import Encoder
    from packtool.tokenization.loading import load_tokenizer, resolve_template

    loaded = load_tokenizer(cfg.tokenizer)
    template = resolve_template(loaded, cfg.chat_template)
    n = _write_normalized(reader, first, work / "normalized.arrow", progress)
    warnings: list[str] = []
    if n and not template.has_generation and cfg.train_on != "all":
        warnings.append(
            f"chat template '{template.name}' has no {{% generation %}} markers: assistant turns are "
            "located by a prefix diff of renders (slower; checked per example)"
        )
    encoder = Encoder(loaded.tokenizer, template, cfg.train_on)
    src = datasets.Dataset.from_file(str(work / "normalized.arrow"), in_memory=False) if n else None
    num_proc = cfg.num_proc or os.cpu_count() or 1
    if n < SMALL:
        num_proc = 1
    if src is not None:
        with _quiet(enabled=not progress):
            ds = _map(src, encoder, num_proc, work)
        err_col = ds["error"]
        errors = np.fromiter((bool(e) for e in err_col), dtype=bool, count=len(err_col))
        if errors.any():
            src_col = np.asarray(ds["source_index"])
            for j in np.flatnonzero(errors):
                reader._bad(_Where(int(src_col[j]), reader.data), err_col[j])
            ds = ds.select(np.flatnonzero(~errors)).flatten_indices()
        ds = ds.remove_columns(["error"])
    else:
        ds = datasets.Dataset.from_dict(
            {k: [] for k in ("input_ids", "labels", "length", "num_loss_tokens", "source_index", "error")},
            features=_features(),
        ).remove_columns(["error"])
    if len(ds):
        loss = np.asarray(ds.data.column("num_loss_tokens").to_numpy())
        src_idx = np.asarray(ds.data.column("source_index").to_numpy())
        zero = src_idx[loss == 0]
        if len(zero):
            warnings.append(
                f"{len(zero)} example(s) have no loss token (no assistant turn, or every assistant weight 0): "
                f"source indices {_quote(zero.tolist())}"
            )
    meta = {
        "format": reader.format,
        "format_reason": reader.reason,
        "tokenizer": {**loaded.info(), "chat_template": template.name, "chat_template_hash": template.hash,
                      "generation_markers": template.has_generation},
        "warnings": warnings,
    }
    return ds, meta


def _map(src, encoder, num_proc: int, work: Path):
    return src.map(
        _encode_batch,
        batched=True,
        batch_size=256,
        fn_kwargs={"encoder": encoder},
        remove_columns=src.column_names,
        features=_features(),
        num_proc=num_proc if num_proc > 1 else None,
        cache_file_name=str(work / "tokenized.arrow"),
        new_fingerprint=f"packtool-{work.name}",
        desc=f"tokenizing ({num_proc} process{'es' if num_proc > 1 else ''})",
    )


class _quiet:
    """Hide datasets' progress bars (saving, loading; tokenizing when progress is off)."""

    def __init__(self, enabled: bool = True):
        self.enabled = enabled

    def __enter__(self):
        from datasets.utils import logging as dlog

        self.was = dlog.is_progress_bar_enabled()
        if self.enabled:
            dlog.disable_progress_bar()

    def __exit__(self, *exc):
        from datasets.utils import logging as dlog

        if self.was:
            dlog.enable_progress_bar()


class _Where:
    """Where a record came from, for messages about records that failed after reading."""

    def __init__(self, index: int, file: str):
        self.index, self.file, self.line = index, file, None
