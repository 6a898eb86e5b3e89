"""The labels of a tokenized table, stored one of two ways; every reader asks here.

    column      type          holds
    labels      list<int32>   the labels themselves (-100: no loss), any values
    loss_mask   list<bool>    1 where the label is the input id at that position, 0 where it is
                              -100 (a row as long as its input_ids); only when every label is one
                              of the two, which is what the encode step and pre-tokenized
                              validation give. Arrow packs it: 1 bit a token, the rows' bits
                              contiguous (row r's first bit: values offset + offsets[r])

    input_ids  [  5,    9, 2, 7]
    labels     [-100, -100, 2, 7]    ⇔    loss_mask [0, 0, 1, 1]   (bits, least significant first)

The cache entry stores the mask where it can (1/32 of the bytes of labels); a list<uint8> mask
(cache entries of format 3) reads the same. Readers get labels through the functions below.

Arrow without pandas, for every reader of token columns: arrow_array (int numpy → Arrow,
zero-copy), arrow_numpy (a primitive Arrow array → numpy, zero-copy without nulls), column_numpy
(a (chunked) table's column → one numpy array).
"""

from __future__ import annotations

import numpy as np

from packtool.schema import IGNORE_INDEX

LABELS, LOSS_MASK = "labels", "loss_mask"


def arrow_array(values: np.ndarray):
    """A pyarrow array over an int32/int64/uint8/int8 numpy array, zero-copy (pa.array(ndarray)
    would import pandas)."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    kind = pa.from_numpy_dtype(values.dtype)
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def arrow_numpy(arr) -> np.ndarray:
    """A primitive Arrow array as numpy, zero-copy when it has no nulls (Array.to_numpy imports pandas)."""
    if arr.null_count:
        return arr.to_numpy(zero_copy_only=False)
    import pyarrow as pa

    kind = f"<{'u' if pa.types.is_unsigned_integer(arr.type) else 'i'}{arr.type.bit_width // 8}"
    if len(arr) == 0:
        return np.zeros(0, dtype=kind)
    data = np.frombuffer(arr.buffers()[1], dtype=kind)
    return data[arr.offset : arr.offset + len(arr)]


def column_numpy(table, name: str, dtype) -> np.ndarray:
    """A primitive column of a (chunked) table as one numpy array, without pandas."""
    chunks = [arrow_numpy(c) for c in table.column(name).chunks]
    return np.concatenate(chunks).astype(dtype, copy=False) if chunks else np.zeros(0, dtype)


def stored(table) -> str:
    """Which label column the table (or batch) holds: "labels" or "loss_mask"."""
    names = table.schema.names
    if LABELS in names:
        return LABELS
    if LOSS_MASK in names:
        return LOSS_MASK
    raise KeyError("the tokenized table has neither labels nor loss_mask")


def flat(arr) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int64[n+1] from 0, values) of a list array without null rows, zero-copy values
    (a list<bool>'s unpacked: uint8 0/1)."""
    import pyarrow as pa

    offs = arrow_numpy(arr.offsets)
    o0, o1 = int(offs[0]), int(offs[-1])
    part = arr.values.slice(o0, o1 - o0)
    vals = mask_bits(part) if pa.types.is_boolean(part.type) else arrow_numpy(part)
    return offs.astype(np.int64) - o0, vals


def mask_bits(arr) -> np.ndarray:
    """uint8 0/1 per value of a boolean Arrow array without nulls (bits unpacked, the array's bit
    offset honoured); a uint8 mask as it is, zero-copy."""
    import pyarrow as pa

    if not pa.types.is_boolean(arr.type):
        return arrow_numpy(arr)
    n, first = len(arr), arr.offset
    if n == 0:
        return np.zeros(0, dtype=np.uint8)
    raw = np.frombuffer(arr.buffers()[1], dtype=np.uint8)
    lo, hi = first >> 3, (first + n + 7) >> 3
    bits = np.unpackbits(raw[lo:hi], bitorder="little")
    return bits[first & 7 : (first & 7) + n]


def packed_mask(mask: np.ndarray):
    """A boolean Arrow array of `mask` (any dtype, nonzero = 1), its bits packed by numpy."""
    import pyarrow as pa

    bits = np.packbits(mask.astype(bool, copy=False), bitorder="little")
    return pa.Array.from_buffers(pa.bool_(), len(mask), [None, pa.py_buffer(bits)])


