"""One tokenize run: cache → decide → plan → ordered_map(step, batches) → probes / retry → commit.

    load_tokenized(data, cfg)            the local engine (packtool.cluster.tokenize: the Ray one)
      cache_key hit ──▶ the entry, checked and memory-mapped (transformers never imported)
      RecordSource ──RawBatch──▶ source.decided_stream (each file's FileDecision; batch.fmt)
      plan_run ──RunPlan──▶ Run (data, cfg, source, decisions, plan, batches)
      checked(run, attempt)                attempt(run, check, stats); a probe that differs
                                           (UseReference): again on Run.again, the reference path
        local attempt: forking.ordered_map(Work(step, reference), items, num_proc)
            items   (True, probe) (False, batch) ...  a probe (FastCheck.take) just before its batch
            probe  ──where──▶ Stats.conclude, as it is ready, and every one before a refusal is
                   reported and at the end (identical, or UseReference before the commit)
            batch  ──StepResult──▶ rejects ──▶ RecordSource.reject (file:line; --on-error)
                                   Stats.add;  Arrow batch ──▶ EntryWriter (data.arrow)
        ──commit(label_audit.meta(run, stats))──▶ tok-<key>/ ──mmap──▶ TokenizedData

    RunPlan (plan_run(cfg, decisions)): everything decided before a record is encoded, frozen
        kind          "chat" | "pretokenized"               the input's (source.input_kind)
        step          EncodeStep run over every batch        (the fast path's, when it is tried)
        reference     EncodeStep of the reference path       None: the fast path is not tried
        tokenizer     the manifest's;  template;  backend (BackendReport);  warnings (said once)

The fast path (fastokens + render.best's renderer, when `--tokenizer-backend auto` allows it and
fastokens serves the tokenizer) runs only where it gives ids, labels and refusals identical to the
reference path (tokenizers + jinja) on the probes (FastCheck: the CHECK_* constants say which
examples). A difference: the run starts again on the reference path (`RunPlan.on_difference`). The
Ray engine runs the same plan, check, Stats and meta with its own executor and the same FastCheck.
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
from packtool.data.labels import arrow_numpy
from packtool.data.tokenized import TokenizedData, token_schema
from packtool.errors import PacktoolError, UsageError
from packtool.forking import ordered_map
from packtool.progress import Reporter, reporter
from packtool.tokenization import cache
from packtool.tokenization.chat_template import choose, template_key
from packtool.tokenization.encode import EncodeStep
from packtool.tokenization.label_audit import check_strict_labels, meta, meta_fields, no_examples
from packtool.tokenization.loading import library_versions, load_spec, tokenizer_key
from packtool.tokenization.render import best
from packtool.tokenization.render import preload as jinja_preload
from packtool.tokenization.source import RecordSource, decided_stream, input_kind


@dataclass(frozen=True)
class BackendReport:
    """Which tokenizer backend ran and why: the manifest's `backend` (None fields left out)."""

    name: str | None
    requested: str | None = None
    renderer: str | None = None
    check: dict | None = None
    reason: str | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in dataclasses.asdict(self).items() if k == "name" or v is not None}


@dataclass(frozen=True)
class RunPlan:
    kind: str
    step: EncodeStep
    reference: EncodeStep | None
    tokenizer: dict
    template: object
    backend: BackendReport
    warnings: tuple[str, ...] = ()
    label_source: str | None = None
    pretokenized: tuple[str, str] | None = None

    def on_difference(self, why: str) -> RunPlan:
        """This plan on the reference path after the fast path differed on a probe (`why`)."""
        return dataclasses.replace(
            self,
            step=self.reference,
            reference=None,
            backend=BackendReport("hf", self.backend.requested, "jinja", reason=why),
        )

    def wait(self) -> None:
        """Wait for the fast backend's preload thread (no exit or fork while it is in native code)."""
        if self.step.spec is not None:
            self.step.spec.engines.wait()

    def building(self) -> bool:
        """The fast backend is still being built on its thread (time to spare)."""
        return self.step.spec is not None and self.step.spec.engines.building()


