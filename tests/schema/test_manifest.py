"""The typed manifest: v1 packs already written read back byte for byte; conservation names what is off."""

from __future__ import annotations

import copy
import json
import re

import pytest
from paths import TESTS

from packtool import schema

V1 = TESTS / "fixtures" / "v1_pack"


def _v1() -> dict:
    return json.loads((V1 / "manifest.json").read_text())


def test_a_v1_pack_written_before_reads_and_writes_back_identically():
    d = _v1()
    m = schema.Manifest.from_json(d)
    assert m.pack_len == 2048 and m.counts.rows == 5 and m.counts.split_parts == 4
    assert m.tokens.in_ == d["tokens"]["in"]
    out = m.to_json()
    assert out == d and list(out) == list(d)  # same keys, same order: the same bytes
    from packtool.io.shards import manifest_text

    assert manifest_text(out) == (V1 / "manifest.json").read_text()


def test_unknown_keys_are_kept():
    d = _v1()
    d["written_by_a_later_version"] = {"x": 1}
    assert schema.Manifest.from_json(d).to_json()["written_by_a_later_version"] == {"x": 1}


@pytest.mark.parametrize(
    "damage,match",
    [
        (lambda d: d.pop("counts"), "counts is not recorded"),
        (lambda d: d["counts"].pop("rows"), r"counts\.rows is not recorded as an integer"),
        (lambda d: d["tokens"].update({"in": "12"}), r"tokens\.in is not recorded as an integer"),
        (lambda d: d.update({"pack_len": True}), "pack_len is not an integer"),
        (
            lambda d: d.update({"schema_version": 2}),
            "schema_version 2; this packtool reads version 1",
        ),
        (lambda d: d.pop("packtool_version"), "not a packtool manifest"),
    ],
)
def test_damaged_manifests_name_the_key(damage, match):
    d = _v1()
    damage(d)
    with pytest.raises(schema.ManifestError, match=match):
        schema.Manifest.from_json(d, where="out/manifest.json")


def _listed(d):
    return {k: d[k] for k in ("skipped", "dropped", "truncated", "split")}


def test_conservation_of_a_real_pack_holds():
    d = _v1()
    assert schema.conservation_problems(d["counts"], d["tokens"], _listed(d)) == []


@pytest.mark.parametrize(
    "damage,match",
    [
        (
            lambda d: d["counts"].update(examples_read=6),
            r"examples_read 6 != tokenized 5 \+ skipped 0",
        ),
        (
            lambda d: d["counts"].update(packed=3),
            r"tokenized 5 != packed 3 \+ truncated 0 \+ split 1 \+ dropped 0",
        ),
        (
            lambda d: d["tokens"].update(cut=d["tokens"]["cut"] + 2),
            "tokens in .* != out .* \\+ cut",
        ),
        (
            lambda d: d["tokens"].update(loss_cut=d["tokens"]["loss_cut"] + 1),
            "loss tokens in .* != out",
        ),
        (
            lambda d: d["split"].append({"source_index": 9, "length": 1, "parts": 1}),
            "counts.split is 1 but 2 entries",
        ),
        (
            lambda d: d["dropped"].append({"source_index": 9, "length": 5, "reason": "x"}),
            "the dropped and truncated lists account for 5",
        ),
        (lambda d: d["counts"].pop("skipped"), "counts.skipped not recorded"),
    ],
)
def test_conservation_names_each_broken_rule(damage, match):
    d = copy.deepcopy(_v1())
    damage(d)
    problems = schema.conservation_problems(d["counts"], d["tokens"], _listed(d))
    assert problems and any(re.search(match, p) for p in problems), problems


def test_read_pack_manifest(tmp_path):
    assert schema.read_pack_manifest(str(V1))["pack_len"] == 2048
    assert schema.read_pack_manifest(str(tmp_path)) is None
    (tmp_path / "manifest.json").write_text('{"name": "someone else\'s"}')
    assert schema.read_pack_manifest(str(tmp_path)) is None
