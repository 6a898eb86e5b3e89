"""`packtool verify PACK --sources [DATA]`: damage that is consistent but wrong (every count and
checksum re-signed) passes the integrity layer and is caught by tokenizing the sources again.

A real pack is built once with the CLI (`packtool sample`, then `packtool pack --overflow split`
with the built-in tokenizer); each test damages a copy, re-signs it (shard sha256 and rows, counts
in the manifest) and checks that plain `verify` passes while `verify --sources` fails naming the
source record (file:line), the shard, the row and the position, with got vs expected values.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from packs import merge_first_two  # noqa: E402  (fixture damage)
from typer.testing import CliRunner

from packtool import schema
from packtool.cli import app
from packtool.verify import integrity as integ
from packtool.verify import selftest as st
from packtool.verify import sources as vs

runner = CliRunner()
L = 512


def cli(*args):
    return runner.invoke(app, [str(a) for a in args])


def verify(pack, *args):
    """(exit code, {check name: check dict}) of `packtool verify PACK --rows 0 ARGS --json -`."""
    r = cli("verify", pack, "--rows", 0, *args, "--json", "-")
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    doc = json.loads(r.stdout)
    return r.exit_code, {c["name"]: c for c in doc["checks"]}


def failed(checks: dict) -> dict:
    return {n: c for n, c in checks.items() if c["status"] == "fail"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("sources")
    data = root / "data" / "chats.jsonl"
    data.parent.mkdir()
    r = cli("sample", data, "--n", 40, "--seed", 3)
    assert r.exit_code == 0, r.output
    pack = root / "pack"
    r = cli("pack", data, "--len", L, "--out", pack, "--overflow", "split", "--shard-rows", 4)
    assert r.exit_code == 0, r.output
    return data, pack


@pytest.fixture
def pack(built, tmp_path):
    dst = tmp_path / "pack"
    shutil.copytree(built[1], dst)
    return dst


def _manifest(pack) -> dict:
    return json.loads((pack / schema.MANIFEST).read_text())


def _edit_manifest(pack, fn) -> None:
    m = _manifest(pack)
    fn(m)
    (pack / schema.MANIFEST).write_text(json.dumps(m, indent=1))


def _prompt_token(table, skip_first: bool = True):
    """(row, position, document, source_index) of a prompt token (label -100) inside a document,
    not a document's first token."""
    lab = st.token_column(table, "labels")
    pos = st.token_column(table, "position_ids")
    doc = st.token_column(table, "document_id")
    r, p = np.argwhere((lab == schema.IGNORE_INDEX) & (doc >= 0) & (pos > 0))[0]
    k = int(doc[r, p])
    return int(r), int(p), k, int(table.column("source_index").to_pylist()[r][k])


def _shard_with_split_free_rows(pack, split_sources):
    """(rel, table) of a shard whose first prompt token belongs to a record that was not split."""
    for i in range(len(integ.list_shards(str(pack)))):
        rel, table = st.read_shard(str(pack), i)
        if _prompt_token(table)[3] not in split_sources:
            return rel, table
    raise AssertionError("every shard starts with a split record")


# ---------------------------------------------------------------------------------------------


def test_manifest_records_every_tokenize_option(built):
    data, pack = built
    opts = _manifest(pack)["options"]
    assert opts["input"] == str(data)
    assert opts["train_on"] == "assistant" and opts["chat_template"] is None and opts["tokenizer"] is None
    assert opts["read"] == {**opts["read"], "format": None, "split": "train", "columns": [], "roles": [],
                            "on_error": "error", "limit": None}
    cfg, missing = vs.tokenize_config_from(_manifest(pack))
    assert missing == [] and cfg.cache is False and cfg.read.columns == ()


def test_untouched_pack_passes(built):
    code, checks = verify(built[1], "--sources")
    assert code == 0, [c["message"] for c in failed(checks).values()]
    for name in vs.ORDER:
        assert checks[name]["status"] == "pass", (name, checks[name]["message"])
    tok = checks[vs.TOKENS]
    m = _manifest(built[1])
    assert m["counts"]["split"] >= 1  # the parts of split records were matched, too
    assert tok["evidence"]["documents"] == m["counts"]["documents"]
    assert tok["evidence"]["tokens_compared"] == m["tokens"]["out"]
    assert tok["message"].startswith(f"every one of the {m['counts']['tokenized']} packed records")


