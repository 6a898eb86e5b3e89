"""`verify --self-test`: the self-test pack check passes only on a pack that reads back whole."""

from __future__ import annotations

import json
import os
import shutil

from packtool import schema
from packtool.verify import selftest as st

L = 128


def _build(tmp_path, n_docs=40):
    out = str(tmp_path / "pack")
    st.write_documents(
        out, st.make_documents(n_docs, seed=1, min_len=8, max_len=L // 3), L, shard_rows=4
    )
    return out


def test_self_test_pack_check_passes_on_the_pack_as_written(tmp_path):
    out = _build(tmp_path)
    c = st._pack_check(out, "w", 0.5, 40)
    assert c.passed and c.message.startswith("built with w in 0.50 s: 40 documents in ")
    assert c.evidence["documents"] == 40 and c.evidence["rows"] > 0


def test_self_test_pack_check_fails_on_a_missing_shard_or_manifest(tmp_path):
    out = _build(tmp_path)
    rel, table = st.read_shard(out, 0)
    os.remove(os.path.join(out, rel))
    c = st._pack_check(out, "w", 0.5, 40)
    assert not c.passed and "do not read back" in c.message
    os.remove(os.path.join(out, schema.MANIFEST))
    c = st._pack_check(out, "w", 0.5, 40)
    assert not c.passed and "no readable packtool manifest" in c.message


def test_self_test_pack_check_fails_when_documents_are_missing(tmp_path):
    out = _build(tmp_path)
    c = st._pack_check(out, "w", 0.5, 41)  # one more document written than the pack holds
    assert not c.passed and "the rows hold 40 documents, 41 were written" in c.message
    assert "the manifest counts 40 examples read and 40 documents, 41 were written" in c.message
    rel, table = st.read_shard(out, 0)
    st.write_shard(out, rel, table.slice(0, 1), fix_manifest=False)  # rows lost after the manifest
    c = st._pack_check(out, "w", 0.5, 40)
    assert (
        not c.passed
        and "the shards hold" in c.message
        and "documents, 40 were written" in c.message
    )


def test_self_test_pack_check_fails_on_an_empty_pack(tmp_path):
    out = _build(tmp_path)
    m = json.load(open(os.path.join(out, schema.MANIFEST)))
    for s in m["shards"]:
        os.remove(os.path.join(out, s["file"]))
    m["shards"] = []
    shutil.rmtree(os.path.join(out, schema.DATA_DIR))
    json.dump(m, open(os.path.join(out, schema.MANIFEST), "w"))
    c = st._pack_check(out, "w", 0.5, 40)
    assert not c.passed and "the shards hold 0 rows" in c.message


def test_self_test_layout_case_passes_and_catches_its_damage(tmp_path):
    c = st._layout_check(str(tmp_path), 0)
    assert c.passed, c.message
    assert "padding of document" in c.message and c.evidence == {"check": "document padding"}
