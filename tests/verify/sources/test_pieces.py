"""The expected pieces (packtool/verify/sources/pieces.py): the records tokenized again, cut by the
packer's own apply_overflow, gathered back to back, split parts told apart by a hash; and, end to
end, truncated and dropped records checked the way the packer made them."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pyarrow as pa
import pytest
from sources_pack import cli, failed, manifest, verify  # noqa: E402

from packtool import schema
from packtool.pack.overflow import apply_overflow
from packtool.verify import audit
from packtool.verify import selftest as st
from packtool.verify.sources import load as vs
from packtool.verify.sources import pieces as sp


def _tokenized(lengths, source_index=None):
    """A TokenizedData stand-in: record r's ids are 100*r + 0, 1, 2, ...; labels = ids."""
    ids = [[100 * r + t for t in range(n)] for r, n in enumerate(lengths)]
    table = pa.table(
        {
            "input_ids": pa.array(ids, pa.list_(pa.int32())),
            "labels": pa.array(ids, pa.list_(pa.int32())),
        }
    )
    src = np.arange(len(lengths)) if source_index is None else np.asarray(source_index)
    return SimpleNamespace(table=table, lengths=np.asarray(lengths), source_index=src)


@pytest.mark.parametrize("overflow", ["drop", "truncate", "split"])
def test_pieces_are_the_packers_cut(overflow):
    lengths = [3, 9, 0, 5]
    exp = sp.expected_pieces(_tokenized(lengths), {"pack_len": 4, "overflow": overflow})
    want = apply_overflow(np.array(lengths), np.arange(4), 4, overflow)
    assert (
        exp.piece_row.tolist() == want.row.tolist()
        and exp.piece_start.tolist() == want.start.tolist()
    )
    assert exp.piece_len.tolist() == want.length.tolist()
    assert exp.num_pieces.tolist() == np.bincount(want.row, minlength=4).tolist()
    for r in range(4):  # a record's pieces are consecutive, from first_piece
        p0, n = int(exp.first_piece[r]), int(exp.num_pieces[r])
        assert (exp.piece_row[p0 : p0 + n] == r).all()


def test_gather_puts_pieces_back_to_back():
    exp = sp.expected_pieces(_tokenized([3, 9, 0, 5]), {"pack_len": 4, "overflow": "split"})
    ids, lab, off = exp.gather(
        exp.piece_row[[2, 0, 3]], exp.piece_start[[2, 0, 3]], exp.piece_len[[2, 0, 3]]
    )
    assert ids.tolist() == [104, 105, 106, 107, 0, 1, 2, 108] and off.tolist() == [0, 4, 7, 8]
    assert lab.tolist() == ids.tolist() and ids.dtype == np.int32
    assert exp.record_of(np.array([3, 1, 7])).tolist() == [3, 1, -1]


def test_split_parts_hash_apart():
    exp = sp.expected_pieces(_tokenized([9]), {"pack_len": 4, "overflow": "split"})
    h = exp.part_hashes(0)
    assert h.dtype == np.uint64 and len(set(h.tolist())) == 3
    assert sp.segments(np.array([2, 3]))[1].tolist() == [0, 1, 0, 1, 2]


def test_records_out_of_source_order_stop():
    with pytest.raises(vs.Stop, match="not in source order"):
        sp.expected_pieces(
            _tokenized([3, 3], source_index=[1, 0]), {"pack_len": 4, "overflow": "drop"}
        )


@pytest.mark.parametrize("overflow", ["truncate", "drop"])
def test_truncated_and_dropped_records(built, tmp_path, overflow):
    """Over-length records are cut to --len (truncate) or left out (drop) exactly as the packer does;
    damage in a truncated record is named with the cut."""
    pack = tmp_path / overflow
    r = cli("pack", built[0], "--len", 256, "--out", pack, "--overflow", overflow)
    assert r.exit_code == 0, r.output
    m = manifest(pack)
    assert m["counts"]["truncated" if overflow == "truncate" else "dropped"] >= 1
    code, checks = verify(pack, "--sources")
    assert code == 0, [c["message"] for c in failed(checks).values()]
    if overflow == "drop":
        return
    cut = {t["source_index"]: t for t in m["truncated"]}
    for i in range(len(audit.list_shards(str(pack)))):
        rel, table = st.read_shard(str(pack), i)
        srcs = table.column("source_index").to_pylist()
        hit = [(r, k) for r, s in enumerate(srcs) for k, x in enumerate(s) if x in cut]
        if hit:
            break
    r, k = hit[0]
    src = srcs[r][k]
    col = sum(table.column("seq_lengths").to_pylist()[r][:k]) + 255  # the last token kept
    ids, lab = st.token_column(table, "input_ids"), st.token_column(table, "labels")
    ids[r, col] += 1
    lab[r, col] = ids[r, col] if lab[r, col] != schema.IGNORE_INDEX else schema.IGNORE_INDEX
    st.write_shard(str(pack), rel, st.replace_columns(table, input_ids=ids, labels=lab))
    code, checks = verify(pack, "--sources")
    assert code == 1
    assert (
        f"(source_index {src}, truncated to 256 of {cut[src]['length']} tokens) -> {rel} row {r} position {col} "
        f"(document {k}, token 255): input_id {ids[r, col]}, expected {ids[r, col] - 1}"
        in checks[vs.TOKENS]["message"]
    )