def test_prompt_token_trained_passes_integrity_but_not_sources(pack):
    split_sources = {s["source_index"] for s in _manifest(pack)["split"]}
    rel, table = _shard_with_split_free_rows(pack, split_sources)
    r, p, k, src = _prompt_token(table)
    ids, lab = st.token_column(table, "input_ids"), st.token_column(table, "labels")
    lab[r, p] = ids[r, p]
    nloss = table.column("num_loss_tokens").to_numpy().copy()
    nloss[r] += 1
    st.write_shard(str(pack), rel, st.replace_columns(table, labels=lab, num_loss_tokens=nloss))
    _edit_manifest(pack, lambda m: m["tokens"].update(loss_out=m["tokens"]["loss_out"] + 1,
                                                       loss_in=m["tokens"]["loss_in"] + 1))
    code, checks = verify(pack)
    assert code == 0, [c["message"] for c in failed(checks).values()]  # consistent: integrity cannot see it

    code, checks = verify(pack, "--sources")
    assert code == 1
    bad = failed(checks)
    msg = bad[vs.TOKENS]["message"]
    assert msg.startswith(f"{_manifest(pack)['options']['input']}:{src + 1} (source_index {src}) -> {rel} row {r} "
                          f"position {p} (document {k}, token "), msg
    assert f"label {ids[r, p]}, expected -100 (a prompt token trained)" in msg
    t = int(st.token_column(table, "position_ids")[r, p])  # token index within its document
    assert re.search(rf"row positions {p - min(t, 3)}\.\.{p + 3}: input_ids got \[.*\] expected \[.*\], labels got "
                     rf"\[.*\] expected \[.*\]", msg), msg
    first = bad[vs.TOKENS]["evidence"]["first"][0]
    assert (first["shard"], first["row"], first["position"], first["source_index"]) == (rel, r, p, src)
    assert first["got"]["label"] == ids[r, p] and first["expected"]["label"] == schema.IGNORE_INDEX
    # the manifest's loss counts were re-signed too: re-tokenizing gives the true ones
    assert "tokens.loss_in is" in bad[vs.ACCOUNT]["message"]


def test_prompt_token_id_changed_is_caught(pack):
    split_sources = {s["source_index"] for s in _manifest(pack)["split"]}
    rel, table = _shard_with_split_free_rows(pack, split_sources)
    r, p, k, src = _prompt_token(table)
    ids = st.token_column(table, "input_ids")
    old = int(ids[r, p])
    ids[r, p] = old + 1  # label stays -100: consistent
    st.write_shard(str(pack), rel, st.replace_columns(table, input_ids=ids))
    assert verify(pack)[0] == 0

    code, checks = verify(pack, "--sources")
    assert code == 1 and list(failed(checks)) == [vs.TOKENS]
    msg = checks[vs.TOKENS]["message"]
    assert f":{src + 1} (source_index {src}) -> {rel} row {r} position {p} (document {k}, token " in msg
    assert f"input_id {old + 1}, expected {old}" in msg and "label" not in msg.split(";")[0]
    assert "(+" not in msg  # exactly one document differs


def test_damaged_split_part_is_caught_and_named_as_a_part(pack):
    """A split record's parts are told apart by content: a damaged part is still compared with its
    own part and named with its part number."""
    split = _manifest(pack)["split"][0]
    src = split["source_index"]
    for i in range(len(integ.list_shards(str(pack)))):
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
    assert re.search(rf"\(source_index {src}, part \d of {split['parts']}: record tokens \d+\.\.\d+\) -> {rel} "
                     rf"row {r} position {col} \(document {k}, token 5\): input_id", msg), msg


@pytest.mark.parametrize("overflow", ["truncate", "drop"])
def test_truncated_and_dropped_records(built, tmp_path, overflow):
    """Over-length records are cut to --len (truncate) or left out (drop) exactly as the packer does;
    damage in a truncated record is named with the cut."""
    pack = tmp_path / overflow
    r = cli("pack", built[0], "--len", 256, "--out", pack, "--overflow", overflow)
    assert r.exit_code == 0, r.output
    m = _manifest(pack)
    assert m["counts"]["truncated" if overflow == "truncate" else "dropped"] >= 1
    code, checks = verify(pack, "--sources")
    assert code == 0, [c["message"] for c in failed(checks).values()]
    if overflow == "drop":
        return
    cut = {t["source_index"]: t for t in m["truncated"]}
    for i in range(len(integ.list_shards(str(pack)))):
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
    assert f"(source_index {src}, truncated to 256 of {cut[src]['length']} tokens) -> {rel} row {r} position {col} " \
           f"(document {k}, token 255): input_id {ids[r, col]}, expected {ids[r, col] - 1}" in checks[vs.TOKENS]["message"]


