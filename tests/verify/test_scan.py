"""The row scan: the vectorized checks against a per-row oracle, and each row-level damage named
by check, shard, row and position (the manifest's shard sha256/rows re-recorded: only the one
change is left to find)."""

from __future__ import annotations

import numpy as np
import pytest
from packs import merge_first_two  # noqa: E402  (fixture damage)

from packtool import schema
from packtool.verify import scan
from packtool.verify import selftest as st

L = 128
IGNORE = schema.IGNORE_INDEX


def _row_with_docs(table, k=2):
    seq = table.column("seq_lengths").to_pylist()
    return next(r for r, s in enumerate(seq) if len(s) >= k), seq


# ---------------------------------------------------------------------------------------------
# the vectorized scan against a per-row oracle


def _oracle(cols, pad_id):
    """First bad position per check and row, computed the slow obvious way."""
    out = {}
    R, n = cols["input_ids"].shape
    for r in range(R):
        lens = cols["seq_val"][cols["seq_off"][r] : cols["seq_off"][r + 1]]
        doc = np.concatenate(
            [np.full(k, j) for j, k in enumerate(lens)] + [np.full(n - sum(lens), -1)]
        )
        pos = np.concatenate([np.arange(k) for k in lens] + [np.arange(n - sum(lens))])
        first = np.zeros(n, bool)
        first[np.concatenate(([0], np.cumsum(lens)[:-1]))] = True
        pad = doc < 0
        lab, ids = cols["labels"][r], cols["input_ids"][r]
        masks = {
            scan.DOC: cols["document_id"][r] != doc,
            scan.POS: cols["position_ids"][r] != pos,
            scan.LAB_MASK: (first | pad) & (lab != IGNORE),
            scan.LAB_EQ: ~(first | pad) & (lab != IGNORE) & (lab != ids),
            scan.PAD: pad & (ids != pad_id),
        }
        for name, bad in masks.items():
            if bad.any():
                out.setdefault(name, {})[r] = int(np.argmax(bad))
    return out


def _cols(table):
    cols = {c: st.token_column(table, c) for c in schema.TOKEN_COLUMNS}
    seq = table.column("seq_lengths").to_pylist()
    cols["seq_off"] = np.concatenate(([0], np.cumsum([len(s) for s in seq])))
    cols["seq_val"] = np.array([x for s in seq for x in s], np.int32)
    src = table.column("source_index").to_pylist()
    cols["src_off"] = np.concatenate(([0], np.cumsum([len(s) for s in src])))
    cols["src_val"] = np.array([x for s in src for x in s], np.int64)
    cols["num_tokens"] = table.column("num_tokens").to_numpy().astype(np.int64)
    cols["num_loss_tokens"] = table.column("num_loss_tokens").to_numpy().astype(np.int64)
    return cols


@pytest.mark.parametrize("column", schema.TOKEN_COLUMNS)
def test_scan_matches_oracle_on_random_corruption(clean_pack, column):
    _, table = st.read_shard(str(clean_pack), 0)
    rng = np.random.default_rng(hash(column) % 2**32)
    for _ in range(20):
        cols = _cols(table)
        R = cols["input_ids"].shape[0]
        for _ in range(3):  # a few random cells per trial, possibly in the same row
            r, p = int(rng.integers(R)), int(rng.integers(L))
            cols[column][r, p] += int(rng.choice([-2, -1, 1, 5]))
        got = scan.scan_rows(cols, pad_id=0)
        want = _oracle(cols, 0)
        for name in (scan.DOC, scan.POS, scan.LAB_MASK, scan.LAB_EQ, scan.PAD):
            have = (
                dict(zip(got[name]["rows"].tolist(), got[name]["pos"].tolist(), strict=True))
                if name in got
                else {}
            )
            assert have == want.get(name, {}), name


def test_batch_columns_read_a_shard_as_the_scan_reads_it(clean_pack):
    """The decoded Arrow batch and the test's own column reading agree, and scan clean."""
    _, table = st.read_shard(str(clean_pack), 0)
    (batch,) = table.combine_chunks().to_batches()
    got, want = scan.batch_columns(batch, L, 0), _cols(table)
    for c, v in want.items():
        assert np.array_equal(got[c], v), c
    res = scan.scan_rows(got, pad_id=0)
    assert set(res) == {"_totals"} and res["_totals"]["valid"].all()


