"""Rows → Parquet shards, gathered block by block and encoded by a few writer threads.

plan rows in shuffled order ──blocks of one row group──▶ layout_rows + copy_rows (numba, nogil)
    shard 0: block 0, block 1, ...  → writer thread 0 ─┐
    shard 1: block 0, block 1, ...  → writer thread 1 ─┼─▶ tmp/data/train-XXXXX-of-XXXXX.parquet
    ...                                                 ┘
One file is written by one thread, blocks in order: the bytes never depend on timing (nor when
write_in_processes writes whole shards in forked processes).

The layout (schema.Layout): a piece of piece_len tokens takes slot_len slots (--pad-to-multiple);
`row_lists` turns the block's CSR lists into the shard's list columns, K a row under --fixed-docs:

    CSR (seq_off [0, 2, 3])    slots [4, 4 | 8]  real [3, 4 | 5]  source [7, 2 | 9]
    fixed K = 3                seq_lengths [4, 4, 0 | 8, 0, 0]   unpadded [3, 4, 0 | 5, 0, 0]
                               source_index [7, 2, -1 | 9, -1, -1]  offsets [0, 3, 6]
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import zip_longest
from pathlib import Path
from typing import Any

import numpy as np

from packtool import schema
from packtool.errors import PacktoolError
from packtool.forking import forking_workers, ignore_sigint
from packtool.io import shards
from packtool.pack.gather import FileGather, Located, copy_rows, layout_rows
from packtool.pack.overflow import Pieces
from packtool.schema import IGNORE_INDEX

MAX_WRITERS = 4  # shards encoded in parallel (each: <= 2 x 4 x row-group buffers, <= 2 x 16 MiB)

Progress = Callable[[int, int], None]  # (rows written, rows total)


@dataclass
class Written:
    shards: list[dict[str, Any]]
    rows: int = 0
    documents: int = 0
    tokens: int = 0
    loss: int = 0
    loss_first_token: int = 0
    doc_pad: int = 0  # pad slots inside documents (--pad-to-multiple)
    loss_cut_tails: int = 0  # loss tokens in the cut-off tails of truncated examples


@dataclass(frozen=True)
class WriteJob:
    """What a writer writes: the plan, the output order of its rows, the pieces and their slots."""

    plan: Any  # plan.PackPlan
    row_order: np.ndarray  # output row j is plan row row_order[j]
    pieces: Pieces
    slots: np.ndarray  # slots of each piece (its length, or padded: schema.Layout)
    layout: schema.Layout
    pad_id: int
    shard_rows: int
    progress: Progress | None = None
    procs: int = 1  # writer processes allowed (pack.run.write_local; 1: this process's threads)
    pairs: bool = False  # a preference pack: pieces 2k, 2k+1 a pair; the side column written


def row_lists(seq_off, slots, real, source, fixed: int, side=None):
    """(offsets, seq_lengths, unpadded, source_index, side) of a block's rows (module drawing)."""
    if not fixed:
        return seq_off, slots, real, source, side
    k = seq_off.shape[0] - 1
    nd = np.diff(seq_off)
    at = np.arange(slots.shape[0], dtype=np.int64) + np.repeat(
        np.arange(k, dtype=np.int64) * fixed - seq_off[:-1], nd
    )
    cols = (slots, real, source, np.zeros(slots.shape[0], np.int64) if side is None else side)
    out = [np.full(k * fixed, empty, np.int64) for empty in (0, 0, -1, 0)]  # empty entries
    for dst, src in zip(out, cols, strict=True):
        dst[at] = src
    return (np.arange(k + 1, dtype=np.int64) * fixed, *out[:3], None if side is None else out[3])


