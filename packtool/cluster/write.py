"""Writing a pack on Ray: every document sent to its shard, each shard written by one worker.

    driver   plan rows in output order (row_order) ─▶ shard s = output row // shard_rows
             per part:  [(index in part, shard)]     one entry per (example, shard) it has pieces in
             per shard: its rows' pieces in row order: source index, start, length, slots, truncated
                        (each put in the object store once; a worker fetches only its own)
    workers  map_batches   encoded rows ─▶ (shard, source_index, input_ids, labels) per entry
             groupby(shard).map_groups: sort by source index, locate the pieces, and write the shard
             with pack.write.write_shards (first_shard = s): the local engine's code, row groups,
             names and bytes
    driver   ◀── per shard: its manifest entry, rows, documents, tokens, loss, pad, tail loss

A writer holds one shard's documents (<= shard_rows x pack_len tokens, ~512 MiB of slots by
default) plus pyarrow's buffer of one row group. The pack folder (its temporary twin) must be on a
filesystem every worker writes to: a local cluster's disk, or shared storage for a real cluster.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np

from packtool.cluster.session import memory
from packtool.errors import PacktoolError
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
    """pack.run's Writer for TokenizedData whose rows are on the cluster (tokenize.ClusterRows)."""
    import ray

    plan, pieces = job.plan, job.pieces
    R, L, shard_rows = plan.num_rows, plan.pack_len, job.shard_rows
    S = -(-R // shard_rows)
    src = np.ascontiguousarray(data.source_index, dtype=np.int64)
    seq, offsets = _pieces_in_output_order(plan, job.row_order)
    out_row = np.repeat(np.arange(R, dtype=np.int64), np.diff(offsets))
    piece_shard = np.empty(seq.shape[0], np.int64)
    piece_shard[seq] = out_row // shard_rows
    truncated = np.zeros(src.shape[0], bool)
    truncated[pieces.truncated] = True

    shard_refs = []
    for s in range(S):
        j0, j1 = s * shard_rows, min(R, (s + 1) * shard_rows)
        p = seq[offsets[j0] : offsets[j1]]
        sub = {
            "rows_off": offsets[j0 : j1 + 1] - offsets[j0],
            "source": src[pieces.row[p]],
            "start": pieces.start[p],
            "length": pieces.length[p],
            "slots": job.slots[p],
            "truncated": truncated[pieces.row[p]],
        }
        shard_refs.append(ray.put(sub))
    key = np.unique(pieces.row * S + piece_shard)  # (example, shard) pairs, in example order
    example, shard = key // S, key % S
    g = src[example]
    part_start = rows.part_start
    part = np.searchsorted(part_start, g, side="right") - 1
    bounds = np.searchsorted(part, np.arange(len(rows.parts) + 1))
    part_refs = [
        ray.put({"index": g[a:b] - part_start[k], "shard": shard[a:b]}) if b > a else None
        for k, (a, b) in enumerate(zip(bounds[:-1], bounds[1:], strict=True))
    ]
    settings = {
        "tmp": str(tmp),
        "pack_len": L,
        "pad_id": job.pad_id,
        "shard_rows": shard_rows,
        "total_shards": S,
        "layout": job.layout,
    }
    try:
        assigned = rows.dataset.map_batches(
            assign_rows,
            fn_kwargs={"part_refs": part_refs, "part_start": part_start},
            batch_format="pyarrow",
            batch_size=None,
        )
        results = (
            assigned.groupby("shard")
            .map_groups(
                write_group,
                fn_kwargs={"shard_refs": shard_refs, "settings": settings},
                batch_format="pyarrow",
                concurrency=max(1, min(rows.session.workers, S)),
            )
            .take_all()
        )
    except Exception as e:  # noqa: BLE001 - whatever failed in a worker: one clean error
        raise rows.session.failure(e) from None
    return _written(results, S, R, job.progress, rows)


def _written(results: list[dict], S: int, R: int, progress, rows) -> Written:
    by_shard = {int(r["shard"]): r for r in results}
    if sorted(by_shard) != list(range(S)) or len(results) != S:
        raise PacktoolError(
            f"the Ray engine wrote {len(by_shard)} distinct shards of {S} ({len(results)} results); "
            "run again"
        )
    out = Written(shards=[])
    for s in range(S):
        r = by_shard[s]
        out.shards.append(json.loads(r["entry"]))
        for name in _TOTALS:
            setattr(out, name, getattr(out, name) + int(r[name]))
        rows.memory.append(json.loads(r["memory"]))
    if progress is not None:
        progress(out.rows, R)
    return out


def assign_rows(batch, part_refs, part_start):
    """Encoded rows (meta rows left out) → one row per (example, shard it has pieces in)."""
    import pyarrow as pa
    import ray

    length = np.asarray(batch.column("length"))
    parts = np.asarray(batch.column("part")).astype(np.int64)
    local = np.asarray(batch.column("source_index")).astype(np.int64)
    empty = np.zeros(0, np.int64)
    take, shards, source = [empty], [empty], [empty]
    for k in np.unique(parts[length >= 0]).tolist():
        if part_refs[k] is None:
            continue
        a = ray.get(part_refs[k])
        mine = np.flatnonzero((parts == k) & (length >= 0))
        lo = np.searchsorted(a["index"], local[mine], side="left")
        hi = np.searchsorted(a["index"], local[mine], side="right")
        n = hi - lo
        at = np.repeat(lo, n) + np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)
        take.append(np.repeat(mine, n))
        shards.append(a["shard"][at])
        source.append(part_start[k] + local[np.repeat(mine, n)])
    out = batch.select(["input_ids", "labels"]).take(pa.array(np.concatenate(take)))
    out = out.append_column("shard", pa.array(np.concatenate(shards)))
    return out.append_column("source", pa.array(np.concatenate(source)))