# ---------------------------------------------------------------------------------------------
# power: each deliberately broken row fails, naming shard, row and position


def test_positions_not_reset(pack, failed_of):
    rel, table = st.read_shard(str(pack), 0)
    r, seq = _row_with_docs(table)
    pos = st.token_column(table, "position_ids")
    n = int(sum(seq[r]))
    pos[r, :n] = np.arange(n)  # counts on across documents
    st.write_shard(str(pack), rel, st.replace_columns(table, position_ids=pos))
    failed = failed_of(pack)
    a = seq[r][0]
    assert set(failed) == {scan.POS}
    assert failed[scan.POS].message.startswith(
        f"{rel} row {r} position {a} (document 1): position_id {a}, expected 0"
    )


def test_first_label_not_masked(pack, expect_failure):
    rel, table = st.read_shard(str(pack), 0)
    r, seq = _row_with_docs(table)
    lab, ids = st.token_column(table, "labels"), st.token_column(table, "input_ids")
    a = seq[r][0]
    lab[r, a] = ids[r, a]
    nloss = table.column("num_loss_tokens").to_numpy().copy()
    nloss[r] += 1
    st.write_shard(str(pack), rel, st.replace_columns(table, labels=lab, num_loss_tokens=nloss))
    expect_failure(
        pack,
        scan.LAB_MASK,
        rf"^{rel} row {r} position {a} \(first token of document 1\): label \d+, must be -100",
    )


def test_token_moved_across_document_boundary(pack, failed_of):
    """The writer gives A's last token to B (lengths, document_id, positions all agree): the label
    of B's new first token is not -100, so the check fails at that slot."""
    rel, table = st.read_shard(str(pack), 0)
    seq = table.column("seq_lengths").to_pylist()
    lab = st.token_column(table, "labels")
    r = next(
        i for i, s in enumerate(seq) if len(s) >= 2 and s[0] > 1 and lab[i, s[0] - 1] != IGNORE
    )
    a = seq[r][0]
    seq[r][0] -= 1
    seq[r][1] += 1
    doc, pos = st.token_column(table, "document_id"), st.token_column(table, "position_ids")
    doc[r, a - 1] = 1
    pos[r, a - 1 : a - 1 + seq[r][1]] = np.arange(seq[r][1])
    st.write_shard(
        str(pack),
        rel,
        st.replace_columns(table, seq_lengths=seq, document_id=doc, position_ids=pos),
    )
    failed = failed_of(pack)
    assert set(failed) == {scan.LAB_MASK}
    assert (
        f"{rel} row {r} position {a - 1} (first token of document 1)"
        in failed[scan.LAB_MASK].message
    )


def test_token_swapped_across_boundary_breaks_labels(pack, expect_failure):
    """A's last token and B's first trade places in input_ids only: labels no longer match."""
    rel, table = st.read_shard(str(pack), 0)
    seq = table.column("seq_lengths").to_pylist()
    ids, lab = st.token_column(table, "input_ids"), st.token_column(table, "labels")
    r = next(
        i
        for i, s in enumerate(seq)
        if len(s) >= 2 and lab[i, s[0] - 1] != IGNORE and ids[i, s[0] - 1] != ids[i, s[0]]
    )
    a = seq[r][0]
    ids[r, [a - 1, a]] = ids[r, [a, a - 1]]
    st.write_shard(str(pack), rel, st.replace_columns(table, input_ids=ids))
    expect_failure(
        pack,
        scan.LAB_EQ,
        rf"^{rel} row {r} position {a - 1} \(document 0\): label \d+ != input_id \d+",
    )


def test_document_id_disagrees_with_seq_lengths(pack, failed_of):
    rel, table = st.read_shard(str(pack), 0)
    r, seq = _row_with_docs(table)
    doc = st.token_column(table, "document_id")
    a = seq[r][0]
    doc[r, a] = 0  # B's first slot claimed by A
    st.write_shard(str(pack), rel, st.replace_columns(table, document_id=doc))
    failed = failed_of(pack)
    assert set(failed) == {scan.DOC}
    assert failed[scan.DOC].message.startswith(
        f"{rel} row {r} position {a}: document_id 0, but seq_lengths put document 1 there"
    )