def test_changed_source_file_fails_its_sha256(built, pack, tmp_path):
    data = tmp_path / "moved" / "chats.jsonl"
    data.parent.mkdir()
    lines = built[0].read_text().splitlines(keepends=True)
    lines[2] = lines[2].replace('"content": "', '"content": "x', 1)
    data.write_text("".join(lines))
    code, checks = verify(pack, "--sources", data)
    assert code == 1
    msg = checks[vs.FILES]["message"]
    assert msg.startswith(f"{data}: sha256 ") and "the manifest records" in msg and "the source changed after packing" in msg
    assert checks[vs.TOKENS]["status"] == "skip" and checks[vs.TOKENS]["message"] == f"not run: {vs.FILES} failed"


def test_data_moved_needs_and_takes_the_new_path(built, pack, tmp_path):
    moved = tmp_path / "elsewhere" / "chats.jsonl"
    moved.parent.mkdir()
    shutil.copy(built[0], moved)
    gone = "/nonexistent/machine-a/chats.jsonl"

    def elsewhere(m):
        m["options"]["input"] = gone
        m["sources"][0]["path"] = gone

    _edit_manifest(pack, elsewhere)
    code, checks = verify(pack, "--sources")
    assert code == 1
    assert checks[vs.FILES]["message"].startswith(f"cannot read the sources at {gone}: ")
    assert "pass it: packtool verify PACK --sources DATA" in checks[vs.FILES]["message"]

    code, checks = verify(pack, "--sources", moved)
    assert code == 0, [c["message"] for c in failed(checks).values()]
    assert checks[vs.FILES]["message"] == f"1 source file(s) at {moved}: sha256 match the manifest"