def write_group(group, shard_refs, settings):
    """One shard's documents (any order) → the shard file, and a one-row table of its totals."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import ray

    from packtool.pack.gather import locate_rows
    from packtool.pack.overflow import Pieces
    from packtool.pack.write import WriteJob
    from packtool.pack.write import write_shards as write_rows
    from packtool.plan import PackPlan

    s = int(group.column("shard")[0].as_py())
    source = np.asarray(group.column("source")).astype(np.int64)
    order = np.argsort(source, kind="stable")  # the group's rows come in any order: not copied
    have = source[order]
    sub = ray.get(shard_refs[s])
    at = np.searchsorted(have, sub["source"])
    if np.any(at >= have.shape[0]) or np.any(
        have[np.minimum(at, have.shape[0] - 1)] != sub["source"]
    ):
        raise PacktoolError(
            f"shard {s}: a document planned for it did not reach its writer; run again"
        )
    at = order[at]  # each piece's row of the group
    empty = np.zeros(0, np.int64)
    pieces = Pieces(
        row=at,
        start=sub["start"],
        length=sub["length"],
        dropped=empty,
        dropped_reason=[],
        truncated=at[sub["truncated"]],
        split=empty,
        split_parts=empty,
    )
    lengths = np.asarray(pc.list_value_length(group.column("input_ids"))).astype(np.int64)
    loc = locate_rows(group, lengths, source, pieces, settings["pack_len"])
    k = sub["rows_off"].shape[0] - 1
    plan = PackPlan(
        row_offsets=sub["rows_off"],
        doc_order=np.arange(sub["source"].shape[0]),
        pack_len=settings["pack_len"],
    )
    job = WriteJob(
        plan,
        np.arange(k, dtype=np.int64),
        pieces,
        sub["slots"],
        settings["layout"],
        settings["pad_id"],
        settings["shard_rows"],
    )
    written = write_rows(
        Path(settings["tmp"]), job, loc, first_shard=s, total_shards=settings["total_shards"]
    )
    written.loss_cut_tails = loc.loss_cut_tails  # as pack.run sets it
    row = {name: [getattr(written, name)] for name in _TOTALS}
    row.update(shard=[s], entry=[json.dumps(written.shards[0])], memory=[json.dumps(memory())])
    return pa.table(row)