def plan_run(cfg: TokenizeConfig, decisions, preload: bool = False) -> RunPlan:
    """The RunPlan of an input whose files were decided (`decisions`, reading order, so far).
    `preload`: start building the fast backend now, on a thread (it overlaps what follows)."""
    kind, label_source = input_kind(decisions)
    if kind == "pretokenized":
        return _pretokenized_plan(cfg, label_source)
    if preload:
        idle.later(jinja_preload)  # the probe and the reference path render with it
    spec = load_spec(cfg.tokenizer)
    why = fast_refused(spec, cfg.tokenizer_backend)
    if why is None and preload:
        spec.engines.preload()
    try:
        template = choose(spec, cfg.chat_template, cfg.train_on, cfg.template_date)
    except BaseException:
        spec.engines.wait()
        raise
    first = next((d for d in decisions if d.first_len), None)
    reference = EncodeStep(  # the reference path: tokenizers + jinja (fmt: of a batch with none)
        "chat",
        cfg.read,
        fmt=first.fmt if first is not None else cfg.read.format or "messages",
        spec=spec,
        template=template,
        train_on=cfg.train_on,
        special_in_content=cfg.special_in_content,
    )
    step, backend = reference, BackendReport("hf", cfg.tokenizer_backend, "jinja", reason=why)
    if why is None:
        renderer, note = best(template)
        step = reference.with_backend("fastokens", renderer)
        backend = BackendReport("fastokens", cfg.tokenizer_backend, renderer, {"examples": 0}, note)
    return RunPlan(
        "chat",
        step,
        reference if why is None else None,
        {**spec.info(), **template.info()},
        template,
        backend,
        tuple(template_warnings(template)),
    )


def _pretokenized_plan(cfg: TokenizeConfig, label_source: str) -> RunPlan:
    step = EncodeStep("pretokenized", cfg.read, label_source=label_source)
    labels_from = label_source if label_source != "all" else "every token"
    ignored = ["--chat-template"] if cfg.chat_template is not None else []
    if cfg.train_on != "assistant":
        ignored.append("--train-on")
    warning = (
        f"{' and '.join(ignored)} do not apply to pre-tokenized input: labels come from "
        f"{labels_from}"
    )
    if cfg.tokenizer is None:  # ids come as they are; a tokenizer only names the pad/eos ids
        tokenizer = {"name": None, "pad_id": None, "eos_id": None, "vocab_size": None}
    else:
        tokenizer = load_spec(cfg.tokenizer).info()
    return RunPlan(
        "pretokenized",
        step,
        None,
        tokenizer,
        None,
        BackendReport(None, reason="pre-tokenized input is not tokenized"),
        (warning,) if ignored else (),
        label_source=label_source,
        pretokenized=("pretokenized", f"records carry input_ids; labels from {labels_from}"),
    )


def fast_refused(spec, requested: str) -> str | None:
    """Why the fast path is not tried (None: it is); UsageError for --tokenizer-backend fastokens."""
    if requested == "hf":
        return "--tokenizer-backend hf"
    try:
        import fastokens  # noqa: F401
    except ImportError:
        why = "fastokens is not installed"
    else:
        why = spec.fast_refusal  # the byte rules' verdict (backends.refusal_of)
    if why is not None and requested == "fastokens":
        raise UsageError(
            f"--tokenizer-backend fastokens: {why}; use --tokenizer-backend auto or hf"
        )
    return why


def template_warnings(template) -> list[str]:
    """What a template without {% generation %} markers costs, said once."""
    if template.mode not in ("prefix", "last"):
        return []
    which = "assistant turns are" if template.mode == "prefix" else "the last assistant turn is"
    return [
        f"chat template '{template.name}' has no {{% generation %}} markers: {which} "
        "located by diffs of renders (slower; checked per example)"
    ]


CHECK_EXAMPLES = 256  # examples encoded by both backends before fastokens is trusted
CHECK_PER_FILE = 32  # ...and of each later file's first batch (a folder's files differ in format)
CHECK_FILES = 64  # files probed in full; beyond them only a file of a format not probed yet


class UseReference(Exception):
    """The fast path differed from the reference path on a probe: start again with the reference."""


