"""schema/shard.py: the one shard-schema check (on the v1 fixture's shard and damaged schemas), the
row layout (--pad-to-multiple, --fixed-docs: slots per document, what a manifest records, default
layouts keeping earlier packs' bytes), and the segment rule (documents, then the pad tail as its own
segment) against the writer's kernel, slot for slot over a grid of rows."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from paths import TESTS

from packtool import schema
from packtool.pack.gather import layout_rows

SHARD = TESTS / "fixtures" / "v1_pack" / "data" / "train-00000-of-00001.parquet"


def test_a_written_shard_matches_the_schema():
    got = pq.ParquetFile(SHARD).schema_arrow
    assert schema.pack_len_of(got) == 2048
    assert schema.shard_schema_problems(got, 2048) == []
    assert got.names == list(schema.COLUMNS)


def test_problems_are_named():
    good = schema.arrow_schema(16)
    assert schema.shard_schema_problems(good, 32) == [
        f"column {c} is fixed_size_list<item: int32>[16], expected fixed_size_list<item: int32>[32]"
        for c in schema.TOKEN_COLUMNS
    ]
    masked = good.append(pa.field("attention_mask", pa.list_(pa.int8(), 16)))
    assert (
        schema.shard_schema_problems(masked, 16)[0]
        == "forbidden column 'attention_mask' (schema v1 has none)"
    )
    dropped = good.remove(good.get_field_index("labels"))
    assert schema.shard_schema_problems(dropped, 16) == ["column labels is missing"]
    extra = good.append(pa.field("weights", pa.float32()))
    assert schema.shard_schema_problems(extra, 16) == ["unexpected columns ['weights']"]
    v2 = good.with_metadata({b"packtool_schema_version": b"2"})
    assert schema.shard_schema_problems(v2, 16) == ["schema version 2 != 1"]
    assert schema.pack_len_of(pa.schema([pa.field("x", pa.int32())])) is None


def test_padded_packs_have_seq_lengths_unpadded_and_only_they():
    padded = schema.arrow_schema(16, padded=True)
    assert padded.names == [*schema.arrow_schema(16).names, schema.UNPADDED_COLUMN]
    assert schema.shard_schema_problems(padded, 16, padded=True) == []
    assert schema.shard_schema_problems(schema.arrow_schema(16), 16, padded=True) == [
        "column seq_lengths_unpadded is missing"
    ]
    assert schema.shard_schema_problems(padded, 16) == [
        "unexpected columns ['seq_lengths_unpadded']"
    ]


V1 = TESTS / "fixtures" / "v1_pack"


def _v1() -> dict:
    return json.loads((V1 / "manifest.json").read_text())


def test_slots_round_each_document_up_to_the_multiple():
    lay = schema.Layout(pad_to_multiple=8)
    assert lay.slots([1, 7, 8, 9, 16, 0]).tolist() == [8, 8, 8, 16, 16, 0]
    assert lay.padded and lay != schema.Layout()
    assert schema.Layout().slots(np.array([3, 5])).tolist() == [3, 5]
    assert not schema.Layout().padded and not schema.Layout().fixed_docs


def test_layout_from_manifest():
    assert schema.Layout.from_manifest(_v1()) == schema.Layout()  # written before the options
    m = {"pad_to_multiple": 8, "fixed_docs": True, "max_docs": 16}
    assert schema.Layout.from_manifest(m) == schema.Layout(8, 16)
    assert schema.Layout.from_manifest({"fixed_docs": False, "max_docs": 16}).fixed_docs == 0
    # damaged values count as the default (the manifest check reports them)
    assert schema.Layout.from_manifest({"pad_to_multiple": "8", "fixed_docs": 1}) == schema.Layout()
    assert schema.Layout.from_manifest(None) == schema.Layout()


def test_layout_fields_round_trip_and_default_manifests_keep_their_keys():
    d = _v1()
    m = schema.Manifest.from_json(d)
    assert m.pad_to_multiple == 1 and m.fixed_docs is False and m.tokens.doc_pad is None
    out = m.to_json()
    assert list(out) == list(d) and "doc_pad" not in out["tokens"]  # default: nothing new written
    d2 = dict(d, pad_to_multiple=8, fixed_docs=True)
    d2["tokens"] = dict(d["tokens"], doc_pad=12)
    m2 = schema.Manifest.from_json(d2)
    assert (m2.pad_to_multiple, m2.fixed_docs, m2.tokens.doc_pad) == (8, True, 12)
    assert m2.to_json() == d2


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("pad_to_multiple", "8", "pad_to_multiple is not an integer"),
        ("pad_to_multiple", True, "pad_to_multiple is not an integer"),
        ("fixed_docs", 1, "fixed_docs is not true or false"),
    ],
)
def test_bad_layout_values_are_named(key, value, match):
    with pytest.raises(schema.ManifestError, match=match):
        schema.Manifest.from_json(dict(_v1(), **{key: value}))


def test_conservation_bounds_the_padding_inside_documents():
    d = _v1()
    t = dict(d["tokens"], doc_pad=d["tokens"]["pad"])
    assert schema.conservation_problems(d["counts"], t) == []
    t["doc_pad"] = d["tokens"]["pad"] + 1
    assert any(
        "doc_pad" in p and "> tokens.pad" in p for p in schema.conservation_problems(d["counts"], t)
    )
    t["doc_pad"] = -1
    assert any(
        "doc_pad -1 is not a count" in p for p in schema.conservation_problems(d["counts"], t)
    )


def _kernel_row(seq_lengths: list[int], pack_len: int, real: list[int] | None = None):
    """position_ids and document_id of one row as layout_rows writes them (`real`: the
    documents' unpadded lengths, seq_lengths being their slots)."""
    k = len(seq_lengths)
    row_offsets = np.array([0, k], dtype=np.int64)
    doc_order = np.arange(k, dtype=np.int64)
    slot_len = np.array(seq_lengths, dtype=np.int64)
    piece_len = slot_len if real is None else np.array(real, dtype=np.int64)
    bufs = [np.full((1, pack_len), 99, dtype=np.int32) for _ in range(4)]
    *_, num_tokens = layout_rows(
        np.zeros(1, np.int64),
        row_offsets,
        doc_order,
        piece_len,
        slot_len,
        *bufs,
        7,
        schema.IGNORE_INDEX,
    )
    assert int(num_tokens[0]) == int(piece_len.sum())  # num_tokens counts real tokens only
    ids, labels, pos, doc = (b[0] for b in bufs)
    return pos, doc, ids, labels


GRID = [([4, 3], 9), ([9], 9), ([1], 9), ([2, 2, 2, 2], 8), ([1, 1, 1], 5), ([5, 1], 64), ([3], 3)]


@pytest.mark.parametrize("seq_lengths,pack_len", GRID)
def test_kernel_lays_rows_out_by_the_rule(seq_lengths, pack_len):
    pos, doc, ids, labels = _kernel_row(seq_lengths, pack_len)
    assert pos.tolist() == schema.position_ids(seq_lengths, pack_len).tolist()
    assert doc.tolist() == schema.document_ids(seq_lengths, pack_len).tolist()
    tail = pack_len - sum(seq_lengths)
    assert ids[pack_len - tail :].tolist() == [7] * tail
    assert labels[pack_len - tail :].tolist() == [schema.IGNORE_INDEX] * tail


def test_random_rows_closed_forms():
    rng = np.random.default_rng(3)
    for _ in range(300):
        pack_len = int(rng.integers(1, 200))
        lens, left = [], pack_len
        while left and rng.random() < 0.8:
            n = int(rng.integers(1, left + 1))
            lens.append(n)
            left -= n
        if not lens:
            lens = [pack_len]
        segs = schema.row_segments(lens, pack_len)
        assert sum(segs) == pack_len and segs[: len(lens)] == lens
        assert len(segs) == len(lens) + (sum(lens) < pack_len)
        pos = schema.position_ids(lens, pack_len)
        assert int((pos == 0).sum()) == len(segs)  # a segment starts at every 0
        assert int(pos.sum()) == sum(n * (n - 1) // 2 for n in segs)
        doc = schema.document_ids(lens, pack_len)
        assert int((doc == schema.PAD_DOCUMENT_ID).sum()) == pack_len - sum(lens)
        kpos, kdoc, _, _ = _kernel_row(lens, pack_len)
        assert np.array_equal(kpos, pos) and np.array_equal(kdoc, doc)


def test_cu_seqlens_over_rows_includes_each_pad_tail():
    cu = schema.cu_seqlens([[4, 3], [9], [2]], 9)
    assert cu.dtype == np.int32
    assert cu.tolist() == [0, 4, 7, 9, 18, 20, 27]
    assert cu[-1] == 3 * 9  # every slot of the batch is in exactly one segment


def test_segment_starts_is_the_bulk_form_of_position_ids():
    rows = [([4, 3], 9), ([9], 9), ([2, 5], 9)]
    L = 9
    flat = np.arange(len(rows) * L, dtype=np.int64)
    doc_starts, pad_starts = [], []
    for r, (lens, _) in enumerate(rows):
        at = r * L
        for n in lens:
            doc_starts.append(at)
            at += n
        if at < (r + 1) * L:
            pad_starts.append(at)
    seg = schema.segment_starts(
        np.arange(0, len(rows) * L, L, dtype=np.int64),
        np.array(doc_starts, np.int64),
        np.array(pad_starts, np.int64),
        len(rows) * L,
    )
    got = (flat - seg).reshape(len(rows), L)
    for r, (lens, _) in enumerate(rows):
        assert got[r].tolist() == schema.position_ids(lens, L).tolist()


def test_overfull_row_is_refused():
    with pytest.raises(ValueError, match="sum to 10 > pack_len 9"):
        schema.row_segments([5, 5], 9)


@pytest.mark.parametrize(
    "slots,real,pack_len",
    [([4, 4], [3, 4], 12), ([8], [5], 8), ([4, 8, 4], [1, 6, 4], 16), ([2, 2], [1, 1], 6)],
)
def test_kernel_pads_documents_by_the_rule(slots, real, pack_len):
    """--pad-to-multiple: a document's padding belongs to it (document_id, positions continuing),
    holds the pad id and label -100; the segments are the padded slots."""
    pos, doc, ids, labels = _kernel_row(slots, pack_len, real)
    assert pos.tolist() == schema.position_ids(slots, pack_len).tolist()
    assert doc.tolist() == schema.document_ids(slots, pack_len).tolist()
    at = 0
    for s, n in zip(slots, real, strict=True):
        assert ids[at + n : at + s].tolist() == [7] * (s - n)
        assert labels[at + n : at + s].tolist() == [schema.IGNORE_INDEX] * (s - n)
        assert ids[at : at + n].tolist() == [99] * n  # left for copy_rows
        at += s


def test_fixed_segments_keep_empty_entries_and_the_tail():
    assert schema.row_segments([4, 3, 0], 9, fixed=True) == [4, 3, 0, 2]
    assert schema.row_segments([4, 5, 0], 9, fixed=True) == [4, 5, 0, 0]
    cu = schema.cu_seqlens([[4, 3, 0], [9, 0, 0], [2, 2, 2]], 9, fixed=True)
    assert cu.tolist() == [0, 4, 7, 7, 9, 18, 18, 18, 18, 20, 22, 24, 27]
    assert cu.size == 3 * (3 + 1) + 1  # static: B * (K + 1) + 1 whatever the rows hold
    with pytest.raises(ValueError, match="empty entries must come last"):
        schema.row_segments([4, 0, 3], 9, fixed=True)


def test_cu_seqlens_unpadded_counts_real_tokens_of_the_same_segments():
    rows, real = [[4, 4, 0], [8, 0, 0]], [[3, 4, 0], [5, 0, 0]]
    padded = schema.cu_seqlens(rows, 12, fixed=True)
    unpadded = schema.cu_seqlens_unpadded(rows, real, 12, fixed=True)
    assert padded.tolist() == [0, 4, 8, 8, 12, 20, 20, 20, 24]
    assert unpadded.tolist() == [0, 3, 7, 7, 7, 12, 12, 12, 12]
    assert unpadded.dtype == np.int32 and unpadded.shape == padded.shape
    # without fixed docs the tail is a segment only when there is one
    assert schema.cu_seqlens_unpadded([[4, 4]], [[3, 4]], 12).tolist() == [0, 3, 7, 7]
