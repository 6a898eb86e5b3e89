"""`verify --sources` on a mixture pack: each input re-read where the manifest records it, with its
own read options, its weight and the pack's seed; a difference names the input, record and copy."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from sources_pack import cli, copy_pack, failed, manifest, verify

from packtool import schema
from packtool.demo_data import write_sample
from packtool.verify import audit
from packtool.verify import selftest as st
from packtool.verify.sources import load as vs


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("mixsrc")
    chats = str(write_sample(root / "chats.jsonl", n=20, seed=2))
    alpaca = root / "alpaca.json"
    alpaca.write_text(
        json.dumps([{"instruction": f"q{i}", "input": "", "output": f"a{i}"} for i in range(8)])
    )
    spec = f"{alpaca}::format=alpaca,weight=1.5"
    pack = root / "pack"
    r = cli("pack", chats, spec, "--len", 512, "--overflow", "split", "--seed", 4, "--out", pack)
    assert r.exit_code == 0, r.output
    return chats, str(alpaca), spec, pack


def test_a_mixture_passes_sources(built):
    _, _, spec, pack = built
    m = manifest(pack)
    assert [e["spec"] for e in m["inputs"]][1] == spec and m["inputs"][1]["block"]["copies"] == 2
    code, checks = verify(pack, "--sources")
    assert code == 0, failed(checks)
    assert "of 2 inputs" in checks[vs.FILES]["message"]
    assert checks[vs.TOKENS]["evidence"]["records_compared"] == m["counts"]["tokenized"] == 32
    from packtool.tokenization.mixture import selection

    # the pack's --seed 4 (not verify's --seed) redraws the subsample: another seed draws others
    assert selection(8, 1.5, 4, 2)[1].tolist() != selection(8, 1.5, 0, 2)[1].tolist()


def test_a_changed_token_is_named_by_input_record_and_copy(built, tmp_path):
    _, alpaca, _, pack = built
    pack = copy_pack(pack, tmp_path)
    m = manifest(pack)
    lo = m["inputs"][1]["block"]["offset"]
    for i in range(len(audit.list_shards(str(pack)))):
        rel, table = st.read_shard(str(pack), i)
        lab = st.token_column(table, "labels")
        pos = st.token_column(table, "position_ids")
        doc = st.token_column(table, "document_id")
        srcs = table.column("source_index").to_pylist()
        hits = [
            (int(r), int(p))
            for r, p in np.argwhere((lab == schema.IGNORE_INDEX) & (doc >= 0) & (pos > 0))
            if srcs[r][doc[r, p]] >= lo + 8  # a document of input 2's second copy
        ]
        if hits:
            break
    r, p = hits[0]
    src = srcs[r][doc[r, p]]
    ids = st.token_column(table, "input_ids")
    ids[r, p] += 1
    st.write_shard(str(pack), rel, st.replace_columns(table, input_ids=ids))
    assert verify(pack)[0] == 0  # consistent: integrity cannot see it
    code, checks = verify(pack, "--sources")
    assert code == 1 and list(failed(checks)) == [vs.TOKENS]
    msg = checks[vs.TOKENS]["message"]
    record = src - lo - 8
    assert f"input 2 ({alpaca}) record {record}, copy 1: {alpaca} record {record}" in msg, msg


def test_data_for_a_mixture_is_only_the_folder_pack_ran_in(built, tmp_path, monkeypatch):
    chats, alpaca, spec, _ = built
    code, checks = verify(built[3], "--sources", chats)
    assert code == 1 and "is a mixture of 2 inputs" in checks[vs.FILES]["message"]
    assert "packtool verify PACK --sources FOLDER" in checks[vs.FILES]["message"]
    # packed with relative paths in the data folder, verified from elsewhere
    root = os.path.dirname(chats)
    monkeypatch.chdir(root)
    pack = tmp_path / "rel"
    r = cli("pack", "chats.jsonl", "alpaca.json::weight=0.5", "--len", 512, "--out", pack)
    assert r.exit_code == 0, r.output
    monkeypatch.chdir(tmp_path)
    code, checks = verify(pack, "--sources")
    assert code == 1 and "input 1 (chats.jsonl)" in checks[vs.FILES]["message"]
    assert "--sources FOLDER" in checks[vs.FILES]["message"]
    code, checks = verify(pack, "--sources", root)
    assert code == 0, failed(checks)


def test_a_changed_weight_in_the_manifest_is_caught(built, tmp_path):
    pack = copy_pack(built[3], tmp_path)
    m = manifest(pack)
    m["inputs"][1]["weight"] = 1.0
    (pack / schema.MANIFEST).write_text(json.dumps(m))
    code, checks = verify(pack, "--sources")
    assert code == 1 and failed(checks)
