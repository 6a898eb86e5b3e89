"""The pack pipeline: TokenizedData + PackConfig → schema-v1 Parquet shards + manifest.json.

    lengths ──overflow──▶ pieces (row, start, length) ──plan_packs──▶ PackPlan (CSR rows)
      drop | truncate | split | error                                   │ shuffle rows (seed)
                                                                        ▼
    Arrow list buffers (flat values + offsets per chunk) ──layout_rows / copy_rows──▶ [k, L] int32
                                                                        │ zero-copy pyarrow
                                                                        ▼
                                          OUT/data/train-XXXXX-of-XXXXX.parquet, OUT/manifest.json

Layout (schema.Layout): with --pad-to-multiple N the plan is made over each piece's ceil(n/N)*N
slots and the kernel writes the padding; --fixed-docs writes K = --max-docs entries a row.

Memory: ~100 bytes per document plus one row group (<= 16 MiB of token slots). Accounting is
checked before the pack is published (schema.conservation_problems).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import packtool
from packtool import schema
from packtool.config import PackConfig
from packtool.data.tokenized import TokenizedData
from packtool.errors import PacktoolError, UsageError
from packtool.io import shards
from packtool.pack.gather import file_gather, locate_rows
from packtool.pack.overflow import apply_overflow, outcomes, overflow_loss
from packtool.pack.write import (
    Progress,
    WriteJob,
    Written,
    processes,
    write_in_processes,
    write_shards,
)
from packtool.plan import lower_bound_rows, plan_packs, plan_pairs
from packtool.schema.manifest import DROPPED, INPUT, LEFTOVER, OVERFLOW_LOSS, TRUNCATED


@dataclass
class PackResult:
    out: str
    manifest: dict[str, Any]
    seconds: dict[str, float]  # timings: kept out of the manifest so that it stays byte-identical
    warnings: list[schema.Notice] = field(default_factory=list)
    engine: dict[str, Any] = field(default_factory=dict)  # where it ran, when not here (ray)


def pad_id_of(tokenizer: dict) -> tuple[int, str]:
    for key in ("pad_id", "eos_id"):
        v = tokenizer.get(key)
        if v is not None:
            return int(v), f"tokenizer {key}"
    return 0, "default 0 (tokenizer has neither pad_id nor eos_id)"


def pack_tokenized(
    data: TokenizedData,
    cfg: PackConfig,
    out: str | Path,
    progress: Progress | None = None,
    writer: Writer | None = None,
    procs: int = 1,
) -> PackResult:
    """Plan, gather and write `data` into `out` (atomically). `writer(tmp, data, job) -> Written`
    writes the planned rows: `write_local`, unless another engine holds the tokens (the Ray
    engine's workers); `procs`: the writer processes write_local may fork when it pays."""
    out = Path(out)
    shards.check_target(out, cfg.force)
    t_start = time.perf_counter()
    L = cfg.pack_len
    lengths = np.ascontiguousarray(data.lengths, dtype=np.int64)
    src = np.ascontiguousarray(data.source_index, dtype=np.int64)
    loss_counts = np.ascontiguousarray(data.loss_counts, dtype=np.int64)
    n = lengths.shape[0]
    if n == 0:
        raise PacktoolError(
            f"nothing to pack: {data.num_read} records read, {len(data.skipped)} skipped, "
            "0 tokenized; check the input file and --format/--column"
        )
    if src.shape[0] != n or loss_counts.shape[0] != n:
        raise PacktoolError(
            f"tokenized data is inconsistent: {n} lengths, "
            f"{src.shape[0]} source indices, {loss_counts.shape[0]} loss counts"
        )
    pairs = data.task == "preference"
    if pairs:  # the pair rules, imported by preference runs only
        from packtool.pack import pairs as pair_rules

        if cfg.max_docs == 1:
            raise UsageError(
                "--max-docs 1 cannot hold a preference pair: its chosen and rejected sides are two "
                "documents of one row; use --max-docs 2 (one pair a row) or more, or 0 (no cap)"
            )
        pieces = pair_rules.apply_pair_overflow(lengths, data.prompt_lengths, src, L, cfg.overflow)
    else:
        pieces = apply_overflow(lengths, src, L, cfg.overflow)
    if pieces.row.shape[0] == 0:
        if pairs:  # the pair rules' causes (a pair too long, a prompt leaving no room)
            prompts = data.prompt_lengths
            raise PacktoolError(pair_rules.nothing_to_pack(lengths, prompts, src, L, cfg.overflow))
        raise PacktoolError(
            f"nothing to pack: all {n} examples were dropped (longest {int(lengths.max())} "
            f"tokens > --len {L}); use --overflow truncate|split or raise --len"
        )
    layout = schema.Layout(cfg.pad_to_multiple, cfg.max_docs if cfg.fixed_docs else 0)
    slots = layout.slots(pieces.length)  # planned padded: <= L exactly when the real length is
    plan = (plan_pairs if pairs else plan_packs)(
        slots, L, cfg.strategy, cfg.order, cfg.max_docs, cfg.seed
    )
    t_plan = time.perf_counter()

    R = plan.num_rows
    rng = np.random.default_rng((cfg.seed, 1))
    row_order = rng.permutation(R).astype(np.int64) if cfg.shuffle else np.arange(R, dtype=np.int64)
    pad_id, pad_from = pad_id_of(data.tokenizer or {})
    shard_rows = shards.rows_per_shard(L, cfg.shard_rows)
    job = WriteJob(
        plan, row_order, pieces, slots, layout, pad_id, shard_rows, progress, procs, pairs
    )
    leftover: list[str] = []  # folders of runs that died, removed beside out
    with shards.atomic_output(out, cfg.force, said=leftover) as tmp:
        written = (writer or write_local)(tmp, data, job)
        oc = (
            pair_rules.pair_outcomes(lengths, src, pieces)
            if pairs
            else outcomes(lengths, src, pieces, L)
        )
        n_ex = oc.length.shape[0]
        truncated_cut = int(oc.cut.sum())
        counts = {
            "examples_read": int(data.num_read),
            "skipped": len(data.skipped),
            "tokenized": n_ex,
            "packed": n_ex - int(oc.truncated.size + oc.split.size + oc.dropped.size),
            "truncated": int(oc.truncated.size),
            "split": int(oc.split.size),
            "split_parts": int(oc.split_parts.sum()),
            "dropped": int(oc.dropped.size),
            "documents": written.documents,
            "rows": written.rows,
        }
        tokens = {
            "in": int(lengths.sum()),
            "out": written.tokens,
            "cut": int(oc.length[oc.dropped].sum()) + truncated_cut,
            "loss_in": int(loss_counts.sum()),
            "loss_out": written.loss,
            "loss_first_token": written.loss_first_token,
            "loss_cut": int(loss_counts[pieces.dropped].sum()) + written.loss_cut_tails,
            "pad": written.rows * L - written.tokens,
        }
        if layout.padded:
            tokens["doc_pad"] = written.doc_pad
        # a mixture's inputs with their counts ([]: one input, not written)
        inputs = data.inputs_manifest(
            oc.source[oc.dropped], oc.source[oc.truncated], oc.source[oc.split]
        )
        _check_conservation(counts, tokens, inputs, job, written, n)
        docs = plan.docs_per_row()
        manifest = schema.Manifest(
            schema_version=schema.SCHEMA_VERSION,
            packtool_version=packtool.__version__,
            pack_len=L,
            strategy=cfg.strategy,
            order=cfg.order,
            max_docs=cfg.max_docs,
            overflow=cfg.overflow,
            shuffle=cfg.shuffle,
            seed=cfg.seed,
            shard_rows=shard_rows,
            pad_id=pad_id,
            pad_id_from=pad_from,
            tokenizer=dict(data.tokenizer or {}),
            tokenizer_backend=dict(data.backend or {}),
            options=dict(data.options or {}),
            format=data.format,
            sources=[{"path": s.path, "size": s.size, "sha256": s.sha256} for s in data.sources],
            not_read=list(data.not_read),
            inputs=inputs,
            counts=schema.Counts(**counts),
            skipped=[r.to_json() for r in data.skipped],
            dropped=_listed(oc, oc.dropped, "reason", oc.dropped_reason),
            truncated=_listed(oc, oc.truncated, "cut", oc.cut.tolist()),
            split=_listed(oc, oc.split, "parts", oc.split_parts.tolist()),
            tokens=schema.Tokens.from_json(tokens),
            fill=round(written.tokens / (written.rows * L), 6),
            lower_bound_rows=lower_bound_rows(written.tokens + written.doc_pad, L),
            docs_per_row={
                "min": int(docs.min()),
                "mean": round(float(docs.mean()), 4),
                "max": int(docs.max()),
                "histogram": {str(k): int(v) for k, v in enumerate(np.bincount(docs)) if v},
            },
            shards=written.shards,
            pad_to_multiple=cfg.pad_to_multiple,
            fixed_docs=cfg.fixed_docs,
            task=data.task,
            preference=pair_rules.pair_manifest(pieces, data) if pairs else {},
        ).to_json()
        shards.write_manifest(tmp, manifest)
    t_end = time.perf_counter()
    warnings = [schema.Notice(INPUT, str(w)) for w in data.warnings]
    warnings += [schema.Notice(LEFTOVER, line) for line in leftover]
    unit = "pair(s)" if pairs else "example(s)"
    keeps = "each side keeps a trained token" if pairs else "--overflow split keeps them"
    said = {
        TRUNCATED: f"truncated {counts['truncated']} {unit} to --len {L}: "
        f"{truncated_cut} tokens cut (listed under 'truncated' in the manifest); {keeps}",
        DROPPED: f"dropped {counts['dropped']} {unit} (listed under 'dropped' in the manifest)",
    }
    for what, message in said.items():  # the notice codes are the manifest's keys
        if counts[what]:
            listed = [x["source_index"] for x in manifest[what]]
            warnings.append(schema.Notice(what, message, counts[what], listed))
    if pairs:
        loss = pair_rules.pair_overflow_loss(oc, L, cfg.overflow)
    else:
        loss = overflow_loss(lengths, pieces, L, cfg.overflow)
    if loss is not None:
        if pairs:  # truncate's drops too
            lost = pair_rules.pair_overflow_lost(oc, cfg.overflow)
        else:
            lost = oc.dropped if cfg.overflow == "drop" else oc.truncated
        items = oc.source[lost][:1000].tolist()
        warnings.append(schema.Notice(OVERFLOW_LOSS, loss, int(lost.size), items))
    return PackResult(
        out=str(out),
        manifest=manifest,
        warnings=warnings,
        seconds={"plan": t_plan - t_start, "write": t_end - t_plan, "total": t_end - t_start},
    )


def _listed(oc, examples: np.ndarray, key: str, values) -> list[dict[str, Any]]:
    """The manifest's dropped / truncated / split entries: {source_index, length, `key`}."""
    return [
        {"source_index": int(oc.source[i]), "length": int(oc.length[i]), key: v}
        for i, v in zip(examples.tolist(), values, strict=True)
    ]


Writer = Callable[[Path, TokenizedData, WriteJob], Written]


def write_local(tmp: Path, data: TokenizedData, job: WriteJob) -> Written:
    """The rows gathered from `data.table` (or by pread from the cache file it is mapped from) and
    written by this process's writer threads, or by forked writer processes (write.processes)."""
    if data.table is None or len(data.table) != data.lengths.shape[0]:
        rows = "no" if data.table is None else len(data.table)
        raise PacktoolError(
            f"tokenized data is inconsistent: {rows} rows, {data.lengths.shape[0]} lengths"
        )
    lengths = np.ascontiguousarray(data.lengths, dtype=np.int64)
    src = np.ascontiguousarray(data.source_index, dtype=np.int64)
    L = job.plan.pack_len
    loc = locate_rows(data.table, lengths, src, job.pieces)
    gather = file_gather(data, loc, shards.row_group_rows(L, job.shard_rows) * L)
    procs = processes(job.procs, -(-job.plan.num_rows // job.shard_rows), int(job.slots.sum()))
    try:
        if procs > 1:
            written = write_in_processes(procs, tmp, job, loc, gather)
        else:
            written = write_shards(tmp, job, loc, gather)
    finally:
        if gather is not None:
            gather.close()
    written.loss_cut_tails = loc.loss_cut_tails
    return written


def _check_conservation(
    counts: dict, tokens: dict, inputs: list, job: WriteJob, written: Written, n: int
) -> None:
    """The contract's conservation rules (schema.conservation_problems, per input too for a
    mixture) plus what only the writer can check: every example is a piece or dropped, the rows
    written are the rows planned, and the padding written inside documents is the padding the
    layout plans."""
    problems = schema.conservation_problems(counts, tokens, inputs=inputs)
    pieces, R = job.pieces, job.plan.num_rows  # n: dataset rows (a pair's sides are two)
    planned_pad = int((job.slots - pieces.length).sum())
    if written.doc_pad != planned_pad or tokens.get("doc_pad", 0) != planned_pad:
        problems.append(
            f"wrote {written.doc_pad} pad slots inside documents; the layout plans {planned_pad}"
        )
    unpacked = np.flatnonzero(np.bincount(pieces.row, minlength=n) == 0)
    if not np.array_equal(unpacked, pieces.dropped):  # dropped: sorted, each row once
        problems.append("an example is neither packed nor listed as dropped")
    if job.pairs and not (np.array_equal(pieces.row[1::2], pieces.row[0::2] + 1)):
        problems.append("a pair's sides are not planned together")
    m = pieces.row.shape[0]
    if (counts["documents"], counts["rows"], sum(e["rows"] for e in written.shards)) != (m, R, R):
        problems.append(
            f"wrote {counts['documents']} documents in {counts['rows']} rows; planned {m} in {R}"
        )
    if problems:
        raise PacktoolError("conservation check failed: " + "; ".join(problems))
