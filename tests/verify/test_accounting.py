"""Where every example and token went: the manifest's arithmetic (schema.conservation_problems)
and the manifest against the rows (documents, distinct source indices, each located by shard,
row and document when it is found twice or in no row)."""

from __future__ import annotations

import json
import os
import re

import numpy as np
from sources_pack import edit_manifest

from packtool import schema
from packtool.verify import audit, scan
from packtool.verify import selftest as st


def _row_with_docs(table, k=2):
    seq = table.column("seq_lengths").to_pylist()
    return next(r for r, s in enumerate(seq) if len(s) >= k), seq


def _all_sources(pack):
    out = []
    for i in range(len(audit.list_shards(str(pack)))):
        out += st.read_shard(str(pack), i)[1].column("source_index").to_pylist()
    return out


def test_document_packed_twice(pack, failed_of):
    rel, table = st.read_shard(str(pack), 0)
    src = table.column("source_index").to_pylist()
    r = next(i for i, s in enumerate(src) if len(s) >= 2)
    src[r][1] = src[r][0]
    st.write_shard(str(pack), rel, st.replace_columns(table, source_index=src))
    msg = failed_of(pack)[scan.SRC].message
    assert f"source_index {src[r][0]} appears 2 times" in msg and "packed twice" in msg


def test_duplicated_row_names_both_rows(pack, failed_of):
    rel, table = st.read_shard(str(pack), 0)
    src = table.column("source_index").to_pylist()
    last = table.num_rows - 1
    st.write_shard(
        str(pack), rel, table.take([*range(last), 0])
    )  # the last row overwritten by row 0
    failed = failed_of(pack)
    v = min(src[0])
    k = src[0].index(v)
    msg = failed[scan.SRC].message
    assert msg.startswith(
        f"source_index {v} appears 2 times ({rel} row 0 document {k}, {rel} row {last} document "
        f"{k}), expected 1"
    ), msg
    assert (
        f"{rel} row {last} holds the same documents as {rel} row 0 ({src[0]}): a duplicated row"
        in msg
    )
    lost = sorted(src[last])[0]
    assert re.search(
        rf"in the rows: source_index {lost}\b.* in no row", failed[scan.CONSERVE].message
    )


def test_merged_documents_name_the_lost_source_index(pack, failed_of):
    """Documents 0 and 1 of a row merged consistently (lengths, ids, positions, one source index
    gone): only the accounting sees it, and names the source index that is in no row."""
    rel, table = st.read_shard(str(pack), 0)
    r, seq = _row_with_docs(table)
    src = table.column("source_index").to_pylist()
    a, b = seq[r][0], seq[r][1]
    gone = src[r][1]
    seq[r] = [a + b, *seq[r][2:]]
    src[r] = [src[r][0], *src[r][2:]]
    doc, pos = st.token_column(table, "document_id"), st.token_column(table, "position_ids")
    doc[r][doc[r] >= 1] -= 1
    pos[r, a : a + b] = np.arange(a, a + b)
    st.write_shard(
        str(pack),
        rel,
        st.replace_columns(
            table, seq_lengths=seq, source_index=src, document_id=doc, position_ids=pos
        ),
    )
    failed = failed_of(pack)
    assert set(failed) >= {scan.CONSERVE} and not set(failed) & set(scan.ROW_CHECKS)
    msg = failed[scan.CONSERVE].message
    assert (
        f"documents expected, {sum(len(x) for x in _all_sources(pack))} in the rows: source_index {gone} is in "
        "no row and not listed as skipped or dropped (merged into another document" in msg
    ), msg


def test_conservation_tokens(pack, failed_of):
    edit_manifest(pack, lambda m: m["tokens"].update({"in": m["tokens"]["in"] + 5}))
    assert "tokens in" in failed_of(pack)[scan.CONSERVE].message


def test_conservation_examples(pack, failed_of):
    edit_manifest(
        pack, lambda m: m["counts"].update({"examples_read": m["counts"]["examples_read"] + 1})
    )
    assert "examples_read" in failed_of(pack)[scan.CONSERVE].message


def test_conservation_is_the_contracts_arithmetic_then_the_rows(pack, failed_of):
    """The manifest's own problems come from schema.conservation_problems (one statement of the
    rules), and the rows' disagreement with the counts follows them."""
    m = json.load(open(os.path.join(pack, schema.MANIFEST)))
    edit_manifest(
        pack,
        lambda m: (
            m["tokens"].update({"in": m["tokens"]["in"] + 5}),
            m["counts"].update({"packed": m["counts"]["packed"] + 1}),
        ),
    )
    edited = json.load(open(os.path.join(pack, schema.MANIFEST)))
    want = schema.conservation_problems(
        edited["counts"],
        edited["tokens"],
        {k: edited[k] for k in ("skipped", "dropped", "truncated", "split")},
    )
    msg = failed_of(pack)[scan.CONSERVE].message
    assert want and msg.startswith("; ".join(want)), msg
    docs = m["counts"]["packed"] + 1 + m["counts"]["truncated"] + m["counts"]["split_parts"]
    assert (
        f"packed + truncated + split_parts = {docs} documents expected, {m['counts']['documents']} in the rows"
        in msg
    )


def test_dropped_but_packed(pack, failed_of):
    edit_manifest(
        pack,
        lambda m: (
            m["dropped"].append({"source_index": 0, "length": 3, "reason": "x"}),
            m["counts"].update({"dropped": 1}),
        ),
    )
    assert "source_index 0 is listed as dropped" in failed_of(pack)[scan.SRC].message


def _set_first_source(pack, v):
    rel, table = st.read_shard(str(pack), 0)
    src = table.column("source_index").to_pylist()
    old, src[0][0] = src[0][0], v
    st.write_shard(str(pack), rel, st.replace_columns(table, source_index=src))
    return rel, old


def test_source_index_naming_no_record_fails(pack, failed_of):
    """A source_index outside [0, examples_read) (sha256 re-signed) names no record: it fails,
    located by shard and row, and the record it replaced, now in no row, is named."""
    n = json.load(open(os.path.join(pack, schema.MANIFEST)))["counts"]["examples_read"]
    for v in (99999, -1):
        rel, old = _set_first_source(pack, v)
        failed = failed_of(pack)
        msg = failed[scan.SRC].message
        assert msg.startswith(
            f"source_index {v} ({rel} row 0 document 0) is outside [0, {n}) (counts.examples_read)"
        ), msg
        assert "re-pack with packtool pack" in msg and "\n" not in msg
        assert f"source_index {old} is in no row and not listed" in failed[scan.CONSERVE].message
        _set_first_source(pack, old)
    assert not failed_of(pack)
