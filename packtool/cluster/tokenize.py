"""Tokenizing on Ray: the files' parts read and encoded by Ray tasks, their tokens written to
part files, only lengths back.

    parts   [(file, part)]  reading order (io.readers.file_parts)      part k: records counted
       │ Session.run: the probes, then encode_part(k), one task a part,   from 0 at the part's start
       │ <= workers at a time (while a local cluster starts, the driver is one of them)
       ▼
    SCRATCH/part-k.ids, part-k.labels   the part's tokens, once (cluster.parts); the writer preads them
    driver  ◀── per part: source_index (in part) i64[n], length i32[n], num_loss_tokens i32[n],
                meta {records, lines, rejects [[index, line, position, reason]], special, notes,
                removed, memory}
            part_start = cumsum(records)  →  source_index = part_start[part] + index
            line = lines of the file's earlier parts + line;  position likewise
            each example's first token in its part's files = exclusive cumsum of the part's lengths
            --limit: source indices >= limit are not read (as a local run stops there)

Before the parts: per file, one task each (`file_infos`), what the local pipeline learns from a
file before it tokenizes it (FileInfo: size, sha256, parts, tokenization.source.decide_file's
decision without its batches); `probe`, the fast path's check of a file's head, runs with the
encode tasks. A task's PacktoolError comes back as data, and the driver raises the first in
reading order, so the error reported does not depend on which task failed first.

The driver decides nothing itself (packtool.cluster draws where each decision comes from); a
difference on a probe encodes the parts again on `plan.on_difference`, the reference path (the
part files rewritten). With --on-error error a part stops at its first refused record and the driver
raises the first in reading order, with its file and line.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from packtool.cluster.parts import PartWriter
from packtool.cluster.parts import offsets as part_offsets
from packtool.cluster.session import Session, Shared, call, fetch_once, memory
from packtool.config import ReadConfig, TokenizeConfig
from packtool.data.labels import arrow_numpy
from packtool.data.tokenized import SourceFile, TokenizedData
from packtool.errors import PacktoolError, UsageError
from packtool.io import readers
from packtool.io.sources import locate
from packtool.progress import Reporter, reporter
from packtool.tokenization.source import FileDecision, decide_file


@dataclass(frozen=True)
class FileInfo:
    path: str
    size: int = 0
    sha256: str = ""
    parts: list[Any] = dataclasses.field(default_factory=list)
    decision: FileDecision | None = None
    error: tuple[str, str] | None = None  # (class, message) of the PacktoolError it raised


def file_info(path: str, read: ReadConfig, part_bytes: int) -> FileInfo:
    from packtool.io.files import sha256_file

    try:
        decision = decide_file(path, readers.part_batches(path, read, None), read)
        return FileInfo(
            path,
            os.path.getsize(path),
            sha256_file(path),
            readers.file_parts(path, part_bytes),
            dataclasses.replace(decision, first=()),  # its batches stay here
        )
    except PacktoolError as e:
        return FileInfo(path, error=(type(e).__name__, str(e)))


def file_infos(session, paths: list[str], read: ReadConfig, part_bytes: int) -> list[FileInfo]:
    """file_info of every file, one task each, in the order of `paths`; the first error raised."""
    try:
        infos = session.run(file_info, [(p, read, part_bytes) for p in paths])
    except Exception as e:  # noqa: BLE001 - whatever failed in a worker: one clean error
        raise session.failure(e) from None
    for info in infos:
        if info.error is not None:
            kind, message = info.error
            raise (UsageError if kind == "UsageError" else PacktoolError)(message)
    return infos


def probe(path: str, read: ReadConfig, fmt: str, n: int, setup):
    """The fast step and the reference step (the encode tasks' Setup) on the first `n` records of
    the file's first batch: None when they agree, else where they first differ (pipeline.compare).
    The reference first: in the driver, the fast backend may still be building on its thread."""
    from packtool.tokenization.pipeline import compare

    run = fetch_once(setup)
    fast, reference = run.step, run.reference
    first = next(iter(readers.part_batches(path, read, None)))
    first.fmt = fmt
    head = first.head(n)
    expected = reference(head)
    return compare(fast(head), expected, head)


@dataclass
class Setup:
    """What every encode task of a run needs, one object in the store (a Shared argument): a
    worker fetches it once and keeps it, with the tokenizer its steps build (session.fetch_once)."""

    step: Any  # the plan's EncodeStep
    reference: Any  # the plan's reference EncodeStep (None: no probes)
    read: Any  # ReadConfig
    parts: list[tuple[str, Any]]  # (file, part) in reading order
    fmts: dict[str, str]  # each file's format
    stop: bool  # --on-error error: a part stops at its first refused record


def encode_part(k: int, setup: Shared, folder: str | None):
    """The task that reads part k and encodes it with the run's Setup, its tokens written to `folder`
    (None: not kept, `profile` needs the lengths only): the part's rows and meta."""
    run = fetch_once(setup)
    path, part = run.parts[k]
    meta = {"records": 0, "lines": None, "rejects": [], "special": [], "notes": [], "removed": 0}
    cols: dict[str, list] = {c: [] for c in ("source_index", "length", "num_loss_tokens")}
    with PartWriter(folder, k) if folder is not None else nullcontext() as out:
        for b in readers.part_batches(path, run.read, part):
            if b.lines_read is not None:
                meta["lines"] = b.lines_read
            if not len(b):
                continue
            b.fmt = run.fmts[path]
            result = run.step(b)
            meta["records"] += len(b)
            meta["rejects"] += [
                [b.start + i, b.line_of(i), b.position(i), why] for i, why in result.rejects
            ]
            meta["special"] += result.special
            meta["notes"] += result.notes  # (index, note) pairs: JSON lists
            meta["removed"] += result.removed_padding
            if out is not None:
                out.add(result.table)
            for c, v in cols.items():  # (np.asarray of an Arrow array imports pandas)
                v.append(arrow_numpy(result.table.column(c)))
            if meta["rejects"] and run.stop:
                break
    got = {c: np.concatenate(v) if v else np.zeros(0, _DTYPES[c]) for c, v in cols.items()}
    return got, json.loads(json.dumps({**meta, "memory": memory()}))  # (as JSON: plain lists)


_DTYPES = {"source_index": np.int64, "length": np.int32, "num_loss_tokens": np.int32}


@dataclass
class ClusterRows:
    """The encoded examples, in part files on the cluster's filesystem; `write` packs them."""

    folder: Path | None  # the parts' files (cluster.parts), removed once written; None: not kept
    part: np.ndarray  # int64[N]: per example of the TokenizedData, its part
    offset: np.ndarray  # int64[N]: its first token in the part's files
    parts: list[tuple[str, Any]]
    session: Session
    memory: list[dict] = field(default_factory=list)  # each task's worker memory

    shards: int = 0  # shards written (by `write`)

    def write(self, tmp, data, job):
        from packtool.cluster.write import write_shards

        if self.folder is None:
            raise PacktoolError(
                "this Ray run kept no tokens (Session.keep_tokens is False): tokenize again to pack"
            )
        try:
            written = write_shards(self, tmp, data, job)
        finally:
            self.session.drop(self.folder)
        self.shards = len(written.shards)
        return written

    def report(self) -> dict[str, Any]:
        """The run's engine: workers, parts, shards, the calls the driver made itself while the
        cluster started, and the largest peak (VmHWM) and anonymous memory any worker reported."""
        workers = [m for m in self.memory if not m.get("driver")]
        return {
            "name": "ray",
            "workers": self.session.workers,
            "parts": len(self.parts),
            "shards": self.shards,
            "driver_calls": self.session.driver_calls,
            "worker_vmhwm": max((m["vmhwm"] for m in workers), default=0),
            "worker_rss_anon": max((m["rss_anon"] for m in workers), default=0),
        }


@dataclass
class _Collected:
    """Per example: its part, source_index within the part, length, num_loss_tokens, first token
    in the part's files; per part: its meta (module docstring)."""

    part: np.ndarray
    source_index: np.ndarray
    length: np.ndarray
    num_loss_tokens: np.ndarray
    offset: np.ndarray
    metas: dict[int, dict]


def _encode(session: Session, setup: Shared, parts, folder, probes=()) -> tuple:
    """The executor: the plan's step over every part (one task each) and the fast path's `probes`
    (probe's arguments, run first); it decides nothing. (_Collected, the probes' results)."""
    where = None if folder is None else str(folder)
    calls = [(probe, *p) for p in probes]
    calls += [(encode_part, k, setup, where) for k in range(len(parts))]
    try:
        results = session.run(call, calls)
    except Exception as e:  # noqa: BLE001 - whatever failed in a worker: one clean error
        raise session.failure(e) from None
    done, probed = results[len(probes) :], results[: len(probes)]
    metas = {k: meta for k, (_, meta) in enumerate(done)}
    rows = [got for got, _ in done]
    return _Collected(
        part=np.repeat(np.arange(len(parts), dtype=np.int64), [len(r["length"]) for r in rows]),
        metas=metas,
        offset=_concat([part_offsets(r["length"].astype(np.int64)) for r in rows]),
        **{c: _concat([r[c] for r in rows]) for c in ("source_index", "length", "num_loss_tokens")},
    ), [(p[3], where) for p, where in zip(probes, probed, strict=True)]


def _concat(arrays: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(arrays) if arrays else np.zeros(0, np.int64)


def load_tokenized(
    data: str, cfg: TokenizeConfig, session: Session, progress: bool | Reporter = True
) -> TokenizedData:
    """`data` (a file, folder or glob of JSON Lines, JSON or Parquet) read and tokenized on the
    cluster of `session`: a TokenizedData with lengths and no table, its rows in `.rows`. The run,
    its retry, Stats and meta are tokenization.pipeline's; only the executor is this module's."""
    from packtool.tokenization.pipeline import Run, checked, plan_run
    from packtool.tokenization.source import RecordSource, input_kind, not_a_pack

    t0 = time.perf_counter()
    not_a_pack(data)
    located = locate(data, cfg.read.split)
    if located.kind != "files":
        raise UsageError(
            f"--engine ray reads files (JSON Lines, JSON, Parquet: one, a folder or a glob); {data} "
            "is a datasets folder or hub dataset: use --engine local"
        )
    with reporter(progress).stage(
        "tokenizing on Ray", unit="examples", detail=f"{session.workers} workers"
    ) as bar:
        paths = list(located.files)
        infos = file_infos(session, paths, cfg.read, part_bytes(paths, session.workers))
        sources = [
            SourceFile(i.path, i.size, i.sha256) for i in sorted(infos, key=lambda i: i.path)
        ]
        source = RecordSource(data, cfg.read, located, sources)
        decisions = [i.decision for i in infos]
        if input_kind(decisions)[0] == "chat":
            for d in decisions:
                if d.error and d.first_len:
                    raise UsageError(d.error)
        # while a local cluster starts, the driver encodes the first parts (Session.run): its
        # tokenizer is built meanwhile, on a thread, as the local engine builds it
        plan = plan_run(cfg, decisions, preload=not session.up())
        fmts = {d.file: d.fmt for d in decisions}
        parts = [(i.path, p) for i in infos for p in i.parts]
        folder = session.scratch() if session.keep_tokens else None

        def attempt(run, check, stats):
            plan, probes = run.plan, []
            stop = cfg.read.on_error == "error"
            setup = Shared(Setup(plan.step, plan.reference, cfg.read, parts, fmts, stop))
            if check is not None and cfg.read.limit is None:  # the probes are known: with the parts
                probes = _probes(cfg, check, setup, decisions, lambda d: d.first_len)
            got, results = _encode(session, setup, parts, folder, probes)
            counted = _count(got, parts, cfg.read.limit)
            if check is not None and not probes:  # --limit: the heads of the files it reaches
                probes = _probes(cfg, check, setup, decisions, counted.first_len)
                results = _encode(session, setup, [], None, probes)[1]
            for n, where in results:
                stats.conclude(check, n, where)
            return got, counted

        run, stats, (got, counted) = checked(Run(data, cfg, source, decisions, plan), attempt)
        order = _reading_order(got, counted, cfg.read.limit)
        data_out = _assemble(run, stats, got, counted, parts, order)
        bar.advance(len(data_out), int(data_out.lengths.sum()))
    data_out.warnings = [*data_out.warnings, *session.leftovers]
    data_out.rows = ClusterRows(
        folder,
        got.part[order],
        got.offset[order],
        parts,
        session,
        [m["memory"] for m in got.metas.values()],
    )
    seconds = time.perf_counter() - t0
    data_out.seconds = {"read_tokenize": seconds, "total": seconds}
    return data_out


MIN_PART_BYTES = 1 << 20
PARTS_PER_WORKER = 8  # parts of uneven cost, and the driver's, even out over several per worker


def part_bytes(paths: list[str], workers: int) -> int:
    """About PARTS_PER_WORKER parts per worker, within [MIN_PART_BYTES, readers.PART_BYTES]: the
    parts change only how the work is spread, the pack is the same for any."""
    total = sum(os.path.getsize(p) for p in paths)
    share = total // max(1, workers * PARTS_PER_WORKER)
    return min(readers.PART_BYTES, max(MIN_PART_BYTES, share))


def _probes(cfg, check, setup: Shared, decisions, first_len) -> list[tuple]:
    """probe's arguments for each probe of `check` (FastCheck.probes)."""
    probes = check.probes([(d.file, d.fmt, first_len(d)) for d in decisions])
    return [(f, cfg.read, fmt, n, setup) for f, fmt, n in probes]


@dataclass
class _Counted:
    """Where each part's records lie in the input, and which of them a --limit keeps."""

    part_start: np.ndarray  # int64[P]: the source index of each part's first record
    line_offset: list[int]  # lines of the file's earlier parts
    position_offset: list[int]  # records of the file's earlier parts
    per_file: dict[str, int]  # records of each file under --limit, in reading order

    def first_len(self, decision) -> int:
        """Records of the file's first batch, cut by --limit."""
        return min(decision.first_len, self.per_file.get(decision.file, 0))


def _count(got: _Collected, parts, limit: int | None) -> _Counted:
    records = np.array([got.metas[k]["records"] for k in range(len(parts))], dtype=np.int64)
    part_start = np.cumsum(records) - records
    kept = records if limit is None else np.clip(limit - part_start, 0, records)
    line_offset, position_offset = [], []
    lines: dict[str, int] = {}
    before: dict[str, int] = {}
    per_file: dict[str, int] = {}
    for k, (path, _) in enumerate(parts):
        line_offset.append(lines.get(path, 0))
        position_offset.append(before.get(path, 0))
        lines[path] = line_offset[-1] + int(got.metas[k]["lines"] or 0)
        before[path] = position_offset[-1] + int(records[k])
        per_file[path] = per_file.get(path, 0) + int(kept[k])
    return _Counted(part_start, line_offset, position_offset, per_file)


def _reading_order(got: _Collected, counted: _Counted, limit: int | None) -> np.ndarray:
    """The collected rows in source-index order, those a --limit reads."""
    end = limit if limit is not None else np.iinfo(np.int64).max
    gidx = counted.part_start[got.part] + got.source_index
    order = np.argsort(gidx, kind="stable")
    return order[gidx[order] < end]


def _assemble(run, stats, got: _Collected, counted: _Counted, parts, order) -> TokenizedData:
    """The TokenizedData the local engine would hand on, from what the parts reported (its rows:
    the collected ones in `order`): the parts' counts filled into the run's Stats, then the
    pipeline's meta."""
    from packtool.tokenization.label_audit import (
        check_strict_labels,
        meta,
        meta_fields,
        no_examples,
    )

    cfg, source = run.cfg, run.source
    end = cfg.read.limit if cfg.read.limit is not None else np.iinfo(np.int64).max  # --limit
    gidx = (counted.part_start[got.part] + got.source_index)[order]
    lengths, loss = got.length[order], got.num_loss_tokens[order]
    per_file = counted.per_file
    read = [d for d in run.decisions if per_file.get(d.file, 0)]  # the files a local run reads
    for d in read:
        source.count(d.file, per_file[d.file])
    for k, (path, _) in enumerate(parts):
        part, start = got.metas[k], int(counted.part_start[k])
        for index, line, position, why in part["rejects"]:
            if start + index >= end:
                break
            source.reject_at(
                start + index,
                path,
                None if line is None else counted.line_offset[k] + line,
                why,
                counted.position_offset[k] + position,
            )
        stats.special += [start + i for i in part["special"] if start + i < end]
        stats.notes += [(start + i, x) for i, x in part["notes"] if start + i < end]
        stats.removed += part["removed"]
    if not lengths.shape[0]:
        raise no_examples(run)
    stats.zero_loss = gidx[loss == 0].tolist()
    stats.special.sort()
    stats.notes.sort(key=lambda n: n[0])
    run = dataclasses.replace(run, decisions=read)
    stored = json.loads(json.dumps(meta(run, stats), default=str))  # as a cache entry stores it
    return check_strict_labels(
        TokenizedData(
            table=None,
            lengths=lengths.astype(np.int32),
            loss_counts=loss.astype(np.int32),
            source_index=gidx.astype(np.int64),
            **meta_fields(stored),
        ),
        cfg,
    )
