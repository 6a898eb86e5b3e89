"""Damage that used to pass verify, or to stop it without a report: token ids outside the
tokenizer's vocabulary, a manifest without pad_id, side / source_index lists of another length than
seq_lengths, a shard that cannot be read, a shard entry without sha256. Each is a failed check
naming the file and row; a check that could not run is skipped, never passed."""

from __future__ import annotations

import os

from pair_packs import make_pairs, write_pair_pack
from sources_pack import edit_manifest

from packtool import schema
from packtool.verify import integrity as integ
from packtool.verify import scan
from packtool.verify import selftest as st


def _set_ids(pack, edits):
    """input_ids[row, slot] = value for (row, slot, value) in the first shard (sha256 re-signed)."""
    rel, table = st.read_shard(str(pack), 0)
    ids = st.token_column(table, "input_ids")
    for r, j, v in edits:
        ids[r, j] = v
    st.write_shard(str(pack), rel, st.replace_columns(table, input_ids=ids))
    return rel, table


def _pad_tail_slot(table) -> tuple[int, int]:
    """(row, first pad-tail slot) of a row that has a pad tail."""
    seq = table.column("seq_lengths").to_pylist()
    L = st.token_column(table, "input_ids").shape[1]
    r = next(i for i, s in enumerate(seq) if sum(s) < L)
    return r, sum(seq[r])


# ---------------------------------------------------------------------------------------------
# A. token ids outside the vocabulary


def test_an_id_at_vocab_size_fails_token_ids(pack, failed_of, checks_of):
    by_name, _ = checks_of(pack)
    assert by_name[scan.IDS].passed and "(0..4999)" in by_name[scan.IDS].message
    rel, _ = _set_ids(pack, [(0, 3, st.SELF_TEST_VOCAB)])
    failed = failed_of(pack)
    assert set(failed) == {scan.IDS}, sorted(failed)
    assert failed[scan.IDS].message.startswith(
        f"{rel} row 0 position 3: input_id 5000 is outside the tokenizer's vocabulary (0..4999)"
    )
    assert "packed with another tokenizer" in failed[scan.IDS].message


def test_a_negative_id_and_one_in_the_pad_tail_fail(pack, failed_of):
    rel, table = st.read_shard(str(pack), 0)
    r, j = _pad_tail_slot(table)
    _set_ids(pack, [(1, 2, -7), (r, j, 10**6)])
    failed = failed_of(pack)
    assert scan.IDS in failed and failed[scan.IDS].evidence["rows_failed"] == 2 - (r == 1)
    first = failed[scan.IDS].evidence["first"]
    msgs = {(e["row"], e["position"]): e["message"] for e in first}
    assert "input_id -7 is negative" in msgs[(1, 2)]
    if r != 1:
        assert "input_id 1000000 is outside" in msgs[(r, j)]


def test_without_a_vocab_size_only_negative_ids_are_checked(pack, checks_of, failed_of):
    edit_manifest(pack, lambda m: m["tokenizer"].pop("vocab_size"))
    _set_ids(pack, [(0, 3, 10**6)])
    by_name, _ = checks_of(pack)
    ids = by_name[scan.IDS]
    assert ids.skipped and not ids.passed and ids.status == "skip"
    assert "upper bound was not checked" in ids.message
    _set_ids(pack, [(0, 4, -1)])
    assert "input_id -1 is negative" in failed_of(pack)[scan.IDS].message


# ---------------------------------------------------------------------------------------------
# C. no pad_id in the manifest


def _drop_pad_id(m):
    m.pop("pad_id")
    m["tokenizer"].pop("pad_id", None)


def test_a_manifest_without_pad_id_fails_and_the_pad_check_is_skipped(pack, checks_of):
    edit_manifest(pack, _drop_pad_id)
    by_name, _ = checks_of(pack)
    assert not by_name[scan.MANIFEST_CHECK].passed
    assert "pad_id is missing" in by_name[scan.MANIFEST_CHECK].message
    pad = by_name[scan.PAD]
    assert pad.skipped and not pad.passed and "not checked" in pad.message


def test_document_padding_without_pad_id_is_skipped(tmp_path, checks_of):
    out = tmp_path / "layout"
    docs = st.make_documents(30, seed=1, min_len=3, max_len=60)
    st.write_documents(str(out), docs, 256, shard_rows=8, pad_to_multiple=8)
    assert checks_of(out)[0][scan.DOC_PAD].passed
    edit_manifest(out, _drop_pad_id)
    by_name, _ = checks_of(out)
    assert by_name[scan.DOC_PAD].skipped and not by_name[scan.DOC_PAD].passed
    assert by_name[scan.PAD].skipped and "pad ids not checked" in by_name[scan.DOC_PAD].message


