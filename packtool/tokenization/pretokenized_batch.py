"""The vectorized path of packtool.tokenization.pretokenized: one Arrow batch at a time.

`validate_batch` (Parquet, Arrow, save_to_disk folders) works over the flat value buffers of the
list columns (list, large_list, fixed_size_list of any integer, float or bool type; null rows, null
values, sliced arrays):

    column   input_ids: offsets [0, 3, 3, 5]  values [5, 9, 2, | 7, 1]       rows 0, 1 (empty), 2
    _Col     valid bool[n], off int64[n + 1], vals (native dtype), nulls bool[values] | None

Each check runs over the whole flat buffer (null values; whole, finite floats; ids in 0..2^31-1;
one entry per id; labels -100 or their id; attention_mask zeros); a bad row's reason is
`record_arrays`' on that row alone (one text for both paths, numpy's dtype names included). Good
rows' values are copied into int32 buffers at most once; an int32 column whose rows are all good
and unpadded is reused zero-copy (and "all" reuses the ids as labels). A column of any other type
(strings, nested lists, structs, ...) can never give a good row.

`records_batch` (a list of JSON/JSONL records) builds Arrow columns by `pa.array`, then validates
them so; when Arrow cannot build a column (mixed types, for example), the batch goes record by
record through `records_validated`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from packtool.schema import IGNORE_INDEX
from packtool.tokenization.pretokenized import (
    EMPTY,
    INT32_MAX,
    LABEL_COLUMNS,
    RecordError,
    Validated,
    check_total,
    empty_table,
    out_table,
    record_arrays,
    records_validated,
)

_MAX_RUNS = 64  # good rows in at most this many runs: copy slices; more: one boolean compress


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
    # runs of consecutive rows whose values sit at the same distance: one slice copy each
    brk = np.flatnonzero((np.diff(r) != 1) | (np.diff(delta) != 0)) + 1
    firsts, lasts = np.r_[0, brk], np.r_[brk, r.size] - 1
    if firsts.size <= 4 * _MAX_RUNS:
        for a, b in zip(r[firsts].tolist(), r[lasts].tolist(), strict=True):
            s, e, d = int(ids.off[a]), int(ids.off[b + 1]), int(x.off[a] - ids.off[a])
            out[s:e] = x.vals[s + d : e + d]
        return out
    lens = ids.lens[r]
    dst = np.repeat(ids.off[r] - np.cumsum(lens) + lens, lens) + np.arange(int(lens.sum()))
    out[dst] = x.vals[dst + np.repeat(delta, lens)]
    return out


class _Batch:
    """The state of one validation: which rows are still good, and the messages of the others."""

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
        """These rows fail (record_arrays words why: `_validated`)."""
        self.ok &= ~bad_rows

    def fail_values(self, bad: np.ndarray, col: _Col) -> None:
        """The rows of col (not null) holding a value where `bad` (one per value) is True fail."""
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


def _runs(good: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """[a, b) row ranges of the consecutive good rows."""
    d = np.diff(np.concatenate(([0], good.view(np.int8), [0])))
    return np.flatnonzero(d == 1), np.flatnonzero(d == -1)


def _take(vals: np.ndarray, how, total: int, dtype) -> np.ndarray:
    """The selected values as one new buffer of dtype (or vals itself when all are selected)."""
    if how is None:
        return vals.astype(dtype, copy=False)
    if isinstance(how, np.ndarray):  # Arrow's filter: several times faster than vals[how] here
        import pyarrow.compute as pc  # (imported here only)

        out = pc.filter(pa.array(vals), pa.array(how)).to_numpy(zero_copy_only=True)
        return out.astype(dtype, copy=False)
    out = np.empty(total, dtype=dtype)
    pos = 0
    for s, e in how:
        out[pos : pos + e - s] = vals[s:e]
        pos += e - s
    return out


def _validated(state: _Batch, table, keep, removed: int) -> Validated:
    """The batch's Validated; the reason of each failed row is record_arrays' on that row alone (one
    text for both paths). A row it accepts is one the batch path cannot read: `_Unhandled`."""
    rows = np.flatnonzero(~state.ok)
    if state.records is not None:
        dicts = [state.records[i] for i in rows.tolist()]
    else:
        dicts = state.batch.take(pa.array(rows)).to_pylist() if len(rows) else []
    rejects = []
    for i, rec in zip(rows.tolist(), dicts, strict=True):
        try:
            ids, _, _ = record_arrays(rec, state.label_source)
        except RecordError as e:
            rejects.append((i, str(e)))
            continue
        if ids.size:
            raise _Unhandled
        rejects.append((i, EMPTY))
    return Validated(table, keep, rejects, removed)


def _validate(batch: pa.RecordBatch, label_source: str, records: list[dict] | None) -> Validated:

    st = _Batch(batch, label_source, records)
    n = st.n
    if n == 0:
        return _validated(st, empty_table(), np.zeros(0, dtype=np.int64), 0)
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
    _check_range(st, ids)

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

    # which flat positions go out: all of them, slices of runs of good rows, or a boolean mask
    how = None
    a, b = _runs(good)
    all_rows = a.size == 1 and a[0] == 0 and b[0] == n
    if kept is not None:
        how = kept if all_rows else kept & np.repeat(good, ilens)
    elif a.size > _MAX_RUNS:
        how = np.repeat(good, ilens)
    elif not all_rows:
        how = list(zip(ids.off[a].tolist(), ids.off[b].tolist(), strict=True))

    def out(col: _Col):  # (int32 values, their Arrow array: zero-copy the input's int32 buffer)
        if how is None and col.child is not None:
            return col.vals, col.child
        values = _take(col.vals, how, total, np.int32)
        return values, values

    ids_np, ids_values = out(ids)
    lab_np = lab_values = None
    if label_source == "labels":
        lab_np, lab_values = out(lab)
    elif label_source != "all":
        m = _take(lab.vals, how, total, lab.vals.dtype)
        lab_np = np.where(m != 0, ids_np, np.int32(IGNORE_INDEX)).astype(np.int32, copy=False)
    table = out_table(lengths, ids_values, lab_np, lab_values)
    return _validated(st, table, keep.astype(np.int64), removed)


def _check_range(st: _Batch, ids: _Col) -> None:
    """Token ids in 0..2^31-1 (int64 semantics: the values are already integers here). One pass
    when every id is good: only a bound the dtype can break is looked at, int64 as uint64 (where
    negative ids are above INT32_MAX)."""
    v = ids.vals
    u = v.view(np.uint64) if v.dtype == np.int64 else v
    info = np.iinfo(u.dtype)
    if u.size == 0:
        return
    if (info.min < 0 and u.min() < 0) or (info.max > INT32_MAX and u.max() > INT32_MAX):
        st.fail_values((u < 0) | (u > INT32_MAX), ids)


def validate_batch(batch: pa.RecordBatch | pa.Table, label_source: str) -> Validated:
    """Check one batch of pre-tokenized rows, vectorized; the good rows as int32 lists, the bad ones' reasons.

    `label_source` is `label_source_of(first schema or first record)`: required of every row. The batch must hold fewer than 2^31 good tokens (int32 offsets). A Table is combined into
    one batch first (a copy when it has several chunks): to stream, pass RecordBatches.
    """
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
    if not names:
        batch = pa.RecordBatch.from_pydict({"_": pa.nulls(len(records))})
    else:
        batch = pa.RecordBatch.from_arrays(columns, names=names)
    return _validate_or_records(batch, label_source, records)
