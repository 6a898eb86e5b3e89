"""Accept datasets that are already tokenized (TRL's or a user's own pipeline output).

    record columns                    → our labels
    input_ids + labels                  labels as given; each must be -100 or equal its input id
                                        (unshifted Hugging Face labels: the model shifts)
    input_ids + completion_mask         input_ids where mask == 1, else -100      (TRL prompt-completion)
    input_ids + assistant_masks         input_ids where mask == 1, else -100      (TRL assistant_only_loss)
    input_ids alone                     every token carries loss
    + attention_mask                    positions where it is 0 are padding: removed before packing

The label source is chosen from the first record and required of every record. Each record is
checked (whole non-negative ids, one label per id, no pre-shifted labels) and turned into int32
arrays; batches of records become Arrow list arrays from flat numpy buffers.
"""

from __future__ import annotations

import numpy as np

IGNORE = -100
BATCH_RECORDS = 20_000
BATCH_TOKENS = 1 << 28  # Arrow list offsets are int32: flush well before 2^31 tokens
MASK_COLUMNS = ("completion_mask", "assistant_masks")
INT32_MAX = np.iinfo(np.int32).max


class RecordError(ValueError):
    """A pre-tokenized record is malformed; the message says what and where in the record."""


def label_source(record: dict) -> str:
    """Which column gives the labels: labels | completion_mask | assistant_masks | all."""
    return next((c for c in ("labels", *MASK_COLUMNS) if c in record), "all")


def _ints(value, name: str) -> np.ndarray:
    """A flat list of whole numbers → int64 array, or RecordError naming the column."""
    try:
        a = np.asarray(value)
    except (ValueError, TypeError) as e:
        raise RecordError(f"{name} is not a flat list of integers ({e})") from None
    if a.ndim != 1:
        raise RecordError(f"{name} is not a flat list of integers (it has {a.ndim} dimensions)")
    if a.size == 0:
        return a.astype(np.int64)
    if a.dtype.kind == "b":
        return a.astype(np.int64)
    if a.dtype.kind == "f":
        if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
            bad = int(np.flatnonzero(~np.isfinite(a) | (a != np.round(a)))[0])
            raise RecordError(f"{name}[{bad}] = {a[bad].item()!r} is not a whole number")
        return a.astype(np.int64)
    if a.dtype.kind not in "iu":
        raise RecordError(f"{name} holds {a.dtype} values, not integers")
    return a.astype(np.int64)


def record_arrays(record: dict, source: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Checked (input_ids, labels) as int32 arrays, and the number of padding positions removed."""
    if "input_ids" not in record or record["input_ids"] is None:
        raise RecordError(f"no input_ids (keys: {', '.join(sorted(record))})")
    ids = _ints(record["input_ids"], "input_ids")
    if ids.size and (ids.min() < 0 or ids.max() > INT32_MAX):
        bad = int(np.flatnonzero((ids < 0) | (ids > INT32_MAX))[0])
        raise RecordError(f"input_ids[{bad}] = {int(ids[bad])} is not a token id (0..2^31-1)")
    if source == "all":
        extra = [c for c in ("labels", *MASK_COLUMNS) if record.get(c) is not None]
        if extra:
            raise RecordError(f"has {extra[0]} but the first record has no label column; give every record "
                              "the same columns")
        labels = ids.copy()
    else:
        if record.get(source) is None:
            raise RecordError(f"no {source} although the first record has them (keys: {', '.join(sorted(record))})")
        col = _ints(record[source], source)
        if col.size != ids.size:
            raise RecordError(f"{source} has {col.size} entries for {ids.size} input_ids")
        if source == "labels":
            wrong = (col != IGNORE) & (col != ids)
            if wrong.any():
                j = int(np.flatnonzero(wrong)[0])
                raise RecordError(
                    f"labels[{j}] = {int(col[j])} but input_ids[{j}] = {int(ids[j])}: labels must be -100 or "
                    "equal to their input id (unshifted Hugging Face labels; they look pre-shifted or use "
                    "another ignore index)"
                )
            labels = col
        else:
            labels = np.where(col != 0, ids, IGNORE)
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


def _table(rows: list[tuple[int, np.ndarray, np.ndarray]]):
    import pyarrow as pa

    lens = np.fromiter((len(a) for _, a, _ in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(lens, out=offsets[1:])
    ids = np.concatenate([a for _, a, _ in rows])
    labels = np.concatenate([lab for _, _, lab in rows])
    loss = np.fromiter((int(np.count_nonzero(lab != IGNORE)) for _, _, lab in rows), dtype=np.int32,
                       count=len(rows))
    off32 = pa.array(offsets.astype(np.int32))
    return pa.table(
        {
            "input_ids": pa.ListArray.from_arrays(off32, pa.array(ids)),
            "labels": pa.ListArray.from_arrays(off32, pa.array(labels)),
            "length": pa.array(lens.astype(np.int32)),
            "num_loss_tokens": pa.array(loss),
            "source_index": pa.array(np.array([i for i, _, _ in rows], dtype=np.int64)),
        }
    )


def pretokenized_dataset(reader, first, cfg):
    """Build our tokenized dataset from records that carry input_ids. Returns (dataset, meta)."""
    import datasets
    import pyarrow as pa

    source = label_source(first.record)
    tables = []
    rows: list[tuple[int, np.ndarray, np.ndarray]] = []
    tokens = removed = 0

    def gen():
        yield first
        yield from reader.records()

    for rec in gen():
        try:
            ids, labels, cut = record_arrays(rec.record, source)
        except RecordError as e:
            reader._bad(rec, f"pre-tokenized record: {e}")
            continue
        if ids.size == 0:
            reader._bad(rec, "pre-tokenized record: empty input_ids")
            continue
        removed += cut
        rows.append((rec.index, ids, labels))
        tokens += ids.size
        if len(rows) >= BATCH_RECORDS or tokens >= BATCH_TOKENS:
            tables.append(_table(rows))
            rows, tokens = [], 0
    if rows:
        tables.append(_table(rows))
    if tables:
        table = pa.concat_tables(tables)
    else:
        table = pa.table({"input_ids": pa.array([], pa.list_(pa.int32())),
                          "labels": pa.array([], pa.list_(pa.int32())),
                          "length": pa.array([], pa.int32()), "num_loss_tokens": pa.array([], pa.int32()),
                          "source_index": pa.array([], pa.int64())})
    warnings = []
    zero = table.column("source_index").to_numpy()[table.column("num_loss_tokens").to_numpy() == 0]
    if len(zero):
        warnings.append(f"{len(zero)} pre-tokenized example(s) have no loss token")
    if removed:
        warnings.append(f"removed {removed} padding token(s) marked 0 in attention_mask")
    ignored = [opt for opt, given in (("--chat-template", cfg.chat_template is not None),
                                      ("--train-on", cfg.train_on != "assistant")) if given]
    if ignored:
        warnings.append(f"{' and '.join(ignored)} do not apply to pre-tokenized input: labels come from "
                        f"{source if source != 'all' else 'every token'}")
    meta = {
        "format": "pretokenized",
        "format_reason": f"records carry input_ids; labels from {source if source != 'all' else 'every token'}",
        "tokenizer": {"name": None, "pad_id": None, "eos_id": None, "vocab_size": None},
        "warnings": warnings,
        "options": {"labels_from": source, "train_on": None, "chat_template": None},
    }
    return datasets.Dataset(table), meta
