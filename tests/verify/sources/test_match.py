"""Which piece each shard document is (packtool/verify/sources/match.py): a split record's parts
told apart by content, documents merged or repeated, pieces in no row."""

from __future__ import annotations

import json
import re

from packs import merge_first_two  # noqa: E402  (fixture damage)
from sources_pack import cli, edit_manifest, failed, manifest, verify  # noqa: E402

from packtool import schema
from packtool.verify import audit, scan
from packtool.verify import selftest as st
from packtool.verify.sources import load as vs


def test_damaged_split_part_is_caught_and_named_as_a_part(pack):
    """A split record's parts are told apart by content: a damaged part is still compared with its
    own part and named with its part number."""
    split = manifest(pack)["split"][0]
    src = split["source_index"]
    for i in range(len(audit.list_shards(str(pack)))):
        rel, table = st.read_shard(str(pack), i)
        srcs = table.column("source_index").to_pylist()
        hit = [(r, k) for r, s in enumerate(srcs) for k, x in enumerate(s) if x == src]
        if hit:
            break
    r, k = hit[0]
    seq = table.column("seq_lengths").to_pylist()[r]
    col = sum(seq[:k]) + 5
    ids = st.token_column(table, "input_ids")
    ids[r, col] += 1
    lab = st.token_column(table, "labels")
    if lab[r, col] != schema.IGNORE_INDEX:
        lab[r, col] = ids[r, col]
    st.write_shard(str(pack), rel, st.replace_columns(table, input_ids=ids, labels=lab))
    assert verify(pack)[0] == 0
    code, checks = verify(pack, "--sources")
    assert code == 1
    msg = checks[vs.TOKENS]["message"]
    assert re.search(
        rf"\(source_index {src}, part \d of {split['parts']}: record tokens \d+\.\.\d+\) -> {rel} "
        rf"row {r} position {col} \(document {k}, token 5\): input_id",
        msg,
    ), msg


def test_merged_documents_named_by_row(pack):
    rel, table = st.read_shard(str(pack), 0)
    r, srcs, a, b, merged = merge_first_two(table, keep_source=False)
    st.write_shard(str(pack), rel, merged)
    edit_manifest(pack, lambda m: m["counts"].update(documents=m["counts"]["documents"] - 1))
    code, checks = verify(pack)
    assert code == 1
    msg = checks[scan.CONSERVE]["message"]
    assert (
        f"source_index {srcs[1]} is in no row and not listed as skipped or dropped (merged into another document"
        in msg
    )
    code, checks = verify(pack, "--sources")
    assert code == 1
    msg = checks[vs.TOKENS]["message"]
    part = (
        r"(, part \d+ of \d+: record tokens \d+\.\.\d+)?"  # either may be a part of a split record
    )
    assert re.search(
        rf"\(source_index {srcs[0]}{part}\) -> {re.escape(rel)} row {r} document 0: document 0 holds "
        rf"{a + b} tokens, the record gives {a} when tokenized again \(documents merged or tokens added\)",
        msg,
    ), msg
    text = " ".join(e["message"] for e in checks[vs.TOKENS]["evidence"]["first"])
    assert re.search(
        rf"\(source_index {srcs[1]}{part}, {b} tokens\) is in no row and not dropped", text
    ), text


def test_merged_documents_keeping_both_source_indices_named_by_row(pack):
    rel, table = st.read_shard(str(pack), 0)
    r, srcs, a, b, merged = merge_first_two(table, keep_source=True)
    st.write_shard(str(pack), rel, merged)
    code, checks = verify(pack)
    assert code == 1
    msg = checks[scan.SRC]["message"]
    assert msg.startswith(
        f"{rel} row {r}: {len(srcs)} source_index entries for {len(srcs) - 1} documents "
        f"(source_index {srcs}, seq_lengths [{a + b}"
    ), msg
    assert "documents merged (a boundary lost)" in msg


def test_duplicated_row_named_by_rows(pack):
    rel, table = st.read_shard(str(pack), 0)
    R = table.num_rows
    assert R >= 2
    idx = list(range(R))
    idx[R - 1] = 0  # the last row overwritten by a copy of row 0
    st.write_shard(str(pack), rel, table.take(idx))
    src0 = table.column("source_index").to_pylist()[0]
    code, checks = verify(pack)
    assert code == 1
    msg = checks[scan.SRC]["message"]
    v = min(src0)  # the smallest repeated index is named
    k = src0.index(v)
    assert msg.startswith(
        f"source_index {v} appears 2 times ({rel} row 0 document {k}, {rel} row {R - 1} "
        f"document {k}), expected 1"
    ), msg
    assert (
        f"{rel} row {R - 1} holds the same documents as {rel} row 0 ({src0}): a duplicated row"
        in msg
    )
    code, checks = verify(pack, "--sources")
    assert code == 1
    text = " ".join(e["message"] for e in checks[vs.TOKENS]["evidence"]["first"])
    assert f"(source_index {v}" in text and "packed 2 times" in text


def test_split_parts_with_the_same_tokens_told_apart_by_their_labels(tmp_path):
    """A record whose prompt and reply are one long run of the same token ('0' is one token in
    Qwen3): split at --len 256, several parts hold identical input_ids, some all prompt (no loss),
    some all reply (trained), some identical in labels too. Each shard document must be matched to a
    part with its labels, and each interchangeable part taken once (glaive_toolcall_en_demo.json
    record 243 failed both ways)."""
    data = tmp_path / "zeros.jsonl"
    chat = {
        "messages": [
            {"role": "user", "content": "0" * 900},
            {"role": "assistant", "content": "0" * 900},
        ]
    }
    data.write_text(json.dumps(chat) + "\n")
    pack = tmp_path / "pack"
    r = cli("pack", data, "--len", 256, "--overflow", "split", "--out", pack)
    assert r.exit_code == 0, r.output
    code, checks = verify(pack, "--sources")
    assert code == 0, failed(checks)
    assert checks["sources tokens"]["evidence"]["documents"] >= 7
