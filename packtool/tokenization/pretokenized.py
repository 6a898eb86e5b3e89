"""Accept datasets that are already tokenized (TRL's or a user's own pipeline output).

    record columns                    → our labels
    input_ids + labels                  labels as given; each must be -100 or equal its input id
                                        (unshifted Hugging Face labels: the model shifts)
    input_ids + completion_mask         input_ids where mask != 0, else -100     (TRL prompt-completion)
    input_ids + assistant_masks         input_ids where mask != 0, else -100     (TRL assistant_only_loss)
    input_ids alone                     every token carries loss
    + attention_mask                    positions where it is 0 are padding: removed before packing

The label source is chosen from the first record's keys or the column names (`label_source_of`)
and required of every row. Every row is checked: whole non-negative int32 ids, one label / mask
entry per id, no pre-shifted labels.

Two paths give the same rows; `record_arrays` words every reason, for both:

* `record_arrays` (one dict record: `packtool inspect`), and `records_validated` (a list of them);
* packtool.tokenization.pretokenized_batch: `validate_batch` (Parquet, Arrow, save_to_disk
  folders), one Arrow batch at a time, vectorized over the flat value buffers of the list columns,
  and `records_batch` (JSON/JSONL records as Arrow columns, then `validate_batch`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from packtool.schema import IGNORE_INDEX

if TYPE_CHECKING:
    import pyarrow as pa

MASK_COLUMNS = ("completion_mask", "assistant_masks")
LABEL_COLUMNS = ("labels", *MASK_COLUMNS)
INT32_MAX = np.iinfo(np.int32).max
EMPTY = "empty input_ids"
OUT_COLUMNS = ("input_ids", "labels", "length", "num_loss_tokens")


class RecordError(ValueError):
    """A pre-tokenized record is malformed; the message says what and where in the record."""


def _count(name: str, got: int, want: int) -> str:
    return f"{name} has {got} entries for {want} input_ids"


def label_source_of(names: Iterable[str]) -> str:
    """Which column gives the labels, from column names (a schema, or a record's keys): labels |
    completion_mask | assistant_masks | all."""
    names = set(names)
    return next((c for c in LABEL_COLUMNS if c in names), "all")


def _ints(value, name: str) -> np.ndarray:
    """A flat list of whole numbers → int64 array, or RecordError naming the column."""
    try:
        a = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise RecordError(f"{name} is not a flat list of integers ({e})") from None
    if a.ndim != 1:
        raise RecordError(f"{name} is not a flat list of integers (it has {a.ndim} dimensions)")
    if a.size and a.dtype.kind not in "biuf":
        raise RecordError(f"{name} holds {a.dtype} values, not integers")
    if a.dtype.kind == "f":
        bad = np.flatnonzero(~np.isfinite(a) | (a != np.round(a)))
        if bad.size:
            raise RecordError(f"{name}[{int(bad[0])}] = {a[bad[0]].item()!r} is not a whole number")
    return a.astype(np.int64)


def record_arrays(record: dict, label_source: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Checked (input_ids, labels) as int32 arrays, and the number of padding positions removed."""
    if "input_ids" not in record or record["input_ids"] is None:
        raise RecordError(f"no input_ids (keys: {', '.join(sorted(record))})")
    ids = _ints(record["input_ids"], "input_ids")
    if ids.size and (ids.min() < 0 or ids.max() > INT32_MAX):
        bad = int(np.flatnonzero((ids < 0) | (ids > INT32_MAX))[0])
        raise RecordError(f"input_ids[{bad}] = {int(ids[bad])} is not a token id (0..2^31-1)")
    if label_source == "all":
        extra = [c for c in LABEL_COLUMNS if record.get(c) is not None]
        if extra:
            raise RecordError(
                f"has {extra[0]} but the first record has no label column; give every record "
                "the same columns"
            )
        labels = ids.copy()
    else:
        if record.get(label_source) is None:
            keys = ", ".join(sorted(record))
            raise RecordError(
                f"no {label_source} although the first record has them (keys: {keys})"
            )
        col = _ints(record[label_source], label_source)
        if col.size != ids.size:
            raise RecordError(_count(label_source, col.size, ids.size))
        if label_source == "labels":
            wrong = (col != IGNORE_INDEX) & (col != ids)
            if wrong.any():
                j = int(np.flatnonzero(wrong)[0])
                raise RecordError(
                    f"labels[{j}] = {int(col[j])} but input_ids[{j}] = {int(ids[j])}: labels must "
                    "be -100 or equal to their input id (unshifted Hugging Face labels; they look "
                    "pre-shifted or use another ignore index)"
                )
            labels = col
        else:
            labels = np.where(col != 0, ids, IGNORE_INDEX)
    removed = 0
    mask = record.get("attention_mask")
    if mask is not None:
        m = _ints(mask, "attention_mask")
        if m.size != ids.size:
            raise RecordError(_count("attention_mask", m.size, ids.size))
        keep = m != 0
        removed = int(ids.size - keep.sum())
        if removed:
            ids, labels = ids[keep], labels[keep]
    return ids.astype(np.int32), labels.astype(np.int32), removed


@dataclass
class Validated:
    """The good rows of one batch, and why the others are bad.

    table: input_ids list<int32>, labels list<int32>, length int32, num_loss_tokens int32 (int32
    offsets; no source_index: the caller adds it). keep: int64 indices of the good rows in the input
    batch, in order. rejects: (row index in the input batch, reason), in row order; the reason is the
    text `record_arrays` raises, or "empty input_ids". removed_padding: tokens dropped from the good
    rows because attention_mask was 0 there.
    """

    table: pa.RecordBatch
    keep: np.ndarray
    rejects: list[tuple[int, str]]
    removed_padding: int


def empty_table():
    return out_table(np.zeros(0, np.int32), np.zeros(0, np.int32))


def check_total(total: int) -> None:
    if total > INT32_MAX:
        raise ValueError(
            f"{total} tokens in one batch: more than int32 list offsets hold; pass smaller batches"
        )


def out_table(lengths: np.ndarray, ids, labels=None, label_values=None) -> pa.RecordBatch:
    """The checked rows, `lengths` tokens each (>= 1): `ids` flat int32 (numpy, or an Arrow array to
    reuse); `labels` flat int32 numpy, None for the ids themselves (every token trained), with
    `label_values` the Arrow array to reuse for them (None: labels)."""
    import pyarrow as pa

    off = np.zeros(len(lengths) + 1, dtype=np.int32)
    np.cumsum(lengths, out=off[1:])
    offsets = pa.array(off)
    ids_out = pa.ListArray.from_arrays(offsets, ids)
    if labels is None:
        labels_out, loss = ids_out, lengths
    else:
        values = labels if label_values is None else label_values
        labels_out = pa.ListArray.from_arrays(offsets, values)
        ignored = (labels == IGNORE_INDEX).view(np.uint8)
        loss = lengths - np.add.reduceat(ignored, off[:-1], dtype=np.int32)
    columns = [
        ids_out,
        labels_out,
        pa.array(lengths.astype(np.int32)),
        pa.array(loss.astype(np.int32)),
    ]
    return pa.record_batch(columns, names=list(OUT_COLUMNS))


def records_validated(records: list[dict], label_source: str) -> Validated:
    """The reference path: record_arrays on every record."""
    ids_l, lab_l, keep, rejects = [], [], [], []
    removed = 0
    for i, rec in enumerate(records):
        try:
            ids, labels, cut = record_arrays(rec, label_source)
        except RecordError as e:
            rejects.append((i, str(e)))
            continue
        if ids.size == 0:
            rejects.append((i, EMPTY))
            continue
        ids_l.append(ids)
        lab_l.append(labels)
        keep.append(i)
        removed += cut
    if not keep:
        return Validated(empty_table(), np.zeros(0, dtype=np.int64), rejects, 0)
    lens = np.fromiter((len(a) for a in ids_l), dtype=np.int64, count=len(ids_l))
    check_total(int(lens.sum()))
    table = out_table(lens, np.concatenate(ids_l), np.concatenate(lab_l))
    return Validated(table, np.asarray(keep, dtype=np.int64), rejects, removed)
