"""The row layout (--pad-to-multiple, --fixed-docs): slots per document, what a manifest records,
and the manifest's bytes staying those of earlier packs when the layout is the default."""

from __future__ import annotations

import json

import numpy as np
import pytest
from paths import TESTS

from packtool import schema

V1 = TESTS / "fixtures" / "v1_pack"


def _v1() -> dict:
    return json.loads((V1 / "manifest.json").read_text())


def test_slots_round_each_document_up_to_the_multiple():
    lay = schema.Layout(pad_to_multiple=8)
    assert lay.slots([1, 7, 8, 9, 16, 0]).tolist() == [8, 8, 8, 16, 16, 0]
    assert lay.padded and lay != schema.Layout()
    assert schema.Layout().slots(np.array([3, 5])).tolist() == [3, 5]
    assert not schema.Layout().padded and not schema.Layout().fixed_docs


def test_layout_from_manifest():
    assert schema.Layout.from_manifest(_v1()) == schema.Layout()  # written before the options
    m = {"pad_to_multiple": 8, "fixed_docs": True, "max_docs": 16}
    assert schema.Layout.from_manifest(m) == schema.Layout(8, 16)
    assert schema.Layout.from_manifest({"fixed_docs": False, "max_docs": 16}).fixed_docs == 0
    # damaged values count as the default (the manifest check reports them)
    assert schema.Layout.from_manifest({"pad_to_multiple": "8", "fixed_docs": 1}) == schema.Layout()
    assert schema.Layout.from_manifest(None) == schema.Layout()


def test_layout_fields_round_trip_and_default_manifests_keep_their_keys():
    d = _v1()
    m = schema.Manifest.from_json(d)
    assert m.pad_to_multiple == 1 and m.fixed_docs is False and m.tokens.doc_pad is None
    out = m.to_json()
    assert list(out) == list(d) and "doc_pad" not in out["tokens"]  # default: nothing new written
    d2 = dict(d, pad_to_multiple=8, fixed_docs=True)
    d2["tokens"] = dict(d["tokens"], doc_pad=12)
    m2 = schema.Manifest.from_json(d2)
    assert (m2.pad_to_multiple, m2.fixed_docs, m2.tokens.doc_pad) == (8, True, 12)
    assert m2.to_json() == d2


@pytest.mark.parametrize(
    "key,value,match",
    [
        ("pad_to_multiple", "8", "pad_to_multiple is not an integer"),
        ("pad_to_multiple", True, "pad_to_multiple is not an integer"),
        ("fixed_docs", 1, "fixed_docs is not true or false"),
    ],
)
def test_bad_layout_values_are_named(key, value, match):
    with pytest.raises(schema.ManifestError, match=match):
        schema.Manifest.from_json(dict(_v1(), **{key: value}))


def test_conservation_bounds_the_padding_inside_documents():
    d = _v1()
    t = dict(d["tokens"], doc_pad=d["tokens"]["pad"])
    assert schema.conservation_problems(d["counts"], t) == []
    t["doc_pad"] = d["tokens"]["pad"] + 1
    assert any(
        "doc_pad" in p and "> tokens.pad" in p for p in schema.conservation_problems(d["counts"], t)
    )
    t["doc_pad"] = -1
    assert any(
        "doc_pad -1 is not a count" in p for p in schema.conservation_problems(d["counts"], t)
    )
