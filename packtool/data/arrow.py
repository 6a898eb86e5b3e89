"""Arrow without pandas: the tokenized schema, zero-copy numpy <-> Arrow, and the batch builder.

token_schema()   input_ids list<int32> · labels list<int32> · length int32 ·
                 num_loss_tokens int32 · source_index int64     (one row per kept example)
token_batch      flat ids[T], labels[T], offsets[n+1], source_index[n] → a RecordBatch of it
arrow_array      int32/int64 numpy → Arrow, zero-copy
arrow_numpy      a primitive Arrow array → numpy, zero-copy without nulls
column_numpy     a (chunked) table's column → one numpy array
"""

from __future__ import annotations

import numpy as np


def token_schema():
    """The Arrow schema of a tokenized table (and of every batch the encode step returns)."""
    import pyarrow as pa

    return pa.schema(
        [
            ("input_ids", pa.list_(pa.int32())),
            ("labels", pa.list_(pa.int32())),
            ("length", pa.int32()),
            ("num_loss_tokens", pa.int32()),
            ("source_index", pa.int64()),
        ]
    )


_ARROW_TYPES = {
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.int8): "int8",
}


def arrow_array(values: np.ndarray):
    """A pyarrow array over a contiguous int32/int64/uint8/int8 numpy array, zero-copy. (pa.array(ndarray)
    would import pandas in every process that builds a batch.)"""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    kind = getattr(pa, _ARROW_TYPES[values.dtype])()
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


def token_batch(ids: np.ndarray, labels: np.ndarray, offsets: np.ndarray, source_index: np.ndarray):
    """A record batch of the tokenized schema from flat int32 ids/labels and int64 offsets[n+1]."""
    import pyarrow as pa

    from packtool.schema import IGNORE_INDEX

    offsets = np.asarray(offsets, dtype=np.int64)
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError("a batch holds more than 2^31 tokens; use smaller batches")
    off32 = arrow_array(offsets.astype(np.int32))
    lengths = np.diff(offsets).astype(np.int32)
    trained = np.concatenate([[0], np.cumsum(labels != IGNORE_INDEX, dtype=np.int64)])
    loss = (trained[offsets[1:]] - trained[offsets[:-1]]).astype(np.int32)
    return pa.RecordBatch.from_arrays(
        [
            pa.ListArray.from_arrays(off32, arrow_array(np.asarray(ids, dtype=np.int32))),
            pa.ListArray.from_arrays(off32, arrow_array(np.asarray(labels, dtype=np.int32))),
            arrow_array(lengths),
            arrow_array(loss),
            arrow_array(np.asarray(source_index, dtype=np.int64)),
        ],
        schema=token_schema(),
    )