# ---------------------------------------------------------------------------------------------
# D. side / source_index lists of another length than seq_lengths


def _pair_pack(tmp_path, column, fn):
    out = tmp_path / "pairs"
    if out.exists():
        import shutil

        shutil.rmtree(out)
    write_pair_pack(out, make_pairs(12, seed=3), 64)
    rel, table = st.read_shard(str(out), 0)
    values = table.column(column).to_pylist()
    docs = len(values[0])
    values[0] = fn(values[0])
    if column == schema.SIDE_COLUMN:
        import pyarrow as pa

        i = table.schema.get_field_index(column)
        arr = pa.array(values, table.schema.field(column).type)
        table = table.set_column(i, table.schema.field(column), arr)
    else:
        table = st.replace_columns(table, **{column: values})
    st.write_shard(str(out), rel, table)
    return out, rel, len(values[0]), docs


def test_sound_pair_pack_passes_the_pair_rules(tmp_path, checks_of):
    out, *_ = _pair_pack(tmp_path, schema.SIDE_COLUMN, lambda s: s)
    by_name, _ = checks_of(out)
    assert all(by_name[n].passed for n in (*scan.PAIR_CHECKS, scan.SCHEMA, scan.SRC))


def test_a_side_list_short_or_long_fails_pair_sides_naming_the_row(tmp_path, checks_of):
    for fn in (lambda s: s[:-1], lambda s: s + [0]):
        out, rel, n, docs = _pair_pack(tmp_path, schema.SIDE_COLUMN, fn)
        by_name, _ = checks_of(out)
        assert by_name[scan.SCHEMA].passed, by_name[scan.SCHEMA].message  # no decode error
        sides = by_name[scan.PAIR_SIDES]
        assert not sides.passed and not sides.skipped
        assert sides.message.startswith(f"{rel} row 0: lists {n} sides for {docs} documents")
        for name in (scan.PAIR_SOURCE, scan.PAIR_PROMPT, scan.PAIR_TRAINED):
            assert by_name[name].status == "skip" and f"{rel} row 0" in by_name[name].message


def test_a_source_index_list_one_short_fails_pair_source(tmp_path, checks_of):
    out, rel, n, docs = _pair_pack(tmp_path, "source_index", lambda s: s[:-1])
    by_name, _ = checks_of(out)
    assert by_name[scan.SCHEMA].passed, by_name[scan.SCHEMA].message
    src = by_name[scan.PAIR_SOURCE]
    assert not src.passed and not src.skipped
    assert src.message.startswith(
        f"{rel} row 0: lists {n} source_index entries for {docs} documents"
    )
    assert not by_name[scan.SRC].passed
    assert all(by_name[x].status == "skip" for x in (scan.PAIR_PROMPT, scan.PAIR_TRAINED))


# ---------------------------------------------------------------------------------------------
# H. a shard entry that cannot be read; G. a shard entry without sha256


def test_a_folder_named_like_a_shard_is_a_failed_check_not_an_abort(pack, failed_of):
    os.mkdir(os.path.join(pack, schema.DATA_DIR, "x.parquet"))
    failed = failed_of(pack)
    assert "data/x.parquet cannot be read (IsADirectoryError" in failed[scan.SHARDS].message
    assert "data/x.parquet" in failed[scan.SCHEMA].message


def test_a_shard_without_permission_is_a_failed_check(pack, failed_of, monkeypatch):
    rel, _ = st.read_shard(str(pack), 1)
    real = integ.sha256_file

    def sha(path):
        if path.endswith(rel):
            raise PermissionError(13, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(integ, "sha256_file", sha)
    msg = failed_of(pack)[scan.SHARDS].message
    assert f"{rel} cannot be read (PermissionError: Permission denied)" in msg


def test_a_shard_entry_without_sha256_says_so(pack, failed_of):
    rel, _ = st.read_shard(str(pack), 0)
    edit_manifest(pack, lambda m: m["shards"][0].pop("sha256"))
    msg = failed_of(pack)[scan.SHARDS].message
    assert msg == f"the manifest records no sha256 for {rel}; re-run packtool pack"
