"""`packtool pack A B::weight=...`: a mixture of two shared files of different formats, every example
of each input accounted for in the manifest (`inputs`) and in the rows, weights deterministic, and
`verify` (integrity and --sources) passing on it."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest
from paths import SHARED_DATA, needs_shared
from typer.testing import CliRunner

from packtool import schema
from packtool.cli import app
from packtool.verify.accounting import input_rows_problems

pytestmark = needs_shared("data", "identity.json")
ALPACA = str(SHARED_DATA / "identity.json")  # 91 alpaca records
CHATS = str(SHARED_DATA / "toy_chat_fine_tuning.jsonl")  # 5 messages records, long ones
runner = CliRunner()


def cli(*args):
    r = runner.invoke(app, [str(a) for a in args])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exception
    return r


def pack(out, *inputs, seed=0, extra=()):
    r = cli(
        "pack", *inputs, "--len", 4096, "--overflow", "split", "--seed", seed, *extra, "--out", out
    )
    assert r.exit_code == 0, r.output
    return json.loads((out / schema.MANIFEST).read_text())


def rows_sources(out) -> np.ndarray:
    return np.concatenate(
        [
            np.concatenate(pq.read_table(p, columns=["source_index"]).column(0).to_pylist() or [[]])
            for p in sorted((out / "data").glob("*.parquet"))
        ]
    ).astype(np.int64)


@pytest.fixture(scope="module")
def mixture(tmp_path_factory):
    out = tmp_path_factory.mktemp("mix") / "pack"
    return out, pack(out, ALPACA, f"{CHATS}::weight=1.5")


def test_every_example_of_each_input_is_accounted_for(mixture):
    out, m = mixture
    a, c = m["inputs"]
    assert (a["spec"], a["format"], a["weight"]) == (ALPACA, "alpaca", 1.0)
    assert (c["spec"], c["format"], c["weight"]) == (f"{CHATS}::weight=1.5", "messages", 1.5)
    assert a["block"] == {"offset": 0, "records": 91, "copies": 1}
    assert c["block"] == {"offset": 91, "records": 5, "copies": 2}
    assert a["counts"]["read"] == a["counts"]["tokenized"] == a["counts"]["examples"] == 91
    assert c["counts"]["tokenized"] == 5 and c["counts"]["examples"] == 8  # 5 + round(2.5)
    assert c["counts"]["not_selected"] == 2
    assert [f["path"] for f in a["files"]] == [ALPACA] and len(c["files"][0]["sha256"]) == 64
    assert a["options"] == {
        "format": None,
        "split": "train",
        "columns": [],
        "roles": [],
        "on_error": "error",
        "limit": None,
    }
    assert schema.conservation_problems(m["counts"], m["tokens"], inputs=m["inputs"]) == []
    assert m["counts"]["examples_read"] == 99 and m["counts"]["tokenized"] == 99
    assert m["options"]["input"] == [ALPACA, f"{CHATS}::weight=1.5"]
    assert m["format"].startswith("mixed: alpaca (identity.json 91), messages")
    src = rows_sources(out)
    whole = np.unique(src)
    assert whole.size == 99  # nothing dropped with --overflow split: every example after weighting
    assert np.all(whole[:91] == np.arange(91))  # alpaca records as themselves
    chats = whole[91:]
    assert set(chats[:5]) == set(range(91, 96)) and set(chats[5:]) <= set(range(96, 101))
    assert input_rows_problems(m["inputs"], src) == []


def test_the_per_input_rules_catch_a_damaged_manifest(mixture):
    out, m = mixture
    src = rows_sources(out)
    bad = json.loads(json.dumps(m["inputs"]))
    bad[1]["counts"]["packed"] += 1
    assert "input 2" in " ".join(schema.conservation_problems(m["counts"], m["tokens"], inputs=bad))
    moved = json.loads(json.dumps(m["inputs"]))
    moved[1]["block"]["offset"] = 92
    assert any(
        "blocks follow each other" in p
        for p in schema.conservation_problems(m["counts"], m["tokens"], inputs=moved)
    )
    assert any(
        "in no input's block" in p for p in input_rows_problems(m["inputs"], np.append(src, 500))
    )


def test_verify_passes_integrity_and_sources(mixture):
    out, _ = mixture
    r = cli("verify", out, "--rows", 0, "--sources", "--json", "-")
    assert r.exit_code == 0, r.output
    checks = {c["name"]: c for c in json.loads(r.stdout)["checks"]}
    assert all(c["status"] != "fail" for c in checks.values()), checks
    tokens = checks["sources tokens"]
    assert tokens["status"] == "pass" and tokens["evidence"]["records_compared"] == 99


def test_verify_sources_names_the_input_whose_file_changed(mixture, tmp_path):
    import shutil

    out, m = mixture
    copy = tmp_path / "pack"
    shutil.copytree(out, copy)
    m = json.loads((copy / schema.MANIFEST).read_text())
    m["inputs"][1]["files"][0]["sha256"] = "0" * 64
    (copy / schema.MANIFEST).write_text(json.dumps(m))
    r = cli("verify", copy, "--rows", 0, "--sources", "--json", "-")
    assert r.exit_code != 0
    fail = [c for c in json.loads(r.stdout)["checks"] if c["status"] == "fail"]
    assert any("input 2" in c["message"] and "toy_chat" in c["message"] for c in fail), fail


def test_weights_are_deterministic_and_seeded(mixture, tmp_path):
    out, m = mixture
    again = pack(tmp_path / "again", ALPACA, f"{CHATS}::weight=1.5")
    for key in ("inputs", "counts", "tokens", "shards"):
        assert again[key] == m[key]
    from packtool.tokenization.mixture import selection

    other = pack(tmp_path / "other", ALPACA, f"{CHATS}::weight=1.5", seed=3)
    assert other["inputs"][1]["counts"]["examples"] == 8
    for seed, folder in ((0, out), (3, tmp_path / "other")):
        # copy 1 of input 2 (offset 91 + 5 records): the documented seeded draw of 3 of its 5
        drawn = {96 + int(r) for r in selection(5, 1.5, seed, 2)[1]}
        assert set(np.unique(rows_sources(folder))[96:].tolist()) == drawn


def test_weight_two_packs_every_example_twice(tmp_path):
    m = pack(tmp_path / "w2", f"{ALPACA}::weight=2,format=alpaca", CHATS)
    a, c = m["inputs"]
    assert (
        a["block"] == {"offset": 0, "records": 91, "copies": 2} and a["counts"]["examples"] == 182
    )
    assert c["block"]["offset"] == 182 and m["counts"]["tokenized"] == 187
    src = np.unique(rows_sources(tmp_path / "w2"))
    assert src.size == 187 and set(range(182)) <= set(src.tolist())


def test_a_single_input_has_no_inputs_key(tmp_path):
    m = pack(tmp_path / "one", ALPACA)
    assert "inputs" not in m and m["options"]["input"] == ALPACA


@pytest.mark.parametrize(
    "args, match",
    [
        ((ALPACA, "nope.jsonl::weight=2"), r"input 2 \(nope.jsonl::weight=2\): .*does not exist"),
        ((ALPACA, f"{CHATS}::train-on=last"), r"train-on is a global option"),
        ((ALPACA, f"{CHATS}::weight=0"), r"weight=0.0 must be a number > 0"),
    ],
)
def test_bad_inputs_are_usage_errors(tmp_path, args, match):
    import re

    r = cli("pack", *args, "--len", 4096, "--out", tmp_path / "x")
    assert r.exit_code == 2, r.output
    assert re.search(match, " ".join(r.output.split())), r.output
    assert not (tmp_path / "x").exists()


def test_profile_on_two_inputs_says_what_each_contributes(tmp_path):
    r = cli("profile", ALPACA, f"{CHATS}::weight=1.5", "--json", tmp_path / "p.json")
    assert r.exit_code == 0, r.output
    assert "inputs" in r.output and "identity.json" in r.output
    doc = json.loads((tmp_path / "p.json").read_text())
    a, c = doc["source"]["inputs"]
    assert (a["examples"], c["examples"]) == (91, 8)
    assert a["tokens"] + c["tokens"] == doc["counts"]["tokens"]
    assert abs(a["share"] + c["share"] - 1) < 1e-5 and a["format"] == "alpaca"
    assert f"{CHATS}::weight=1.5" in doc["recommendation"]["command"]


def test_the_report_counts_records_and_lists_each_input(tmp_path):
    r = runner.invoke(
        app,
        ["pack", ALPACA, f"{CHATS}::weight=1.5", "--len", "4096", "--out", str(tmp_path / "p")],
        env={"COLUMNS": "300"},
    )
    assert r.exit_code == 0, r.output
    flat = " ".join(r.output.split())
    assert "96 records read from 2 inputs, 0 skipped, 99 examples after weights" in flat
    assert f"input 2 │ {CHATS}::weight=1.5: 5 read, 0 skipped, weight 1.5 → 8 examples" in flat