def test_relative_source_path_is_found_beside_the_pack(built, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(built[0], work / "chats.jsonl")
    monkeypatch.chdir(work)
    assert cli("pack", "chats.jsonl", "--len", L, "--out", "rel").exit_code == 0
    assert _manifest(work / "rel")["sources"][0]["path"] == "chats.jsonl"
    monkeypatch.chdir(tmp_path)  # verify from somewhere else: the path is relative to where pack ran
    code, checks = verify(work / "rel", "--sources")
    assert code == 0, [c["message"] for c in failed(checks).values()]
    assert checks[vs.FILES]["evidence"]["data"] == str(work / "chats.jsonl")


def test_sample_compares_only_n_records_deterministically(built):
    code, a = verify(built[1], "--sources", "--sample", 5)
    assert code == 0
    ev = a[vs.TOKENS]["evidence"]
    n = _manifest(built[1])["counts"]["tokenized"]
    assert ev["records_compared"] == 5 and len(ev["sampled_source_index"]) == 5
    assert a[vs.TOKENS]["message"].startswith(f"5 of {n} packed records (--sample 5, --seed 0)")
    assert verify(built[1], "--sources", "--sample", 5)[1][vs.TOKENS]["evidence"]["sampled_source_index"] == \
        ev["sampled_source_index"]
    other = verify(built[1], "--sources", "--sample", 5, "--seed", 1)[1][vs.TOKENS]["evidence"]
    assert other["sampled_source_index"] != ev["sampled_source_index"]


def test_sample_skips_damage_outside_the_sample(pack):
    """--sample compares only the records it picks: the damaged one is found when picked, not
    otherwise (records are picked with numpy's default_rng(seed) among the packed ones)."""
    rel, table = st.read_shard(str(pack), 0)
    r, p, k, src = _prompt_token(table)
    ids = st.token_column(table, "input_ids")
    ids[r, p] += 1
    st.write_shard(str(pack), rel, st.replace_columns(table, input_ids=ids))
    n = _manifest(pack)["counts"]["tokenized"]  # nothing dropped or skipped: record i = source_index i
    picks = {seed: int(np.random.default_rng(seed).choice(n, size=1, replace=False)[0]) for seed in range(200)}
    hit = next(seed for seed, i in picks.items() if i == src)
    miss = next(seed for seed, i in picks.items() if i != src)
    code, checks = verify(pack, "--sources", "--sample", 1, "--seed", hit)
    assert checks[vs.TOKENS]["evidence"]["sampled_source_index"] == [src]
    assert code == 1 and f"(source_index {src}" in checks[vs.TOKENS]["message"]
    code, checks = verify(pack, "--sources", "--sample", 1, "--seed", miss)
    assert code == 0 and checks[vs.TOKENS]["evidence"]["sampled_source_index"] == [picks[miss]]


def test_merged_documents_named_by_row(pack):
    rel, table = st.read_shard(str(pack), 0)
    r, srcs, a, b, merged = merge_first_two(table, keep_source=False)
    st.write_shard(str(pack), rel, merged)
    _edit_manifest(pack, lambda m: m["counts"].update(documents=m["counts"]["documents"] - 1))
    code, checks = verify(pack)
    assert code == 1
    msg = checks[integ.CONSERVE]["message"]
    assert f"source_index {srcs[1]} is in no row and not listed as skipped or dropped (merged into another document" in msg
    code, checks = verify(pack, "--sources")
    assert code == 1
    msg = checks[vs.TOKENS]["message"]
    part = r"(, part \d+ of \d+: record tokens \d+\.\.\d+)?"  # either may be a part of a split record
    assert re.search(rf"\(source_index {srcs[0]}{part}\) -> {re.escape(rel)} row {r} document 0: document 0 holds "
                     rf"{a + b} tokens, the record gives {a} when tokenized again \(documents merged or tokens added\)",
                     msg), msg
    text = " ".join(e["message"] for e in checks[vs.TOKENS]["evidence"]["first"])
    assert re.search(rf"\(source_index {srcs[1]}{part}, {b} tokens\) is in no row and not dropped", text), text


def test_merged_documents_keeping_both_source_indices_named_by_row(pack):
    rel, table = st.read_shard(str(pack), 0)
    r, srcs, a, b, merged = merge_first_two(table, keep_source=True)
    st.write_shard(str(pack), rel, merged)
    code, checks = verify(pack)
    assert code == 1
    msg = checks[integ.SRC]["message"]
    assert msg.startswith(f"{rel} row {r}: {len(srcs)} source_index entries for {len(srcs) - 1} documents "
                          f"(source_index {srcs}, seq_lengths [{a + b}"), msg
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
    msg = checks[integ.SRC]["message"]
    v = min(src0)  # the smallest repeated index is named
    k = src0.index(v)
    assert msg.startswith(f"source_index {v} appears 2 times ({rel} row 0 document {k}, {rel} row {R - 1} "
                          f"document {k}), expected 1"), msg
    assert f"{rel} row {R - 1} holds the same documents as {rel} row 0 ({src0}): a duplicated row" in msg
    code, checks = verify(pack, "--sources")
    assert code == 1
    text = " ".join(e["message"] for e in checks[vs.TOKENS]["evidence"]["first"])
    assert f"(source_index {v}" in text and "packed 2 times" in text


def test_unknown_recorded_option_is_refused(pack):
    _edit_manifest(pack, lambda m: m["options"]["read"].update(shuffle_lines=True))
    code, checks = verify(pack, "--sources")
    assert code == 1
    assert checks[vs.OPTIONS]["message"].startswith("manifest options.read.shuffle_lines = True is unknown to "
                                                    "packtool ")
    assert checks[vs.TOKENS]["status"] == "skip"


def test_options_missing_from_an_older_manifest_take_defaults(pack):
    _edit_manifest(pack, lambda m: m.update(options={"train_on": "assistant", "chat_template": None}))
    code, checks = verify(pack, "--sources")
    assert code == 0, [c["message"] for c in failed(checks).values()]
    msg = checks[vs.OPTIONS]["message"]
    assert "not recorded, defaults used: " in msg and "options.read" in msg and "options.tokenizer_backend" in msg


def test_changed_template_hash_is_named(pack):
    _edit_manifest(pack, lambda m: m["tokenizer"].update(chat_template_hash="0" * 16))
    code, checks = verify(pack, "--sources")
    assert code == 1
    msg = checks[vs.TEMPLATE]["message"]
    assert msg.startswith("chat template 'chatml-train' (resolved from the recorded no --chat-template") and \
        f"the manifest records {'0' * 16}" in msg


def test_changed_tokenizer_hash_is_named(pack):
    _edit_manifest(pack, lambda m: m["tokenizer"].update(files_hash="f" * 16))
    code, checks = verify(pack, "--sources")
    assert code == 1
    assert checks[vs.TOKENIZER]["message"].startswith("the built-in tokenizer: files hash ")
    assert "the tokenizer's files changed since packing" in checks[vs.TOKENIZER]["message"]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (("--sample", "3"), "--sample N picks the records --sources compares; add --sources"),
        (("elsewhere.jsonl",), "is the data for --sources"),
        (("--sources", "--sample", "0"), "--sample 0 must be >= 1"),
    ],
)
def test_usage_errors(built, args, match):
    r = cli("verify", built[1], "--rows", 0, *args)
    assert r.exit_code == 2 and match in r.stderr, r.stderr


def test_self_test_with_sources_is_a_usage_error():
    r = cli("verify", "--self-test", "--sources")
    assert r.exit_code == 2 and "drop --sources" in r.stderr
