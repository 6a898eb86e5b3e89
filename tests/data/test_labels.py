"""packtool.data.labels: a loss mask gives back exactly the labels it replaced, and every reader's
accessor answers the same for either storage."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from packtool.data import labels
from packtool.data.tokenized import token_batch


def _batch(seed: int = 0, rows: int = 30, start: int = 0):
    rng = np.random.default_rng(seed)
    lens = rng.integers(1, 40, rows)
    off = np.concatenate([[0], np.cumsum(lens)])
    ids = rng.integers(0, 500, off[-1]).astype(np.int32)
    lab = np.where(rng.random(off[-1]) < 0.4, -100, ids).astype(np.int32)
    return token_batch(ids, lab, off, np.arange(rows) + start)


def _masked(table):
    return pa.Table.from_batches([labels.masked_batch(b) for b in table.to_batches()])


def test_the_mask_round_trips_exactly_even_sliced_and_chunked():
    plain = pa.Table.from_batches([_batch(0), _batch(1, start=30), _batch(2, start=60)])
    masked = _masked(plain)
    assert labels.stored(masked) == "loss_mask" and labels.stored(plain) == "labels"
    assert masked.column("loss_mask").type == pa.list_(pa.bool_())
    assert labels.with_labels(masked).equals(plain)
    part = masked.slice(17, 50)  # across chunks, not at a row boundary of any
    assert (
        labels.labels_column(part).to_pylist() == plain.column("labels").slice(17, 50).to_pylist()
    )


def test_a_label_neither_its_id_nor_ignored_has_no_mask():
    b = _batch()
    off, ids = labels.flat(b.column("input_ids"))
    lab = np.where(np.arange(ids.size) == 5, ids + 1, ids).astype(np.int32)  # position 5: shifted
    assert labels.masked_batch(token_batch(ids, lab, off, np.arange(30))) is None
    lab[5] = -99
    assert labels.masked_batch(token_batch(ids, lab, off, np.arange(30))) is None
    lab[5] = -100
    assert labels.masked_batch(token_batch(ids, lab, off, np.arange(30))) is not None


def test_the_accessors_agree_for_both_storages():
    plain = pa.Table.from_batches([_batch(3), _batch(4, start=30)])
    masked = _masked(plain)
    rows = np.array([0, 7, 29, 30, 31, 59])
    want = plain.column("labels").take(pa.array(rows)).to_pylist()
    for t in (plain, masked):
        assert labels.take_labels(t, rows).to_pylist() == want
        for start in (0, 3, 20):
            got = labels.loss_after(t, rows, start)
            ref = [sum(x != -100 for x in r[start:]) for r in want]
            assert got.tolist() == ref


def test_a_mixture_of_a_masked_and_a_labels_entry_combines_as_labels():
    from packtool.config import InputSpec, TokenizeConfig
    from packtool.data.tokenized import TokenizedData
    from packtool.tokenization.mixture import combine

    plain = [pa.Table.from_batches([_batch(5)]), pa.Table.from_batches([_batch(6)])]
    parts = [
        TokenizedData.from_table(_masked(plain[0]), num_read=30),
        TokenizedData.from_table(plain[1], num_read=30),
    ]
    specs = [InputSpec(spec=x, data=x) for x in ("a.parquet", "b.parquet")]
    td = combine(specs, parts, 0, TokenizeConfig())
    want = plain[0].column("labels").to_pylist() + plain[1].column("labels").to_pylist()
    assert labels.stored(td.table) == "labels" and td.labels().to_pylist() == want


def test_labels_from_a_mask_are_exact_for_every_int32_id():
    ids = np.array([0, 1, 5, 150_000, 2**31 - 101, 2**31 - 100, 2**31 - 1] * 2, dtype=np.int32)
    mask = np.array([1] * 7 + [0] * 7, dtype=np.uint8)
    want = np.where(mask == 1, ids, -100).astype(np.int32)
    assert np.array_equal(labels.labels_from_mask(ids, mask), want)


def test_mask_bits_honour_the_bit_offset_of_a_sliced_boolean_array():
    rng = np.random.default_rng(7)
    mask = rng.random(203) < 0.5
    arr = labels.packed_mask(mask)
    assert arr.type == pa.bool_() and arr.to_pylist() == mask.tolist()
    for start, n in ((0, 203), (1, 9), (3, 64), (7, 1), (13, 150), (200, 3), (50, 0)):
        got = labels.mask_bits(arr.slice(start, n))
        assert (
            got.dtype == np.uint8 and got.tolist() == mask[start : start + n].astype(int).tolist()
        )


def test_a_list_of_uint8_mask_reads_as_the_same_labels():
    """A byte-a-token mask (cache format 3) gives the same labels as the bit mask."""
    plain = pa.Table.from_batches([_batch(8), _batch(9, start=30)])
    bits = _masked(plain)
    col = bits.schema.get_field_index("loss_mask")
    as_bytes = bits.set_column(
        col, "loss_mask", bits.column("loss_mask").cast(pa.list_(pa.uint8()))
    )
    for t in (bits, as_bytes):
        assert labels.labels_column(t).to_pylist() == plain.column("labels").to_pylist()
