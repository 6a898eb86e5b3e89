"""Accept datasets that are already tokenized (TRL's or a user's own pipeline output).

    record columns                    → our labels
    input_ids + labels                  labels as given; each must be -100 or equal its input id
                                        (unshifted Hugging Face labels: the model shifts)
    input_ids + completion_mask         input_ids where mask != 0, else -100     (TRL prompt-completion)
    input_ids + assistant_masks         input_ids where mask != 0, else -100     (TRL assistant_only_loss)
    input_ids alone                     every token carries loss
    + attention_mask                    positions where it is 0 are padding: removed before packing

The label source comes from the first record's keys or the column names (`label_source_of`) and
is required of every row: whole non-negative int32 ids, one label / mask entry per id, no
pre-shifted labels. `record_arrays` (one record: `packtool inspect`; `records_validated`: a list)
words every reason; `validate_batch` (Parquet, Arrow, save_to_disk folders) runs each check over
the flat value buffers of a batch's list columns (any integer, float or bool values; null rows
and values, sliced arrays), asks record_arrays why of each bad row, and reuses an int32 column
zero-copy where all its rows are good. `records_batch`: JSON records as Arrow columns, so checked.

    column   input_ids: offsets [0, 3, 3, 5]  values [5, 9, 2, | 7, 1]       rows 0, 1 (empty), 2
    _Col     valid bool[n], off int64[n + 1], vals (native dtype), nulls bool[values] | None
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from packtool.schema import IGNORE_INDEX

MASK_COLUMNS = ("completion_mask", "assistant_masks")
LABEL_COLUMNS = ("labels", *MASK_COLUMNS)
INT32_MAX = np.iinfo(np.int32).max
EMPTY = "empty input_ids"
OUT_COLUMNS = ("input_ids", "labels", "length", "num_loss_tokens")


class RecordError(ValueError):
    """A pre-tokenized record is malformed; the message says what and where in the record."""


def label_source_of(names: Iterable[str]) -> str:
    """Which column gives the labels (labels | completion_mask | assistant_masks | all)."""
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
            raise RecordError(f"{label_source} has {col.size} entries for {ids.size} input_ids")
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
            raise RecordError(f"attention_mask has {m.size} entries for {ids.size} input_ids")
        keep = m != 0
        removed = int(ids.size - keep.sum())
        if removed:
            ids, labels = ids[keep], labels[keep]
    return ids.astype(np.int32), labels.astype(np.int32), removed


@dataclass
class Validated:
    """The good rows of one batch, and why the others are bad."""

    table: pa.RecordBatch  # OUT_COLUMNS, int32 list offsets (no source_index: the caller adds it)
    keep: np.ndarray  # int64 indices of the good rows in the input batch, in order
    rejects: list[tuple[int, str]]  # (row in the input batch, reason), in row order
    removed_padding: int  # tokens dropped from the good rows where attention_mask was 0


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


def _checked(record: dict, label_source: str):
    """record_arrays' (ids, labels, removed) of a good record, else why it is not (a str)."""
    try:
        got = record_arrays(record, label_source)
    except RecordError as e:
        return str(e)
    return got if got[0].size else EMPTY


def records_validated(records: list[dict], label_source: str) -> Validated:
    """The reference path: record_arrays on every record."""
    ids_l, lab_l, keep, rejects = [], [], [], []
    removed = 0
    for i, rec in enumerate(records):
        got = _checked(rec, label_source)
        if isinstance(got, str):
            rejects.append((i, got))
            continue
        ids, labels, cut = got
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


# -- the batch path -------------------------------------------------------------------------------


class _Unhandled(Exception):
    """A row the batch path cannot decide; the batch goes record by record."""


@dataclass
class _Col:
    """A list column as flat numpy values: row i is vals[off[i]:off[i + 1]] (when valid[i])."""

    valid: np.ndarray  # bool per row
    off: np.ndarray  # int64, n + 1, off[0] == 0
    vals: np.ndarray  # native dtype, len off[-1]; after _check_ints: integers with int64 semantics
    nulls: np.ndarray | None  # bool per value, or None without null values
    child: pa.Array | None  # the Arrow int32 values behind vals (zero-copy reuse), else None

    @property
    def lens(self) -> np.ndarray:
        return np.diff(self.off)


