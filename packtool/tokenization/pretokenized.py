"""Accept datasets that are already tokenized (TRL's or a user's own pipeline output).

    record columns                    → our labels
    input_ids + labels                  labels as given (-100 = no loss; must match input_ids length)
    input_ids + completion_mask         input_ids where mask == 1, else -100      (TRL prompt-completion)
    input_ids + assistant_masks         input_ids where mask == 1, else -100      (TRL assistant_only_loss)
    input_ids alone                     every token carries loss

Rows are built in batches of Arrow arrays from flat numpy buffers: no per-token Python.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from packtool.errors import PacktoolError

IGNORE = -100
BATCH = 20_000
MASK_COLUMNS = ("completion_mask", "assistant_masks")


def _flat(values: list, what: str, where: str) -> tuple[np.ndarray, np.ndarray]:
    """Python lists of ints → (flat int64 values, int64 offsets[n+1])."""
    lens = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    flat = np.fromiter((t for v in values for t in v), dtype=np.int64, count=int(offsets[-1]))
    return flat, offsets


def _batch_table(rows: list[tuple[int, dict]], label_source: str):
    import pyarrow as pa

    where = f"record {rows[0][0]}"
    ids, off = _flat([r["input_ids"] for _, r in rows], "input_ids", where)
    if label_source == "labels":
        lab, loff = _flat([r["labels"] for _, r in rows], "labels", where)
        if not np.array_equal(off, loff):
            bad = int(np.flatnonzero(np.diff(off) != np.diff(loff))[0])
            raise PacktoolError(f"record {rows[bad][0]}: labels and input_ids differ in length; "
                                "fix the dataset so both lists have one entry per token")
    elif label_source in MASK_COLUMNS:
        mask, moff = _flat([r[label_source] for _, r in rows], label_source, where)
        if not np.array_equal(off, moff):
            bad = int(np.flatnonzero(np.diff(off) != np.diff(moff))[0])
            raise PacktoolError(f"record {rows[bad][0]}: {label_source} and input_ids differ in length")
        lab = np.where(mask != 0, ids, IGNORE)
    else:
        lab = ids
    if len(ids) and (ids.min() < 0 or ids.max() > np.iinfo(np.int32).max):
        raise PacktoolError(f"input_ids out of range near {where}: token ids must be in 0..2^31-1")
    lens = np.diff(off).astype(np.int32)
    per_doc_loss = np.add.reduceat((lab != IGNORE).astype(np.int64), off[:-1]) if len(lab) else np.zeros(len(rows))
    per_doc_loss = np.where(lens > 0, per_doc_loss, 0).astype(np.int32)
    off32 = pa.array(off.astype(np.int32))
    return pa.table(
        {
            "input_ids": pa.ListArray.from_arrays(off32, pa.array(ids.astype(np.int32))),
            "labels": pa.ListArray.from_arrays(off32, pa.array(lab.astype(np.int32))),
            "length": pa.array(lens),
            "num_loss_tokens": pa.array(per_doc_loss),
            "source_index": pa.array(np.array([i for i, _ in rows], dtype=np.int64)),
        }
    )


def pretokenized_dataset(reader, first, work: Path):
    """Build our tokenized dataset from records that carry input_ids. Returns (dataset, meta)."""
    import datasets
    import pyarrow as pa

    keys = first.record
    label_source = next((c for c in ("labels", *MASK_COLUMNS) if c in keys), "all")
    tables = []
    rows: list[tuple[int, dict]] = []
    empty = []

    def gen():
        yield first
        yield from reader.records()

    for rec in gen():
        r = rec.record
        if not isinstance(r.get("input_ids"), list | tuple | np.ndarray) or (
            label_source != "all" and r.get(label_source) is None
        ):
            reader._bad(rec, f"pre-tokenized record lacks input_ids or {label_source} (keys: {sorted(r)})")
            continue
        if len(r["input_ids"]) == 0:
            empty.append(rec.index)
            reader._bad(rec, "empty input_ids")
            continue
        rows.append((rec.index, r))
        if len(rows) >= BATCH:
            tables.append(_batch_table(rows, label_source))
            rows = []
    if rows:
        tables.append(_batch_table(rows, label_source))
    if tables:
        table = pa.concat_tables(tables)
    else:
        table = pa.table({"input_ids": pa.array([], pa.list_(pa.int32())),
                          "labels": pa.array([], pa.list_(pa.int32())),
                          "length": pa.array([], pa.int32()), "num_loss_tokens": pa.array([], pa.int32()),
                          "source_index": pa.array([], pa.int64())})
    ds = datasets.Dataset(table)
    warnings = []
    zero = table.column("source_index").to_numpy()[table.column("num_loss_tokens").to_numpy() == 0]
    if len(zero):
        warnings.append(f"{len(zero)} pre-tokenized example(s) have no loss token")
    meta = {
        "format": "pretokenized",
        "format_reason": f"records carry input_ids; labels from {label_source}",
        "tokenizer": {"name": None, "pad_id": None, "eos_id": None, "vocab_size": None},
        "warnings": warnings,
        "options": {"labels_from": label_source},
    }
    return ds, meta