def write_shards(
    tmp: Path,
    job: WriteJob,
    loc: Located,
    gather: FileGather | None = None,
    first_shard: int = 0,
    total_shards: int | None = None,
) -> Written:
    """Gather rows block by block (one Parquet row group each) and write the shards; the tokens
    come from `loc` in place, or staged by `gather`. The rows are shards first_shard, ... of a
    pack of total_shards (a Ray worker or a writer process writes one shard of a pack)."""
    plan, row_order, shard_rows, layout = job.plan, job.row_order, job.shard_rows, job.layout
    piece_len, slot_len = job.pieces.length, job.slots
    tokens = loc if gather is None else gather
    L = plan.pack_len
    R = row_order.shape[0]
    group_rows = shards.row_group_rows(L, shard_rows)
    num_shards = -(-R // shard_rows)
    writers = max(1, min(MAX_WRITERS, os.cpu_count() or 1, num_shards))
    bufsets = [[None] * sets for sets in buffer_sets(R, shard_rows, group_rows, writers)]
    used = [0] * writers
    out = Written(shards=[])
    closed = {}
    total = total_shards or num_shards
    with WriterPool(writers) as pool:
        for wave in range(0, num_shards, writers):
            members = list(range(wave, min(num_shards, wave + writers)))
            open_writers = [
                pool.opened(
                    shards.ShardWriter(tmp, first_shard + s, total, L, layout.padded, job.pairs)
                )
                for s in members
            ]
            blocks = [
                range(s * shard_rows, min(R, (s + 1) * shard_rows), group_rows) for s in members
            ]
            for step in zip_longest(*blocks):  # block i of every shard of the wave, in turn
                for w, (s, b0) in enumerate(zip(members, step, strict=True)):
                    if b0 is None:
                        continue
                    rows = row_order[b0 : min(b0 + group_rows, (s + 1) * shard_rows, R)]
                    k = rows.shape[0]
                    sets = bufsets[w]
                    pool.wait(w, keep=len(sets) - 1)  # the write that used this set has finished
                    # the block's 4 token columns: [k, L] int32, allocated at first use
                    i = used[w] % len(sets)
                    if sets[i] is None or sets[i][0].shape[0] < k:
                        sets[i] = [np.empty((k, L), dtype=np.int32) for _ in range(4)]
                    block = [b[:k] for b in sets[i]]
                    used[w] += 1
                    seq_off, pcs, dest_col, num_tokens = layout_rows(
                        rows,
                        plan.row_offsets,
                        plan.doc_order,
                        piece_len,
                        slot_len,
                        *block,
                        job.pad_id,
                        IGNORE_INDEX,
                    )
                    num_loss, first = copy_rows(
                        seq_off, dest_col, *tokens.stage(pcs, piece_len), *block[:2], IGNORE_INDEX
                    )
                    side = job.pieces.row[pcs] & 1 if job.pairs else None  # chosen at even rows
                    offsets, slots, real, source, side = row_lists(
                        seq_off, slot_len[pcs], piece_len[pcs], loc.source[pcs],
                        layout.fixed_docs, side,
                    )  # fmt: skip
                    unpadded = real if layout.padded else None
                    table = shards.rows_table(
                        *block, offsets, slots, source, num_tokens, num_loss, unpadded, side
                    )
                    pool.submit(w, open_writers[w].write, table)
                    out.doc_pad += int((slot_len[pcs] - piece_len[pcs]).sum())
                    out.tokens += int(num_tokens.sum())
                    out.loss += int(num_loss.sum())
                    out.loss_first_token += int(first)
                    out.documents += int(pcs.shape[0])
                    out.rows += k
                    if job.progress is not None:
                        job.progress(out.rows, R)
            for w, s in enumerate(members):
                closed[s] = pool.submit(w, open_writers[w].close)
        for w in range(writers):
            pool.wait(w, 0)
    out.shards = [closed[s].result() for s in range(num_shards)]
    return out


def buffer_sets(R: int, shard_rows: int, group_rows: int, writers: int) -> list[int]:
    """Buffer sets of each writer thread (writer w writes shards w, w + writers, ...): two (gather
    one block while the writer encodes the one before) where it has more than two blocks, else one:
    there the overlap is small and a second set is 16 MiB of memory touched for the first time."""
    blocks = [0] * writers
    for s in range(-(-R // shard_rows)):
        rows = min(R, (s + 1) * shard_rows) - s * shard_rows
        blocks[s % writers] += -(-rows // group_rows)
    return [2 if b > 2 else 1 for b in blocks]


PROCESS_MIN_TOKENS = 1 << 26  # token slots from which writer processes pay for their start-up
CORES_PER_PROCESS = 2  # cores one writing process keeps busy (gather + encoding threads)
_JOB: tuple | None = None  # write_in_processes' arguments, inherited by its forked processes


def processes(procs: int, num_shards: int, slots: int) -> int:
    """Writer processes for a pack of `num_shards` shards and `slots` token slots: 1 below
    PROCESS_MIN_TOKENS or without fork, else at most one per CORES_PER_PROCESS usable cores."""
    import multiprocessing

    if slots < PROCESS_MIN_TOKENS or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, min(procs, num_shards, usable_cores() // CORES_PER_PROCESS))


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the platform says it)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def write_in_processes(
    procs: int, tmp: Path, job: WriteJob, loc: Located, gather: FileGather | None
) -> Written:
    """write_shards with each shard written by one of `procs` forked processes:

        parent: plan, row_order, located pieces ──fork──▶ a process writes shard s, then the next
                ◀── per shard Written {rows, tokens, ..., shards: [{file, rows, bytes, sha256}]}
        totals summed and entries listed in shard order: the same manifest and bytes as one process

    The processes read the tokens from the memory they inherit, and ignore SIGINT (forked inside
    forking_workers): on Ctrl-C or any error the parent kills them and waits for them before the
    temporary folder is removed."""
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool
    from dataclasses import fields
    from multiprocessing import get_context

    global _JOB
    R = job.row_order.shape[0]
    num_shards = -(-R // job.shard_rows)
    _JOB = (tmp, job, loc, gather)
    pool = ProcessPoolExecutor(
        max_workers=min(procs, num_shards),
        mp_context=get_context("fork"),
        initializer=ignore_sigint,
    )
    out = Written(shards=[])
    try:
        with forking_workers():  # (the executor forks its processes as the jobs are submitted)
            futures = [pool.submit(_write_one, s, num_shards) for s in range(num_shards)]
        for fut in futures:
            one = fut.result()
            out.shards += one.shards
            for f in fields(Written)[1:]:
                setattr(out, f.name, getattr(out, f.name) + getattr(one, f.name))
            if job.progress is not None:
                job.progress(out.rows, R)
    except BrokenProcessPool:
        raise PacktoolError(
            "a shard writer process died (killed, out of memory?); run again with fewer processes"
        ) from None
    except BaseException:
        for p in list((getattr(pool, "_processes", None) or {}).values()):  # no public kill in 3.11
            p.kill()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        _JOB = None
    return out


def _write_one(s: int, num_shards: int) -> Written:
    tmp, job, loc, gather = _JOB
    rows = job.row_order[s * job.shard_rows : (s + 1) * job.shard_rows]
    one = replace(job, row_order=rows, progress=None)
    return write_shards(tmp, one, loc, gather, first_shard=s, total_shards=num_shards)


class WriterPool:
    """`n` writer threads (pyarrow's encoder releases the GIL); one thread's tasks run in order.
    After any failure the remaining tasks of every thread are skipped and the open writers aborted."""

    def __init__(self, n: int):
        from concurrent.futures import ThreadPoolExecutor

        self.threads = [
            ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"packtool-write{i}")
            for i in range(n)
        ]
        self.pending: list[deque] = [deque() for _ in range(n)]
        self.failed = False
        self.writers: list = []

    def opened(self, writer):
        self.writers.append(writer)
        return writer

    def submit(self, i: int, fn, *args):
        def run():
            if self.failed:
                return None
            try:
                return fn(*args)
            except BaseException:
                self.failed = True
                raise

        fut = self.threads[i].submit(run)
        self.pending[i].append(fut)
        return fut

    def wait(self, i: int, keep: int) -> None:
        while len(self.pending[i]) > keep:
            self.pending[i].popleft().result()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.failed = True
            for q in self.pending:
                for fut in q:
                    fut.cancel()
        for t in self.threads:
            t.shutdown(wait=True)
        if exc_type is not None:
            for w in self.writers:
                w.abort()
        return False