def _row_validity(arr: pa.Array) -> np.ndarray:
    if arr.null_count == 0:
        return np.ones(len(arr), dtype=bool)
    return arr.is_valid().to_numpy(zero_copy_only=False)


def _flat_numpy(child: pa.Array) -> tuple[np.ndarray, np.ndarray | None]:
    """Values (a zero-copy view where the type allows) and the null positions of a numeric array."""
    t = child.type
    nulls = child.is_null().to_numpy(zero_copy_only=False) if child.null_count else None
    if pa.types.is_null(t):
        return np.zeros(len(child), dtype=np.int64), np.ones(len(child), dtype=bool)
    if pa.types.is_boolean(t):
        return child.fill_null(False).to_numpy(zero_copy_only=False), nulls
    dtype = np.dtype(t.to_pandas_dtype())
    buf = child.buffers()[1]
    if buf is None or len(child) == 0:
        return np.zeros(len(child), dtype=dtype), nulls
    return np.frombuffer(buf, dtype=dtype, count=child.offset + len(child))[child.offset :], nulls


def _column_view(arr: pa.Array) -> _Col | None:
    """A list column of numbers as a _Col; None for any other type (no row of it can be good)."""
    if isinstance(arr.type, pa.ExtensionType):
        arr = arr.storage
    t = arr.type
    n = len(arr)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        offs = arr.offsets.to_numpy()
        o0, o1 = int(offs[0]), int(offs[-1])
        off = offs.astype(np.int64) - o0
        child = arr.values.slice(o0, o1 - o0)
    elif pa.types.is_fixed_size_list(t):
        size = t.list_size
        off = np.arange(n + 1, dtype=np.int64) * size
        child = arr.values.slice(arr.offset * size, n * size)
    elif getattr(pa.types, "is_list_view", lambda _: False)(t) or getattr(
        pa.types, "is_large_list_view", lambda _: False
    )(t):
        raise _Unhandled  # rows may overlap or come out of order: go record by record
    else:
        return None
    if pa.types.is_dictionary(child.type):
        child = child.dictionary_decode()
    if isinstance(child.type, pa.ExtensionType):
        child = child.storage
    ct = child.type
    if not (
        pa.types.is_integer(ct)
        or pa.types.is_floating(ct)
        or pa.types.is_boolean(ct)
        or pa.types.is_null(ct)
    ):
        return None
    vals, nulls = _flat_numpy(child)
    return _Col(_row_validity(arr), off, vals, nulls, child if ct == pa.int32() else None)


def _segment_counts(flat: np.ndarray, off: np.ndarray) -> np.ndarray:
    """Number of True values of flat in each row (rows laid out by off, off[-1] == flat.size)."""
    lens = np.diff(off)
    out = np.zeros(lens.size, dtype=np.int64)
    nonempty = np.flatnonzero(lens)  # empty rows hold no values: their offset starts the next row
    if nonempty.size:
        out[nonempty] = np.add.reduceat(flat.view(np.uint8), off[nonempty], dtype=np.int32)
    return out


