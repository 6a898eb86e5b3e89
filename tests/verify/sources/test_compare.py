"""Shard documents against their pieces (packtool/verify/sources/match.py): consistent damage that
integrity cannot see (a prompt token trained, a token id changed, the manifest re-signed) is caught
and named by record (file:line), shard, row and position, with got vs expected ids and labels."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pyarrow as pa
from sources_pack import (  # noqa: E402
    edit_manifest,
    failed,
    manifest,
    prompt_token,
    shard_with_split_free_rows,
    verify,
)

from packtool import schema
from packtool.verify import selftest as st
from packtool.verify.sources import load as vs
from packtool.verify.sources import match as sc
from packtool.verify.sources.pieces import expected_pieces

IGNORE = schema.IGNORE_INDEX


class _Where:
    """Provenance stand-in: record i is 'data.jsonl:i+1'."""

    def resolve(self, indices):
        pass

    def __call__(self, i):
        return f"data.jsonl:{int(i) + 1}"


def _compare(labels, got_ids, got_lab):
    """compare_docs of one shard document (row 0, document 0) against the one record `labels`
    (ids 10, 11, ...) belongs to."""
    ids = [10 + t for t in range(len(labels))]
    table = pa.table(
        {
            "input_ids": pa.array([ids], pa.list_(pa.int32())),
            "labels": pa.array([labels], pa.list_(pa.int32())),
        }
    )
    tok = SimpleNamespace(table=table, lengths=np.array([len(labels)]), source_index=np.array([0]))
    exp = expected_pieces(tok, {"pack_len": 8, "overflow": "drop"})
    cmp = sc.Compare(exp, _Where(), seen=np.zeros(exp.piece_row.size, np.int64))
    n = len(got_ids)
    docs = sc.Doc(np.array([0]), np.array([0]), np.array([0]), np.array([n]), np.array([0]))
    sc.compare_docs(
        cmp,
        "data/s.parquet",
        0,
        docs,
        np.array([0]),
        np.array(got_ids, np.int32),
        np.array(got_lab, np.int32),
        np.array([0]),
    )
    return cmp


def test_first_label_is_masked_as_the_packer_stores_it():
    cmp = _compare([10, IGNORE, 12, 13], [10, 11, 12, 13], [IGNORE, IGNORE, 12, 13])
    assert cmp.failed.count == 0 and cmp.docs_compared == 1 and cmp.tokens_compared == 4
    assert cmp.first_token_loss == 1  # the record's first label carried loss: the packer masked it


def test_a_trained_prompt_token_is_named_with_its_window():
    cmp = _compare([IGNORE, IGNORE, 12, 13], [10, 11, 12, 13], [IGNORE, 11, 12, 13])
    (ex,) = cmp.failed.examples
    assert ex["message"] == (
        "data.jsonl:1 (source_index 0) -> data/s.parquet row 0 position 1 (document 0, token 1): "
        f"label 11, expected {IGNORE} (a prompt token trained); row positions 0..3: input_ids "
        f"got [10, 11, 12, 13] expected [10, 11, 12, 13], labels got [{IGNORE}, 11, 12, 13] "
        f"expected [{IGNORE}, {IGNORE}, 12, 13]"
    )
    assert ex["got"] == {"input_id": 11, "label": 11} and ex["expected"] == {
        "input_id": 11,
        "label": IGNORE,
    }


def test_a_longer_document_is_named_by_its_lengths():
    cmp = _compare([IGNORE, 11, 12], [10, 11, 12, 99], [IGNORE, 11, 12, 99])
    (ex,) = cmp.failed.examples
    assert ex["message"].endswith(
        "row 0 document 0: document 0 holds 4 tokens, the record gives 3 when tokenized "
        "again (documents merged or tokens added)"
    )
    assert (ex["got_length"], ex["expected_length"], ex["position"]) == (4, 3, 3)


def test_prompt_token_trained_passes_integrity_but_not_sources(pack):
    split_sources = {s["source_index"] for s in manifest(pack)["split"]}
    rel, table = shard_with_split_free_rows(pack, split_sources)
    r, p, k, src = prompt_token(table)
    ids, lab = st.token_column(table, "input_ids"), st.token_column(table, "labels")
    lab[r, p] = ids[r, p]
    nloss = table.column("num_loss_tokens").to_numpy().copy()
    nloss[r] += 1
    st.write_shard(str(pack), rel, st.replace_columns(table, labels=lab, num_loss_tokens=nloss))
    edit_manifest(
        pack,
        lambda m: m["tokens"].update(
            loss_out=m["tokens"]["loss_out"] + 1, loss_in=m["tokens"]["loss_in"] + 1
        ),
    )
    code, checks = verify(pack)
    assert code == 0, [
        c["message"] for c in failed(checks).values()
    ]  # consistent: integrity cannot see it

    code, checks = verify(pack, "--sources")
    assert code == 1
    bad = failed(checks)
    msg = bad[vs.TOKENS]["message"]
    assert msg.startswith(
        f"{manifest(pack)['options']['input']}:{src + 1} (source_index {src}) -> {rel} row {r} "
        f"position {p} (document {k}, token "
    ), msg
    assert f"label {ids[r, p]}, expected {schema.IGNORE_INDEX} (a prompt token trained)" in msg
    t = int(st.token_column(table, "position_ids")[r, p])  # token index within its document
    assert re.search(
        rf"row positions {p - min(t, 3)}\.\.{p + 3}: input_ids got \[.*\] expected \[.*\], labels got "
        rf"\[.*\] expected \[.*\]",
        msg,
    ), msg
    first = bad[vs.TOKENS]["evidence"]["first"][0]
    assert (first["shard"], first["row"], first["position"], first["source_index"]) == (
        rel,
        r,
        p,
        src,
    )
    assert first["got"]["label"] == ids[r, p] and first["expected"]["label"] == schema.IGNORE_INDEX
    # the manifest's loss counts were re-signed too: re-tokenizing gives the true ones
    assert "tokens.loss_in is" in bad[vs.ACCOUNT]["message"]


def test_prompt_token_id_changed_is_caught(pack):
    split_sources = {s["source_index"] for s in manifest(pack)["split"]}
    rel, table = shard_with_split_free_rows(pack, split_sources)
    r, p, k, src = prompt_token(table)
    ids = st.token_column(table, "input_ids")
    old = int(ids[r, p])
    ids[r, p] = old + 1  # label stays schema.IGNORE_INDEX: consistent
    st.write_shard(str(pack), rel, st.replace_columns(table, input_ids=ids))
    assert verify(pack)[0] == 0

    code, checks = verify(pack, "--sources")
    assert code == 1 and list(failed(checks)) == [vs.TOKENS]
    msg = checks[vs.TOKENS]["message"]
    assert (
        f":{src + 1} (source_index {src}) -> {rel} row {r} position {p} (document {k}, token "
        in msg
    )
    assert f"input_id {old + 1}, expected {old}" in msg and "label" not in msg.split(";")[0]
    assert "(+" not in msg  # exactly one document differs