def labels_from_mask(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Flat int32 labels: ids where mask (0 or 1) is 1, else -100, as (ids + 100) * mask - 100 in
    uint32 (wrapping: exact for every int32 id), three streaming passes rather than a masked copy."""
    out = np.empty(ids.shape, dtype=np.int32)
    u = out.view(np.uint32)
    np.add(ids.view(np.uint32), np.uint32(-IGNORE_INDEX), out=u)
    np.multiply(u, mask, out=u)
    np.subtract(u, np.uint32(-IGNORE_INDEX), out=u)
    return out


def _list(offsets: np.ndarray, values):
    """A list array of `values` (numpy, or an Arrow array) at `offsets`."""
    import pyarrow as pa

    off = offsets.astype(np.int32) if offsets[-1] <= np.iinfo(np.int32).max else offsets
    vals = arrow_array(values) if isinstance(values, np.ndarray) else values
    return pa.ListArray.from_arrays(arrow_array(off), vals)


def _batch_labels(ids_arr, mask_arr):
    """list<int32> labels of one chunk from its input_ids and loss_mask chunks (same rows)."""
    off, ids = flat(ids_arr)
    moff, mask = flat(mask_arr)
    if not np.array_equal(off, moff):
        raise ValueError("loss_mask rows differ in length from input_ids rows")
    return _list(off, labels_from_mask(ids, mask))


def labels_column(table):
    """The labels as a ChunkedArray list<int32>: the column itself, or built from the mask chunk by
    chunk (4 bytes a token; a pack reads a mask without it)."""
    import pyarrow as pa

    if stored(table) == LABELS:
        return table.column(LABELS)
    chunks = [
        _batch_labels(b.column(0), b.column(1))
        for b in table.select(["input_ids", LOSS_MASK]).to_batches()
    ]
    return pa.chunked_array(chunks, type=pa.list_(pa.int32()))


def take_labels(table, rows):
    """The labels of table rows `rows` (an int array) as one list<int32> array."""
    import pyarrow as pa

    cols = [LABELS] if stored(table) == LABELS else ["input_ids", LOSS_MASK]
    part = table.select(cols).take(pa.array(np.asarray(rows, dtype=np.int64)))
    return labels_column(part).combine_chunks()


def loss_after(table, rows: np.ndarray, start) -> np.ndarray:
    """Per row of `rows` (ascending): its loss tokens at positions >= start (one, or one per row)."""
    name = stored(table)
    out = np.zeros(len(rows), dtype=np.int64)
    rows = np.asarray(rows, dtype=np.int64)
    starts = np.broadcast_to(np.asarray(start, dtype=np.int64), rows.shape)
    first = 0
    for chunk in table.column(name).chunks:
        at = np.flatnonzero((rows >= first) & (rows < first + len(chunk)))
        if at.size:
            off, vals = flat(chunk)
            for k, r in zip(at.tolist(), (rows[at] - first).tolist(), strict=True):
                v = vals[off[r] + starts[k] : off[r + 1]]
                out[k] = np.count_nonzero(v if name == LOSS_MASK else v != IGNORE_INDEX)
        first += len(chunk)
    return out


def with_labels(table):
    """The table with its labels as a labels column where they were a mask (same position)."""
    if stored(table) == LABELS:
        return table
    col = table.schema.get_field_index(LOSS_MASK)
    return table.set_column(col, LABELS, labels_column(table))


def masked_batch(batch):
    """The record batch with its labels column replaced by loss_mask (same position); None when some
    label is neither -100 nor the input id at its position (the labels must then be stored)."""
    import pyarrow as pa

    off, ids = flat(batch.column("input_ids"))
    loff, labels = flat(batch.column(LABELS))
    if not np.array_equal(off, loff):
        return None
    trained = labels != IGNORE_INDEX
    wrong = labels != ids
    wrong &= trained
    if wrong.any():
        return None
    col = batch.schema.get_field_index(LABELS)
    columns = list(batch.columns)
    columns[col] = _list(off, packed_mask(trained))
    names = list(batch.schema.names)
    names[col] = LOSS_MASK
    return pa.RecordBatch.from_arrays(columns, names=names)


def mask_schema(schema):
    """`schema` with its labels field as loss_mask list<bool>."""
    import pyarrow as pa

    i = schema.get_field_index(LABELS)
    return schema.set(i, pa.field(LOSS_MASK, pa.list_(pa.bool_())))


def prompt_lengths(table) -> np.ndarray:
    """Per row, its leading untrained run (the tokens before its first label that is not -100;
    the whole row when none is): a preference side's prompt. int32[n]."""
    name = stored(table)
    out = []
    for chunk in table.column(name).chunks:
        off, vals = flat(chunk)
        trained = vals.astype(bool) if name == LOSS_MASK else vals != IGNORE_INDEX
        out.append(leading_untrained(trained, off[:-1], np.diff(off)))
    return np.concatenate(out).astype(np.int32) if out else np.zeros(0, np.int32)


def leading_untrained(trained: np.ndarray, start: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Per segment [start, start + length) of the flat bool `trained`: the offset of its first
    True, or its length when it has none (a preference side's prompt). int64."""
    at = np.flatnonzero(trained)
    after = np.append(at, np.iinfo(np.int64).max // 2)[np.searchsorted(at, start)]
    return np.minimum(after - start, length)


def prompts_differ(ids: np.ndarray, start_c, start_r, p_c, p_r) -> np.ndarray:
    """Per pair: do its two sides' prompts differ (lengths p_c and p_r, at flat starts start_c and
    start_r of `ids`): other lengths, or an id that differs. bool[n]."""
    n = np.where(p_c == p_r, p_c, 0).astype(np.int64)
    k = np.arange(int(n.sum())) - np.repeat(np.cumsum(n) - n, n)
    differ = ids[np.repeat(start_c, n) + k] != ids[np.repeat(start_r, n) + k]
    bad = np.asarray(p_c != p_r).copy()
    bad[np.unique(np.repeat(np.arange(n.size), n)[differ])] = True
    return bad