def test_seq_lengths_overflowing_the_row(pack, failed_of):
    rel, table = st.read_shard(str(pack), 0)
    seq = table.column("seq_lengths").to_pylist()
    seq[3] = [*seq[3], L]
    st.write_shard(str(pack), rel, st.replace_columns(table, seq_lengths=seq))
    failed = failed_of(pack)
    assert f"{rel} row 3: seq_lengths declare" in failed[scan.SEQ].message


@pytest.mark.parametrize("column", ["num_tokens", "num_loss_tokens"])
def test_scalar_counts(pack, column, failed_of):
    rel, table = st.read_shard(str(pack), 0)
    v = table.column(column).to_numpy().copy()
    v[2] += 1
    st.write_shard(str(pack), rel, st.replace_columns(table, **{column: v}))
    failed = failed_of(pack)
    name = scan.NTOK if column == "num_tokens" else scan.NLOSS
    assert failed[name].message.startswith(f"{rel} row 2: {column} {v[2]}")


def test_pad_tail_with_wrong_token(pack, failed_of):
    rel, table = st.read_shard(str(pack), 0)
    ntok = table.column("num_tokens").to_numpy()
    r = int(np.flatnonzero(ntok < L)[0])
    ids = st.token_column(table, "input_ids")
    ids[r, L - 1] = 7
    st.write_shard(str(pack), rel, st.replace_columns(table, input_ids=ids))
    assert (
        failed_of(pack)[scan.PAD].message
        == f"{rel} row {r} position {L - 1} (padding): input_id 7 != pad id 0"
    )


def test_merged_documents_with_both_source_indices_name_the_row(pack, failed_of):
    rel, table = st.read_shard(str(pack), 0)
    r, src_r, _, _, merged = merge_first_two(table, keep_source=True)
    st.write_shard(str(pack), rel, merged)
    seq_r = merged.column("seq_lengths").to_pylist()[r]
    msg = failed_of(pack)[scan.SRC].message
    assert msg.startswith(
        f"{rel} row {r}: {len(src_r)} source_index entries for {len(seq_r)} documents "
        f"(source_index {src_r}, seq_lengths {seq_r}): documents merged (a boundary lost)"
    ), msg


# ---------------------------------------------------------------------------------------------
# layouts: documents padded to a multiple, fixed docs per row (every damage named by shard, row
# and document or position)

N, K = 8, 4


@pytest.fixture(scope="module")
def clean_layout_pack(tmp_path_factory):
    out = tmp_path_factory.mktemp("layout") / "clean"
    docs = st.make_documents(50, seed=11, min_len=3, max_len=60)
    st.write_documents(
        str(out), docs, L, shard_rows=12, max_docs=K, pad_to_multiple=N, fixed_docs=True
    )
    return out


@pytest.fixture
def layout_pack(clean_layout_pack, tmp_path):
    import shutil

    dst = tmp_path / "layout"
    shutil.copytree(clean_layout_pack, dst)
    return dst


def _lists(table):
    return {
        c: table.column(c).to_pylist()
        for c in ("seq_lengths", "source_index", schema.UNPADDED_COLUMN)
    }


def _padded_slot(table):
    """(row, document, position) of the first pad slot inside a document."""
    ls = _lists(table)
    for r, (seq, real) in enumerate(
        zip(ls["seq_lengths"], ls[schema.UNPADDED_COLUMN], strict=True)
    ):
        for d, (s, u) in enumerate(zip(seq, real, strict=True)):
            if s > u:
                return r, d, sum(seq[:d]) + u
    raise AssertionError("no padded document")


def test_a_padded_fixed_docs_pack_passes_with_its_layout_checks(clean_layout_pack, checks_of):
    by, summary = checks_of(clean_layout_pack)
    assert not [n for n, c in by.items() if not c.passed], {
        n: c.message for n, c in by.items() if not c.passed
    }
    assert {scan.UNPAD, scan.DOC_PAD, scan.FIXED} <= set(by)
    assert by[scan.COUNTS].passed and summary["documents"] == 50


def test_default_packs_get_no_layout_checks(clean_pack, checks_of):
    by, _ = checks_of(clean_pack)
    assert not {scan.UNPAD, scan.DOC_PAD, scan.FIXED} & set(by)