def _align(x: _Col, ids: _Col, rows: np.ndarray) -> np.ndarray:
    """x's values laid out like ids' values, for the rows where rows is True (lengths already equal)."""
    if x.off is ids.off or np.array_equal(x.off, ids.off):
        return x.vals
    out = np.zeros(len(ids.vals), dtype=x.vals.dtype)
    r = np.flatnonzero(rows)
    if r.size == 0:
        return out
    delta = x.off[r] - ids.off[r]
    lens = ids.lens[r]
    dst = np.repeat(ids.off[r] - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
    out[dst] = x.vals[dst + np.repeat(delta, lens)]
    return out


class _Batch:
    """The state of one validation: which rows are still good (record_arrays words why the others
    are not: `_validated`)."""

    def __init__(self, batch: pa.RecordBatch, label_source: str, records: list[dict] | None):
        self.batch, self.label_source, self.records = batch, label_source, records
        self.n = batch.num_rows
        self.names = batch.schema.names
        self.ok = np.ones(self.n, dtype=bool)

    def column(self, name: str) -> pa.Array | None:
        idx = [i for i, nm in enumerate(self.names) if nm == name]
        if not idx:
            return None
        arr = self.batch.column(idx[-1])  # duplicate names: the last one, as to_pylist() does
        return None if pa.types.is_null(arr.type) else arr

    def fail_where(self, bad_rows: np.ndarray) -> None:
        self.ok &= ~bad_rows

    def fail_values(self, bad: np.ndarray, col: _Col) -> None:
        """The rows of col (not null) holding a value where `bad` (one per value) is True fail."""
        if bad.any():
            self.fail_where((_segment_counts(bad, col.off) > 0) & col.valid)

    def check_ints(self, col: _Col) -> None:
        """_ints for every row of col: null values, values that are not whole; int64 semantics."""
        if col.nulls is not None:
            self.fail_values(col.nulls, col)
        if col.vals.dtype.kind == "f":
            with np.errstate(invalid="ignore"):
                v = col.vals
                self.fail_values(~np.isfinite(v) | (v != np.round(v)), col)
                col.vals = v.astype(np.int64)
        elif col.vals.dtype.kind == "b":
            col.vals = col.vals.view(np.uint8)
        elif col.vals.dtype == np.uint64:  # as astype(np.int64) in the record path: wraps
            col.vals = col.vals.view(np.int64)


def _take(vals: np.ndarray, how: np.ndarray | None, dtype) -> np.ndarray:
    """The values where `how` (None: all) as one new buffer of dtype (or vals itself)."""
    if how is None:
        return vals.astype(dtype, copy=False)
    import pyarrow.compute as pc  # (Arrow's filter: several times faster than vals[how] here)

    out = pc.filter(pa.array(vals), pa.array(how)).to_numpy(zero_copy_only=True)
    return out.astype(dtype, copy=False)


def _validated(state: _Batch, table, keep, removed: int) -> Validated:
    """The batch's Validated; the reason of each failed row is record_arrays' on that row alone (one
    text for both paths). A row it accepts is one the batch path cannot read: `_Unhandled`."""
    rows = np.flatnonzero(~state.ok)
    if state.records is not None:
        dicts = [state.records[i] for i in rows.tolist()]
    else:
        dicts = state.batch.take(pa.array(rows)).to_pylist() if len(rows) else []
    pairs = zip(rows.tolist(), dicts, strict=True)
    rejects = [(i, _checked(rec, state.label_source)) for i, rec in pairs]
    if not all(isinstance(why, str) for _, why in rejects):
        raise _Unhandled
    return Validated(table, keep, rejects, removed)


def _validate(batch: pa.RecordBatch, label_source: str, records: list[dict] | None) -> Validated:
    st = _Batch(batch, label_source, records)
    n = st.n
    relevant = ["input_ids", *([label_source] if label_source != "all" else []), "attention_mask"]
    views: dict[str, _Col | None] = {}
    python = np.zeros(n, dtype=bool)
    for name in relevant:
        arr = st.column(name)
        v = None if arr is None else _column_view(arr)
        if arr is not None and v is None:
            python |= _row_validity(arr)
        views[name] = v

    # input_ids: present, whole numbers, token ids
    ids = views["input_ids"]
    ids_arr = st.column("input_ids")
    ids_valid = np.zeros(n, dtype=bool) if ids_arr is None else _row_validity(ids_arr)
    st.fail_where(~ids_valid | python)  # python: a value of a type only the record path reads
    if ids is None or not st.ok.any():
        return _validated(st, empty_table(), np.zeros(0, dtype=np.int64), 0)
    st.check_ints(ids)
    u = ids.vals.view(np.uint64) if ids.vals.dtype == np.int64 else ids.vals  # negatives: > 2^31
    info = np.iinfo(u.dtype)  # (one pass when every id is good: only a bound the dtype can break)
    if u.size and (info.min < 0 and u.min() < 0 or info.max > INT32_MAX and u.max() > INT32_MAX):
        st.fail_values((u < 0) | (u > INT32_MAX), ids)  # ids in 0..2^31-1

    # labels
    lab = None
    if label_source == "all":
        for c in LABEL_COLUMNS:
            arr = st.column(c)
            if arr is not None:
                st.fail_where(_row_validity(arr))
    else:
        lab = views[label_source]
        if lab is None:
            st.fail_where(st.ok)
        else:
            st.fail_where(~lab.valid)
            st.check_ints(lab)
            st.fail_where(lab.lens != ids.lens)
            aligned = _align(lab, ids, st.ok)
            if aligned is not lab.vals:
                lab.child = None
            lab.vals = aligned
            if label_source == "labels":
                wrong = lab.vals != ids.vals
                wrong &= lab.vals != IGNORE_INDEX
                st.fail_values(wrong, ids)

    # attention_mask: padding positions
    ilens = ids.lens
    out_len = ilens
    kept = None  # bool per value of ids: False where attention_mask is 0
    mask = views["attention_mask"]
    if mask is not None:
        st.check_ints(mask)
        st.fail_where(mask.valid & (mask.lens != ilens))
        rows_m = st.ok & mask.valid
        nz = _align(mask, ids, rows_m) != 0
        if not nz.all():
            if not rows_m.all():  # rows without a (usable) mask keep every value
                nz |= np.repeat(~rows_m, ilens)
            counts = _segment_counts(nz, ids.off)
            if not np.array_equal(counts, ilens):
                kept, out_len = nz, counts
    st.fail_where(out_len == 0)

    good = st.ok
    keep = np.flatnonzero(good)
    if keep.size == 0:
        return _validated(st, empty_table(), keep, 0)
    lengths = out_len[keep]
    total = int(lengths.sum())
    check_total(total)
    removed = int(ilens[keep].sum()) - total

    # which flat positions go out: all of them (how None), or a boolean mask
    how = None if good.all() else np.repeat(good, ilens)
    if kept is not None:
        how = kept if how is None else kept & how

    def out(col: _Col):  # (int32 values, their Arrow array: zero-copy the input's int32 buffer)
        if how is None and col.child is not None:
            return col.vals, col.child
        values = _take(col.vals, how, np.int32)
        return values, values

    ids_np, ids_values = out(ids)
    lab_np = lab_values = None
    if label_source == "labels":
        lab_np, lab_values = out(lab)
    elif label_source != "all":
        m = _take(lab.vals, how, lab.vals.dtype)
        lab_np = np.where(m != 0, ids_np, np.int32(IGNORE_INDEX)).astype(np.int32, copy=False)
    table = out_table(lengths, ids_values, lab_np, lab_values)
    return _validated(st, table, keep.astype(np.int64), removed)


def validate_batch(batch: pa.RecordBatch | pa.Table, label_source: str) -> Validated:
    """Check one batch of pre-tokenized rows (fewer than 2^31 good tokens), vectorized; `label_source`:
    label_source_of(the first schema or record). A Table is combined into one batch first."""
    if isinstance(batch, pa.Table):
        batches = batch.combine_chunks().to_batches()
        batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=batch.schema)
    return _validate_or_records(batch, label_source, None)


def _validate_or_records(batch, label_source: str, records: list[dict] | None) -> Validated:
    try:
        return _validate(batch, label_source, records)
    except _Unhandled:
        return records_validated(
            records if records is not None else batch.to_pylist(), label_source
        )


def records_batch(records: list[dict], label_source: str) -> Validated:
    """validate_batch for dict records (JSON/JSONL): the same rows and messages as record_arrays."""
    present = set().union(*records)
    names = [c for c in ("input_ids", *LABEL_COLUMNS, "attention_mask") if c in present]
    columns = []
    for name in names:
        try:
            col = pa.array([rec.get(name) for rec in records])
        except (pa.ArrowException, OverflowError, TypeError, ValueError):
            return records_validated(records, label_source)
        if isinstance(col, pa.ChunkedArray):
            col = col.combine_chunks()
        columns.append(col)
    columns, names = (columns, names) if names else ([pa.nulls(len(records))], ["_"])
    batch = pa.RecordBatch.from_arrays(columns, names=names)
    return _validate_or_records(batch, label_source, records)
