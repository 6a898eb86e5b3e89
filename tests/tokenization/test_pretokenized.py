"""Pre-tokenized input: the vectorized batch path against the per-record path, every message, every layout."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from packtool.schema import IGNORE_INDEX as IGNORE
from packtool.tokenization.pretokenized import (
    EMPTY,
    INT32_MAX,
    Validated,
    label_source_of,
    record_arrays,
    records_batch,
    records_validated,
    validate_batch,
)

OUT_TYPES = {
    "input_ids": pa.list_(pa.int32()),
    "labels": pa.list_(pa.int32()),
    "length": pa.int32(),
    "num_loss_tokens": pa.int32(),
}


def reference(records: list[dict], source: str):
    """The per-record path (record_arrays on every record): (keep, ids, labels, rejects, removed)."""
    v = records_validated(records, source)
    t = v.table.to_pydict()
    return v.keep.tolist(), t["input_ids"], t["labels"], v.rejects, v.removed_padding


def assert_same(v: Validated, records: list[dict], source: str):
    keep, ids, labels, rejects, removed = reference(records, source)
    assert {f.name: f.type for f in v.table.schema} == OUT_TYPES
    assert v.keep.dtype == np.int64 and v.keep.tolist() == keep
    assert v.rejects == rejects
    assert v.removed_padding == removed
    t = v.table.to_pydict()
    assert t["input_ids"] == ids
    assert t["labels"] == labels
    assert t["length"] == [len(a) for a in ids]
    assert t["num_loss_tokens"] == [sum(x != IGNORE for x in lab) for lab in labels]


def check(batch, source: str) -> Validated:
    v = validate_batch(batch, source)
    assert_same(v, batch.to_pylist(), source)
    return v


# ------------------------------------------------------------------------------------------------
# the differential test
# ------------------------------------------------------------------------------------------------

ID_TYPES = [
    pa.int64(),
    pa.int32(),
    pa.int16(),
    pa.uint16(),
    pa.uint32(),
    pa.uint64(),
    pa.float64(),
    pa.float32(),
    pa.bool_(),
    pa.int8(),
]
LABEL_TYPES = [pa.int64(), pa.int32(), pa.int16(), pa.float64()]
MASK_TYPES = [pa.int8(), pa.bool_(), pa.int64(), pa.float32(), pa.uint8()]


def _top(t: pa.DataType) -> int:
    if pa.types.is_boolean(t):
        return 2
    if t in (pa.int8(),):
        return 128
    return 1000


def random_rows(rng, n: int, ids_t, lab_t, mask_t, label_col: str | None, attention: bool) -> dict:
    """Columns as Python lists: mostly good rows, and bad rows of every kind the types allow."""
    signed = pa.types.is_signed_integer(ids_t) or pa.types.is_floating(ids_t)
    floating = pa.types.is_floating(ids_t)
    wide = ids_t in (pa.int64(), pa.uint32(), pa.uint64(), pa.float64())
    cols = {"input_ids": [], "attention_mask": [], "other": []}
    if label_col:
        cols[label_col] = []
    kinds = ["good"] * 12 + [
        "null_ids",
        "null_elem",
        "empty",
        "null_row_label",
        "null_elem_label",
        "label_len",
        "shift",
        "minus_one",
        "mask_len",
        "mask_zero",
        "mask_all_zero",
        "mask_null",
        "mask_null_elem",
        "stray_label",
    ]
    if signed:
        kinds.append("negative")
    if wide:
        kinds.append("too_big")
    if floating:
        kinds += ["half", "nan", "inf"]
    if lab_t is not None and pa.types.is_floating(lab_t):
        kinds.append("label_half")
    if mask_t is not None and pa.types.is_floating(mask_t):
        kinds.append("mask_half")
    for _ in range(n):
        kind = kinds[rng.integers(len(kinds))]
        m = int(rng.integers(1, 12))
        ids = rng.integers(0, _top(ids_t), m).tolist()
        if pa.types.is_boolean(ids_t):
            ids = [bool(x) for x in ids]
        if floating:
            ids = [float(x) for x in ids]
        j = int(rng.integers(m))
        if label_col == "labels":
            lab = [IGNORE if rng.random() < 0.4 else int(x) for x in ids]
        else:
            lab = rng.integers(0, 2, m).tolist()
        att = [1] * m
        if kind == "null_ids":
            ids = None
        elif kind == "null_elem":
            ids[j] = None
        elif kind == "empty":
            ids, lab, att = [], [], []
        elif kind == "negative":
            ids[j] = -1 - int(rng.integers(5))
        elif kind == "too_big":
            ids[j] = INT32_MAX + 1 + int(rng.integers(5))
            ids[j] = float(ids[j]) if floating else ids[j]
        elif kind == "half":
            ids[j] = 1.5
        elif kind == "nan":
            ids[j] = float("nan")
        elif kind == "inf":
            ids[j] = float("inf")
        elif kind == "null_row_label":
            lab = None
        elif kind == "null_elem_label":
            lab[j] = None
        elif kind == "label_len":
            lab = lab[:-1] if rng.random() < 0.5 else lab + lab[:1]
        elif kind == "shift" and label_col == "labels":
            lab[j] = int(ids[j]) + 1
        elif kind == "minus_one" and label_col == "labels":
            lab[j] = -1
        elif kind == "label_half":
            lab[j] = 0.5
        elif kind == "mask_len":
            att = att + [1]
        elif kind == "mask_zero":
            att = [0 if rng.random() < 0.4 else 1 for _ in range(m)]
        elif kind == "mask_all_zero":
            att = [0] * m
        elif kind == "mask_null":
            att = None
        elif kind == "mask_null_elem":
            att[j] = None
        elif kind == "mask_half":
            att[j] = 0.5
        if lab_t is not None and lab is not None:
            if pa.types.is_boolean(lab_t):
                lab = [None if x is None else bool(x) for x in lab]
            elif pa.types.is_floating(lab_t):
                lab = [None if x is None else float(x) for x in lab]
        if mask_t is not None and att is not None:
            if pa.types.is_boolean(mask_t):
                att = [None if x is None else bool(x) for x in att]
            elif pa.types.is_floating(mask_t):
                att = [None if x is None else float(x) for x in att]
        cols["input_ids"].append(ids)
        if label_col:
            cols[label_col].append(lab if kind != "stray_label" or rng.random() < 0.5 else None)
        cols["attention_mask"].append(att)
        cols["other"].append(kind)
    if not attention:
        del cols["attention_mask"]
    return cols


def to_batch(cols: dict, ids_t, lab_t, mask_t, label_col, container) -> pa.RecordBatch:
    arrays, names = [], []
    for name, values in cols.items():
        if name == "other":
            arrays.append(pa.array(values))
        else:
            t = ids_t if name == "input_ids" else lab_t if name == label_col else mask_t
            arrays.append(pa.array(values, container(t)))
        names.append(name)
    return pa.record_batch(arrays, names=names)


N_SEEDS = 40
KINDS = [
    r"^no input_ids \(keys",
    r"^input_ids holds object",
    r"^input_ids\[\d+\] = -?\d+ is not a token id",
    r"^input_ids\[\d+\] = (nan|inf|1\.5) is not a whole",
    r"^empty input_ids$",
    r"^labels has \d+ entries",
    r"^labels\[\d+\] = -?\d+ but input_ids",
    r"^labels holds object",
    r"^labels\[\d+\] = 0\.5 is not a whole",
    r"^attention_mask has",
    r"^attention_mask holds object",
    r"^attention_mask\[\d+\] = 0\.5 is not",
    r"^has labels but",
    r"^has completion_mask but",
    r"^has assistant_masks but",
    r"^no labels although",
    r"^no completion_mask although",
    r"^completion_mask has",
    r"^assistant_masks holds object",
]


def draw(seed: int):
    rng = np.random.default_rng(seed)
    label_col = [None, "labels", "completion_mask", "assistant_masks"][seed % 4]
    k = seed // 4  # every id type meets every label column
    ids_t = ID_TYPES[k % len(ID_TYPES)]
    lab_t = (
        LABEL_TYPES[k % len(LABEL_TYPES)]
        if label_col == "labels"
        else MASK_TYPES[k % len(MASK_TYPES)]
    )
    if label_col is None:
        lab_t = None
    mask_t = MASK_TYPES[(seed // 3) % len(MASK_TYPES)]
    container = [pa.list_, pa.large_list][(seed // 2) % 2]
    cols = random_rows(rng, 300, ids_t, lab_t, mask_t, label_col, seed % 5 != 0)
    return rng, to_batch(cols, ids_t, lab_t, mask_t, label_col, container), label_col


@pytest.mark.parametrize("seed", range(N_SEEDS))
def test_differential(seed):
    rng, batch, label_col = draw(seed)
    sources = [label_source_of(batch.schema.names)]
    if label_col is not None:
        sources.append("all")  # a label column the first record did not have
    else:
        sources.append("labels")  # the first record had labels; these have none
    for source in sources:
        v = check(batch, source)
        assert v.rejects and (source == "labels" and label_col is None or v.keep.size)
        # sliced (array offset != 0) and chunked Tables give the same answer
        a, b = int(rng.integers(1, 50)), int(rng.integers(200, 299))
        check(batch.slice(a, b - a), source)
        table = pa.Table.from_batches([batch.slice(0, a), batch.slice(a, b - a), batch.slice(b)])
        assert table.column("input_ids").num_chunks == 3
        check(table, source)
        # JSON records through records_batch: the same rows and messages
        records = [
            {k: v for k, v in r.items() if v is not None or k == "other"} for r in batch.to_pylist()
        ]
        assert_same(records_batch(records, source), records, source)


def test_differential_draws_every_kind():
    """The generator reaches every kind of message, so the differential test compares them all."""
    import re

    seen = set()
    for seed in range(N_SEEDS):
        _, batch, label_col = draw(seed)
        for source in (label_source_of(batch.schema.names), "all" if label_col else "labels"):
            seen.update(m for _, m in validate_batch(batch, source).rejects)
    missing = [k for k in KINDS if not any(re.match(k, m) for m in seen)]
    assert not missing


# ------------------------------------------------------------------------------------------------
# every message
# ------------------------------------------------------------------------------------------------


def one(source="labels", **cols) -> list[tuple[int, str]]:
    batch = pa.record_batch(
        {k: pa.array(v) if not isinstance(v, pa.Array) else v for k, v in cols.items()}
    )
    v = check(batch, source)
    return v.rejects


@pytest.mark.parametrize(
    ("cols", "source", "message"),
    [
        (
            {"input_ids": [[1, 2, 3], None], "labels": [[1, 2, 3], [1]]},
            "labels",
            r"^no input_ids \(keys: input_ids, labels\)$",
        ),
        ({"text": ["a", "b"]}, "all", r"^no input_ids \(keys: text\)$"),
        (
            {"input_ids": [[1, None, 3], [1]]},
            "all",
            r"^input_ids holds object values, not integers$",
        ),
        (
            {"input_ids": [[1.0, 1.5], [1.0]]},
            "all",
            r"^input_ids\[1\] = 1\.5 is not a whole number$",
        ),
        (
            {"input_ids": [[float("nan")], [1.0]]},
            "all",
            r"^input_ids\[0\] = nan is not a whole number$",
        ),
        (
            {"input_ids": [[1, 2], [-2]]},
            "all",
            r"^input_ids\[0\] = -2 is not a token id \(0\.\.2\^31-1\)$",
        ),
        (
            {"input_ids": [[1, 2**31], [1]]},
            "all",
            r"^input_ids\[1\] = 2147483648 is not a token id",
        ),
        (
            {"input_ids": [[1, 2], [1]], "labels": [[1, 2], None]},
            "labels",
            r"^no labels although the first record has them \(keys: input_ids, labels\)$",
        ),
        (
            {"input_ids": [[1, 2], [1]]},
            "completion_mask",
            r"^no completion_mask although the first record has them \(keys: input_ids\)$",
        ),
        (
            {"input_ids": [[1, 2, 3, 4], [1]], "labels": [[1, 2, 3], [1]]},
            "labels",
            r"^labels has 3 entries for 4 input_ids$",
        ),
        (
            {"input_ids": [[1, 2, 3, 12], [1]], "labels": [[1, 2, 3, 17], [1]]},
            "labels",
            r"^labels\[3\] = 17 but input_ids\[3\] = 12: labels must be -100 or equal to their input id "
            r"\(unshifted Hugging Face labels; they look pre-shifted or use another ignore index\)$",
        ),
        (
            {"input_ids": [[1, 2, 3], [1]], "labels": [[-1, 2, 3], [1]]},
            "labels",
            r"^labels\[0\] = -1 .*ignore index",
        ),
        (
            {"input_ids": [[1, 2], [1]], "labels": [[1, None], [1]]},
            "labels",
            r"^labels holds object values",
        ),
        (
            {"input_ids": [[1, 2], [1]], "labels": [[1, 2.5], [1]]},
            "labels",
            r"^labels\[1\] = 2\.5 is not a whole",
        ),
        (
            {"input_ids": [[1, 2], [1]], "labels": [[1, 2], None]},
            "all",
            r"^has labels but the first record has no label column; give every record the same columns$",
        ),
        (
            {"input_ids": [[1, 2], [1]], "assistant_masks": [[1, 0], None]},
            "all",
            r"^has assistant_masks but",
        ),
        (
            {"input_ids": [[1, 2], [1]], "completion_mask": [[1], [1]]},
            "completion_mask",
            r"^completion_mask has 1 entries for 2 input_ids$",
        ),
        (
            {"input_ids": [[1, 2], [1]], "attention_mask": [[1], [1]]},
            "all",
            r"^attention_mask has 1 entries for 2 input_ids$",
        ),
        (
            {"input_ids": [[1, 2], [1]], "attention_mask": [[1, None], [1]]},
            "all",
            r"^attention_mask holds object values",
        ),
        (
            {"input_ids": [[1, 2], [1]], "attention_mask": [[0, 0], [1]]},
            "all",
            r"^empty input_ids$",
        ),
        ({"input_ids": [[], [1]]}, "all", r"^empty input_ids$"),
        (
            {"input_ids": [[[1, 2], [3, 4]], []]},
            "all",
            r"^input_ids is not a flat list of integers \(it has 2 dimensions\)$",
        ),
        (
            {"input_ids": [[[1, 2], [3]], []]},
            "all",
            r"^input_ids is not a flat list of integers \(.*inhomogeneous",
        ),
        ({"input_ids": [["a", "b"], []]}, "all", r"^input_ids holds <U1 values, not integers$"),
        (
            {"input_ids": [[1, 2], [1]], "labels": [["x", "yy"], ["z"]]},
            "labels",
            r"^labels holds <U2 values",
        ),
        (
            {"input_ids": [[1, 2], [1]], "attention_mask": [[[1], [1]], [[1]]]},
            "all",
            r"^attention_mask is not a flat list of integers \(it has 2 dimensions\)$",
        ),
        (
            {"input_ids": ["abc", "d"]},
            "all",
            r"^input_ids is not a flat list of integers \(it has 0 dimensions\)$",
        ),
    ],
)
def test_messages(cols, source, message):
    rejects = one(source, **cols)
    from re import match

    assert any(match(message, m) for _, m in rejects), rejects


def test_message_positions_are_per_row():
    """The first offending position is counted from the start of its own row, one message per row."""
    ids = [[5, 6, 7], [1, 2, 3, 4], [9], [3, 4]]
    labels = [[5, 6, 7], [1, 9, 9, 4], [8], [-100, 5]]
    rejects = one("labels", input_ids=ids, labels=labels)
    assert [r for r, _ in rejects] == [1, 2, 3]
    assert rejects[0][1].startswith("labels[1] = 9 but input_ids[1] = 2:")
    assert rejects[1][1].startswith("labels[0] = 8 but input_ids[0] = 9:")
    assert rejects[2][1].startswith("labels[1] = 5 but input_ids[1] = 4:")


def test_first_failing_check_wins():
    """A row bad in several ways gets the message of the check the record path makes first."""
    batch = pa.record_batch(
        {
            "input_ids": pa.array([[1, -1], [1, 2], [1, 2], [1.5, 2]], pa.list_(pa.float64())),
            "labels": pa.array([[9], [9], [9, 9], [1]]),
            "attention_mask": pa.array([[1], [1], [1], [1]]),
        }
    )
    msgs = [m for _, m in check(batch, "labels").rejects]
    assert msgs[0].startswith("input_ids[1] = -1 is not a token id")
    assert msgs[1] == "labels has 1 entries for 2 input_ids"
    assert msgs[2].startswith("labels[0] = 9 but input_ids[0] = 1")
    assert msgs[3] == "input_ids[0] = 1.5 is not a whole number"


# ------------------------------------------------------------------------------------------------
# layouts and types
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "t",
    [
        pa.int64(),
        pa.int32(),
        pa.uint16(),
        pa.int8(),
        pa.uint64(),
        pa.float64(),
        pa.float32(),
        pa.float16(),
        pa.bool_(),
    ],
)
@pytest.mark.parametrize("container", [pa.list_, pa.large_list])
def test_value_types(t, container):
    ids = [[1, 0, 1], [0], [1, 1]]
    labels = [[-100, 0, 1], [0], [1, -100]]
    cast = bool if pa.types.is_boolean(t) else float if pa.types.is_floating(t) else int
    col = pa.array([[cast(x) for x in r] for r in ids], container(t))
    batch = pa.record_batch({"input_ids": col, "labels": pa.array(labels)})
    v = check(batch, "labels")
    assert v.table.column("input_ids").to_pylist() == ids and v.keep.tolist() == [0, 1, 2]
    assert v.table.column("num_loss_tokens").to_pylist() == [2, 1, 1]
    check(pa.record_batch({"input_ids": col}), "all")


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")
def test_uint64_wraps_like_the_record_path():
    col = pa.array([[1, 2**63], [2**64 - 1], [3]], pa.list_(pa.uint64()))
    v = check(pa.record_batch({"input_ids": col}), "all")
    assert v.rejects[0][1] == f"input_ids[1] = {-(2**63)} is not a token id (0..2^31-1)"
    assert v.rejects[1][1] == "input_ids[0] = -1 is not a token id (0..2^31-1)"


def test_fixed_size_list_and_masks():
    ids = pa.array([[1, 2, 3], [4, 5, 6], [7, 8, 9], [1, 1, 1]], pa.list_(pa.int64(), 3))
    cm = pa.array([[0, 1, 1], [0, 0, 0], [1, 1, 1], [1, 2, 1]], pa.list_(pa.int8(), 3))
    att = pa.array([[True, True, False], [True] * 3, [False] * 3, None], pa.list_(pa.bool_(), 3))
    batch = pa.record_batch({"input_ids": ids, "completion_mask": cm, "attention_mask": att})
    v = check(batch, "completion_mask")
    assert v.table.to_pydict() == {
        "input_ids": [[1, 2], [4, 5, 6], [1, 1, 1]],
        "labels": [[-100, 2], [-100, -100, -100], [1, 1, 1]],
        "length": [2, 3, 3],
        "num_loss_tokens": [1, 0, 3],
    }
    assert v.rejects == [(2, EMPTY)] and v.removed_padding == 1
    check(batch.slice(1), "completion_mask")
    check(pa.record_batch({"input_ids": ids, "assistant_masks": cm}).slice(1, 2), "assistant_masks")


def test_other_list_layouts():
    """Null rows of a fixed_size_list, dictionary-encoded values, list_view (record by record)."""
    fixed = pa.array([[1, 2], None, [3, -4], [5, 6]], pa.list_(pa.int16(), 2))
    v = check(pa.record_batch({"input_ids": fixed}), "all")
    assert v.keep.tolist() == [0, 3] and [r for r, _ in v.rejects] == [1, 2]
    dict_values = pa.ListArray.from_arrays(
        pa.array([0, 2, 3], pa.int32()), pa.array([7, 8, 7]).dictionary_encode()
    )
    v = check(pa.record_batch({"input_ids": dict_values}), "all")
    assert v.table.column("input_ids").to_pylist() == [[7, 8], [7]]
    view = pa.array([[1, 2], None, [3]], pa.list_view(pa.int64()))
    v = check(
        pa.record_batch({"input_ids": view, "labels": pa.array([[1, -100], [1], [4]])}), "labels"
    )
    assert v.keep.tolist() == [0]


def test_null_rows_with_values_behind_them():
    """Arrow allows a null list row to span values; they must not count for any row."""
    offsets = pa.array([0, 2, 5, 7], pa.int32())
    ids = pa.ListArray.from_arrays(
        offsets, pa.array([1, 2, -7, 3, 4, 5, 6], pa.int64()), mask=pa.array([False, True, False])
    )
    labels = pa.ListArray.from_arrays(pa.array([0, 2, 2, 4], pa.int32()), pa.array([1, 2, 5, 6]))
    att = pa.ListArray.from_arrays(
        pa.array([0, 2, 6, 8], pa.int32()),
        pa.array([1, 1, 0, 0, 0, 0, 1, 1]),
        mask=pa.array([False, True, False]),
    )
    batch = pa.record_batch({"input_ids": ids, "labels": labels, "attention_mask": att})
    v = check(batch, "labels")
    assert v.keep.tolist() == [0, 2] and v.rejects[0][1].startswith("no input_ids")
    att2 = pa.ListArray.from_arrays(
        pa.array([0, 2, 2, 5], pa.int32()),
        pa.array([1, 1, 0, 0, 0]),
        mask=pa.array([False, False, True]),
    )
    ids2 = pa.array([[1, 2], [3], [4, 5]])
    check(pa.record_batch({"input_ids": ids2, "attention_mask": att2}), "all")


def test_misaligned_offsets():
    """Label rows laid out differently from the id rows (one row too short shifts all after it)."""
    rng = np.random.default_rng(5)
    ids, labels = [], []
    for i in range(400):
        m = int(rng.integers(1, 9))
        r = rng.integers(0, 50, m).tolist()
        lab = [x if rng.random() < 0.7 else IGNORE for x in r]
        if i % 97 == 3:
            lab = lab[:-1]
        if i % 7 == 0:
            lab[0] = r[0] + 1
        ids.append(r)
        labels.append(lab)
    batch = pa.record_batch(
        {"input_ids": pa.array(ids), "labels": pa.array(labels, pa.list_(pa.int32()))}
    )
    check(batch, "labels")
    many = [lab[:-1] if i % 3 == 0 and len(lab) > 1 else lab for i, lab in enumerate(labels)]
    check(pa.record_batch({"input_ids": pa.array(ids), "labels": pa.array(many)}), "labels")


def test_chunked_table_and_empty_inputs():
    table = pa.Table.from_batches(
        [
            pa.record_batch({"input_ids": pa.array([[1, 2], [3]], pa.list_(pa.int32()))}),
            pa.record_batch({"input_ids": pa.array([[4], []], pa.list_(pa.int32()))}),
        ]
    )
    v = check(table, "all")
    assert v.keep.tolist() == [0, 1, 2] and v.rejects == [(3, EMPTY)]
    empty = validate_batch(table.slice(0, 0), "all")
    assert empty.table.num_rows == 0 and empty.rejects == [] and empty.keep.dtype == np.int64
    assert {f.name: f.type for f in empty.table.schema} == OUT_TYPES
    bad = check(pa.record_batch({"input_ids": pa.nulls(2)}), "all")
    assert [m for _, m in bad.rejects] == ["no input_ids (keys: input_ids)"] * 2


def test_zero_copy_int32():
    ids = pa.array([[1, 2, 3], [4, 5], [6]], pa.list_(pa.int32()))
    labels = pa.array([[-100, 2, 3], [4, -100], [6]], pa.list_(pa.int32()))
    batch = pa.record_batch({"input_ids": ids, "labels": labels})
    v = check(batch, "labels")
    out_ids, out_labels = v.table.column("input_ids"), v.table.column("labels")
    assert out_ids.buffers()[3].address == ids.buffers()[3].address
    assert out_labels.buffers()[3].address == labels.buffers()[3].address
    assert out_ids.type == pa.list_(pa.int32()) and out_ids.offsets.type == pa.int32()
    # sliced input: still the same buffer
    s = check(batch.slice(1), "labels")
    assert s.table.column("input_ids").buffers()[3].address == ids.buffers()[3].address
    # "all": labels are the ids
    a = check(pa.record_batch({"input_ids": ids}), "all")
    assert a.table.column("labels").buffers()[3].address == ids.buffers()[3].address
    # a bad row, or int64 input: a new int32 buffer
    for b in (
        pa.record_batch({"input_ids": pa.array([[1], [-1], [2]], pa.list_(pa.int32()))}),
        pa.record_batch({"input_ids": pa.array([[1], [2]], pa.list_(pa.int64()))}),
    ):
        out = check(b, "all").table.column("input_ids")
        assert out.buffers()[3].address != b.column(0).buffers()[3].address


def test_records_batch_falls_back_on_mixed_types():
    records = [
        {"input_ids": [1, 2, 3], "labels": [1, -100, 3], "text": "x"},
        {"input_ids": [1, True], "labels": [1, 1]},  # Arrow will not build this column
        {"input_ids": [1, 2.5], "labels": [1, 2]},
        {"input_ids": [4, 5]},
        {"labels": [1]},
        {"input_ids": [2**64], "labels": [1]},
    ]
    v = records_batch(records, "labels")
    assert_same(v, records, "labels")
    assert v.keep.tolist() == [0, 1]
    assert dict(v.rejects)[3] == "no labels although the first record has them (keys: input_ids)"
    assert dict(v.rejects)[4] == "no input_ids (keys: labels)"
    # the keys in messages are each record's own
    rs = [
        {"input_ids": [1], "labels": [1]},
        {"input_ids": None, "meta": 1},
        {"input_ids": [[1]], "z": 0},
    ]
    v = records_batch(rs, "labels")
    assert_same(v, rs, "labels")
    assert v.rejects[0][1] == "no input_ids (keys: input_ids, meta)"
    assert v.rejects[1][1] == "input_ids is not a flat list of integers (it has 2 dimensions)"
    for rs in (
        [],
        [{"x": 1}],
        [{"input_ids": []}, {"input_ids": [1]}],
        [{"input_ids": [[1], [2]]}],
    ):
        assert_same(records_batch(rs, "all"), rs, "all")


def test_label_sources():
    assert label_source_of(["input_ids", "assistant_masks", "labels"]) == "labels"
    assert label_source_of(("attention_mask", "input_ids", "completion_mask")) == "completion_mask"
    assert label_source_of(iter(["input_ids", "assistant_masks"])) == "assistant_masks"
    assert label_source_of(["input_ids"]) == label_source_of({"input_ids": [1]}) == "all"


def test_big_random_batch_against_records():
    """Larger rows and a few bad ones: the runs-of-good-rows copy and the boolean path."""
    rng = np.random.default_rng(11)
    n = 3000
    lens = rng.integers(0, 300, n)
    ids = [rng.integers(0, 50_000, m).tolist() for m in lens]
    labels = [[x if rng.random() < 0.5 else IGNORE for x in r] for r in ids]
    for i in rng.choice(n, 20, replace=False).tolist():
        if labels[i]:
            labels[i][-1] = 7 if ids[i][-1] != 7 else 8
    batch = pa.record_batch(
        {"input_ids": pa.array(ids, pa.list_(pa.int64())), "labels": pa.array(labels)}
    )
    check(batch, "labels")
    for i in rng.choice(n, 200, replace=False).tolist():
        if labels[i]:
            labels[i][0] = -5
    check(
        pa.record_batch(
            {"input_ids": pa.array(ids, pa.list_(pa.int64())), "labels": pa.array(labels)}
        ),
        "labels",
    )
    att = [[int(rng.random() < 0.9) for _ in r] for r in ids]
    check(
        pa.record_batch(
            {"input_ids": pa.array(ids, pa.list_(pa.int32())), "attention_mask": pa.array(att)}
        ),
        "all",
    )


def speed(n: int = 100_000, sample: int = 10_000) -> None:
    import time

    rng = np.random.default_rng(0)
    lens = np.clip(np.round(rng.lognormal(np.log(450), 0.9, n)), 1, 32768).astype(np.int64)
    off = np.zeros(n + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    total = int(off[-1])
    ids = rng.integers(0, 151_643, total, dtype=np.int64)
    pos = np.arange(total) - np.repeat(off[:-1], lens)
    labels = np.where(pos >= np.repeat((lens * 0.3).astype(np.int64), lens), ids, IGNORE)
    o32 = pa.array(off.astype(np.int32))
    batch = pa.record_batch(
        [
            pa.ListArray.from_arrays(o32, pa.array(ids)),
            pa.ListArray.from_arrays(o32, pa.array(labels)),
        ],
        names=["input_ids", "labels"],
    )
    int32 = batch.cast(
        pa.schema([("input_ids", pa.list_(pa.int32())), ("labels", pa.list_(pa.int32()))])
    )
    for name, b in (("int64", batch), ("int32", int32)):
        best = float("inf")
        for _ in range(3):
            t = time.perf_counter()
            validate_batch(b, "labels")
            best = min(best, time.perf_counter() - t)
        print(
            f"validate_batch {name}: {n:,} rows, {total:,} tokens in {best * 1e3:.0f} ms: "
            f"{n / best:,.0f} rows/s, {total / best / 1e6:.1f} M tokens/s"
        )
    records = batch.slice(0, sample).to_pylist()
    tok = int(lens[:sample].sum())
    t = time.perf_counter()
    for r in records:
        record_arrays(r, "labels")
    dt = time.perf_counter() - t
    print(
        f"record_arrays per record (to_pylist not counted): {sample:,} rows in {dt * 1e3:.0f} ms: "
        f"{sample / dt:,.0f} rows/s, {tok / dt / 1e6:.1f} M tokens/s"
    )
    t = time.perf_counter()
    records_batch(records, "labels")
    dt = time.perf_counter() - t
    print(
        f"records_batch on the same dicts: {sample / dt:,.0f} rows/s, {tok / dt / 1e6:.1f} M tokens/s"
    )


if __name__ == "__main__":
    speed()