@pytest.mark.parametrize("what", ["label", "input_id"])
def test_damaged_document_padding_is_named(layout_pack, expect_failure, what):
    rel, table = st.read_shard(str(layout_pack), 0)
    r, d, p = _padded_slot(table)
    col = "labels" if what == "label" else "input_ids"
    arr = st.token_column(table, col)
    arr[r, p] = 4242
    st.write_shard(str(layout_pack), rel, st.replace_columns(table, **{col: arr}))
    want = "label 4242, must be -100" if what == "label" else "input_id 4242 != pad id 0"
    expect_failure(
        layout_pack,
        scan.DOC_PAD,
        rf"^{rel} row {r} position {p} \(padding of document {d}\): {want}",
    )


def test_a_wrong_unpadded_length_is_named(layout_pack, expect_failure):
    rel, table = st.read_shard(str(layout_pack), 0)
    ls = _lists(table)
    r = 1
    ls[schema.UNPADDED_COLUMN][r][1] -= N  # now seq_lengths != ceil(unpadded / 8) * 8
    got, slots = ls[schema.UNPADDED_COLUMN][r][1], ls["seq_lengths"][r][1]
    st.write_shard(
        str(layout_pack),
        rel,
        st.replace_columns(table, seq_lengths_unpadded=ls[schema.UNPADDED_COLUMN]),
    )
    expect_failure(
        layout_pack,
        scan.UNPAD,
        rf"^{rel} row {r} document 1: seq_lengths_unpadded {got}, but seq_lengths {slots}; "
        r"each must be ceil\(unpadded / 8\) \* 8",
    )


def _row_with_empty(ls):
    return next(r for r, s in enumerate(ls["seq_lengths"]) if 2 <= sum(x > 0 for x in s) < K)


def test_a_non_trailing_empty_entry_is_named(layout_pack, expect_failure):
    rel, table = st.read_shard(str(layout_pack), 0)
    ls = _lists(table)
    r = _row_with_empty(ls)
    e = ls["seq_lengths"][r].index(0)  # the first empty entry
    for c in ls:  # [..., b, 0, ...] -> [..., 0, b, ...] in all three lists
        ls[c][r][e - 1], ls[c][r][e] = ls[c][r][e], ls[c][r][e - 1]
    st.write_shard(str(layout_pack), rel, st.replace_columns(table, **ls))
    expect_failure(
        layout_pack,
        scan.FIXED,
        rf"^{rel} row {r} document {e}: \d+ slots after an empty entry; with fixed docs the empty "
        "entries",
    )


def test_fixed_docs_lists_of_another_length_and_bad_empty_sources(layout_pack, failed_of):
    rel, table = st.read_shard(str(layout_pack), 0)
    ls = _lists(table)
    r = _row_with_empty(ls)
    for c in ls:
        ls[c][r] = ls[c][r][:-1]  # one empty entry less
    ls["source_index"][r + 1][-1] = 3 if ls["seq_lengths"][r + 1][-1] == 0 else -1
    st.write_shard(str(layout_pack), rel, st.replace_columns(table, **ls))
    f = failed_of(layout_pack)[scan.FIXED]
    assert f.message.startswith(
        f"{rel} row {r}: {K - 1} seq_lengths entries, fixed docs needs exactly {K} (--max-docs)"
    ), f.message
    assert f.evidence["rows_failed"] == 2
    assert f"{rel} row {r + 1} document {K - 1}: source_index" in f.evidence["first"][1]["message"]


def test_the_manifest_doc_pad_is_checked_against_the_rows(layout_pack, failed_of):
    import json

    from packtool.io import shards

    m = json.loads((layout_pack / "manifest.json").read_text())
    have = m["tokens"]["doc_pad"]
    m["tokens"]["doc_pad"] = have + 1
    shards.write_manifest(layout_pack, m)
    assert f"tokens.doc_pad is {have + 1} in the manifest, {have} on disk" in (
        failed_of(layout_pack)[scan.COUNTS].message
    )
    m["tokens"]["doc_pad"] = m["tokens"]["pad"] + 1
    m["pad_to_multiple"] = 12  # not a divisor of pack_len 128
    shards.write_manifest(layout_pack, m)
    failed = failed_of(layout_pack)
    assert (
        "pack_len 128 is not a multiple of pad_to_multiple 12"
        in failed[scan.MANIFEST_CHECK].message
    )
    assert "> tokens.pad" in failed[scan.CONSERVE].message