class FastCheck:
    def __init__(self, backend: BackendReport):
        self.backend = backend  # the plan's, before any probe: fastokens, its renderer, its note
        self.files: list[str] = []  # files with a probe, in reading order
        self.formats: set[str] = set()
        self.examples = 0  # examples compared so far
        self.report: BackendReport | None = None

    @classmethod
    def of(cls, plan: RunPlan) -> FastCheck | None:
        """The check of a plan that tries the fast path (None when it does not)."""
        return cls(plan.backend) if plan.reference is not None else None

    def take(self, file: str, fmt: str | None, n: int) -> int:
        if not n or file in self.files:
            return 0
        if len(self.files) >= CHECK_FILES and fmt in self.formats:
            return 0
        first = not self.files
        self.files.append(file)
        self.formats.add(fmt)
        return min(n, CHECK_EXAMPLES if first else CHECK_PER_FILE)

    def probes(self, files: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
        return [(f, fmt, k) for f, fmt, n in files if (k := self.take(f, fmt, n))]

    def conclude(self, n: int, where: str | None) -> None:
        self.examples += n
        check = {"examples": self.examples, "identical": where is None}
        if len(self.files) > 1:
            check["files"] = len(self.files)
        backend = self.backend
        if where is None:
            self.report = dataclasses.replace(backend, check=check)
            return
        why = (
            f"the fast path (fastokens, {backend.renderer} renderer) differs from tokenizers + "
            f"jinja on {where}"
        )
        if backend.reason:  # (why the renderer is jinja)
            why = f"{backend.reason}; {why}"
        if backend.requested == "fastokens":
            raise PacktoolError(f"--tokenizer-backend fastokens: {why}; use --tokenizer-backend hf")
        raise UseReference(why)


def compare(a, b, probe) -> str | None:
    """None when the fast path's result `a` is the reference's `b`, else where they first differ."""
    if a.rejects == b.rejects and a.table.equals(b.table):
        return None
    ra, rb = a.table.to_pydict(), b.table.to_pydict()
    for j, (x, y) in enumerate(zip(ra["input_ids"], rb["input_ids"], strict=False)):
        if x != y or ra["labels"][j] != rb["labels"][j]:
            return probe.where(int(ra["source_index"][j]) - probe.start)
    return "the first batch"


# -- the run ---------------------------------------------------------------------------------------
SMALL_BYTES = 4 << 20  # below this much input one process is faster than starting workers


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
        _, decisions, batches = decided_stream(source.batches(), self.cfg.read)
        return Run(self.data, self.cfg, source, decisions, plan, batches)


@dataclass
class Stats:
    """What the steps of one run fill, in reading order (module docstring)."""

    backend: BackendReport
    removed: int = 0
    zero_loss: list[int] = field(default_factory=list)
    special: list[int] = field(default_factory=list)
    notes: list[tuple[int, dict]] = field(default_factory=list)
    # preference pairs TRL's DPOTrainer would tokenize otherwise: label_audit.meta keeps it as
    # tokenizer["pairs_unlike_trl"], which the manifest's preference.unlike_trl reads
    unlike_trl: int = 0

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
    """attempt(run, check, stats); after a probe that differs (UseReference), once more on the
    reference path: (the run that finished, its Stats, what attempt returned)."""
    while True:
        check, stats = FastCheck.of(run.plan), Stats(run.plan.backend)
        try:
            return run, stats, attempt(run, check, stats)
        except UseReference as e:
            run = run.again(str(e))


@dataclass(frozen=True)
class Work:
    """The local executor's function: a batch → its StepResult; a probe → where the step and the
    reference differ on it (None: identical); the reference first (the fast backend may still be
    building on its thread)."""

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


def cache_key(sources: list, cfg, tokenizer: str | None = None, not_read=()) -> str:
    """The entry's key: the sources, the tokenizer files (`tokenizer`: tokenizer_key(cfg.tokenizer)
    when the caller has it), the chat template, the options that shape labels, the library versions
    and the paths found and not read (their warning is in the entry)."""
    parts = {
        "packtool": packtool.__version__,
        "encoder": 6,  # raised when an entry's content changes within one packtool version
        "libraries": library_versions(),
        "sources": [(s.path, s.size, s.sha256) for s in sources],
        "tokenizer": tokenizer or tokenizer_key(cfg.tokenizer),
        "template": template_key(cfg.chat_template),
        "options": cfg.fingerprint_dict(),
    }
    if not_read:  # (only then: other entries keep their keys)
        parts["not_read"] = list(not_read)
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


def load_tokenized(
    data: str, cfg: TokenizeConfig, progress: bool | Reporter = True
) -> TokenizedData:
    """Read, normalize and tokenize `data`, or load the checked cache entry of an earlier run;
    `progress`: where the tokenizing stage reports (packtool.progress.reporter)."""
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
    _, decisions, batches = decided_stream(source.batches(), cfg.read)
    # decided_stream fills `decisions` as it is read: pulling the first batch decides the first
    # file, whose FileDecision plan_run reads (the input's kind, pre-tokenized labels)
    first = next(batches, None)
    plan = plan_run(cfg, decisions, preload=True)  # a pre-tokenized plan preloads nothing
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
        # what the caller registered for later, while the fast backend builds: api.load_tokenized's
        # pack.warm (a toy pack_tokenized) and plan_run's jinja preload; without a build, not run here
        idle.run()
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
