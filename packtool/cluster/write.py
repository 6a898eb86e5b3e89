"""Writing a pack on Ray: each shard written by one task, which preads its documents' tokens from
the part files (cluster.parts) in plan order, as the local engine reads its cache file.

    driver   plan rows in output order (row_order) ─▶ shard s = output rows [s·shard_rows, ...)
             per shard, made as its task starts: its rows' pieces in row order: source index,
             part, first token in the part's files (the example's offset + the piece's start),
             length, slots, truncated (and the example's length, for the cut tail's loss)
    tasks    Session.run: write_shard(s), <= workers at a time: FileGather over the part files it
             reads from, then pack.write.write_shards (first_shard = s): the local engine's code,
             row groups, names and bytes
    driver   ◀── per shard: its manifest entry, rows, documents, tokens, loss, pad, tail loss

A writer holds FileGather's staging buffers and the writer's blocks (one row group each, <= 16 MiB
of slots) plus pyarrow's buffer; its per-piece arrays (~50 bytes a piece) come in its arguments.
The pack folder (its temporary twin), like the parts' folder, is on a filesystem every worker
reads and writes (packtool.cluster).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from packtool.cluster.session import memory
from packtool.pack.write import Written

_TOTALS = [f.name for f in dataclasses.fields(Written) if f.name != "shards"]  # summed over shards


def _pieces_in_output_order(plan, row_order: np.ndarray):
    """(piece ids in output row order, offsets[R + 1] of each output row's pieces)."""
    per_row = np.diff(plan.row_offsets)[row_order]
    offsets = np.zeros(row_order.shape[0] + 1, np.int64)
    np.cumsum(per_row, out=offsets[1:])
    first = np.repeat(plan.row_offsets[:-1][row_order], per_row)
    within = np.arange(offsets[-1], dtype=np.int64) - np.repeat(offsets[:-1], per_row)
    return plan.doc_order[first + within], offsets


def write_shards(rows, tmp: Path, data, job) -> Written:
    """pack.run's Writer for TokenizedData whose tokens are in part files (tokenize.ClusterRows)."""
    from packtool.io import shards

    plan, pieces = job.plan, job.pieces
    R, L, shard_rows = plan.num_rows, plan.pack_len, job.shard_rows
    S = -(-R // shard_rows)
    src = np.ascontiguousarray(data.source_index, dtype=np.int64)
    lengths = np.ascontiguousarray(data.lengths, dtype=np.int64)
    seq, offsets = _pieces_in_output_order(plan, job.row_order)
    truncated = np.zeros(src.shape[0], bool)
    truncated[pieces.truncated] = True
    settings = {
        "folder": str(rows.folder),
        "tmp": str(tmp),
        "pack_len": L,
        "pad_id": job.pad_id,
        "shard_rows": shard_rows,
        "total_shards": S,
        "layout": job.layout,
        "capacity": shards.row_group_rows(L, shard_rows) * L,
    }

    def calls():
        for s in range(S):
            j0, j1 = s * shard_rows, min(R, (s + 1) * shard_rows)
            p = seq[offsets[j0] : offsets[j1]]
            e = pieces.row[p]  # each piece's example
            sub = {
                "rows_off": offsets[j0 : j1 + 1] - offsets[j0],
                "source": src[e],
                "part": rows.part[e],
                "base": rows.offset[e] + pieces.start[p],
                "length": pieces.length[p],
                "slots": job.slots[p],
                "truncated": truncated[e],
                "example_length": lengths[e],
            }
            yield s, sub, settings

    try:
        results = rows.session.run(write_shard, calls())
    except Exception as e:  # noqa: BLE001 - whatever failed in a worker: one clean error
        raise rows.session.failure(e) from None
    return _written(results, R, job.progress, rows)


def _written(results: list[dict], R: int, progress, rows) -> Written:
    """The shards' results (Session.run: in shard order) summed into one Written."""
    out = Written(shards=[])
    for r in results:
        out.shards.append(r["entry"])
        for name in _TOTALS:
            setattr(out, name, getattr(out, name) + int(r[name]))
        rows.memory.append(r["memory"])
    if progress is not None:
        progress(out.rows, R)
    return out


def write_shard(s: int, sub: dict, settings: dict) -> dict:
    """Shard s: its pieces read from the part files and written → its entry and totals."""
    from packtool.cluster import parts
    from packtool.pack.overflow import Pieces
    from packtool.pack.write import WriteJob
    from packtool.pack.write import write_shards as write_rows
    from packtool.plan import PackPlan

    L = settings["pack_len"]
    used, chunk = np.unique(sub["part"], return_inverse=True)
    names = parts.open_parts(settings["folder"], used)
    trunc = sub["truncated"]
    tails = parts.cut_tail_loss(
        names[used.shape[0] :], chunk[trunc], sub["base"][trunc], sub["example_length"][trunc], L
    )
    base, n = sub["base"], sub["length"].shape[0]
    loc, gather = parts.part_gather(names, chunk, base, sub["source"], tails, settings["capacity"])
    empty = np.zeros(0, np.int64)
    pieces = Pieces(
        row=np.arange(n, dtype=np.int64),
        start=empty,  # (write_shards reads only the lengths: the starts are in `base`)
        length=sub["length"],
        dropped=empty,
        dropped_reason=[],
        truncated=empty,
        split=empty,
        split_parts=empty,
    )
    k = sub["rows_off"].shape[0] - 1
    plan = PackPlan(row_offsets=sub["rows_off"], doc_order=np.arange(n), pack_len=L)
    job = WriteJob(
        plan,
        np.arange(k, dtype=np.int64),
        pieces,
        sub["slots"],
        settings["layout"],
        settings["pad_id"],
        settings["shard_rows"],
    )
    try:
        written = write_rows(
            Path(settings["tmp"]),
            job,
            loc,
            gather,
            first_shard=s,
            total_shards=settings["total_shards"],
        )
    finally:
        gather.close()
    written.loss_cut_tails = tails  # as pack.run sets it
    out = {name: getattr(written, name) for name in _TOTALS}
    return {**out, "entry": written.shards[0], "memory": memory()}
