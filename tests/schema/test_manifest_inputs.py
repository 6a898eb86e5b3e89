"""schema/manifest.py: a mixture's `inputs` (written only when there are several inputs) and the
per-input conservation rules (input_problems, through conservation_problems)."""

from __future__ import annotations

import copy
import json
import re

import pytest

from packtool import schema
from packtool.schema.manifest import input_problems


def entry(k, offset, records, copies, tokenized, skipped, examples, packed, dropped=0):
    return {
        "input": k,
        "spec": f"in{k}.jsonl",
        "block": {"offset": offset, "records": records, "copies": copies},
        "counts": {
            "read": records,
            "skipped": skipped,
            "tokenized": tokenized,
            "not_selected": copies * tokenized - examples,
            "examples": examples,
            "packed": packed,
            "truncated": 0,
            "split": 0,
            "dropped": dropped,
        },
    }


INPUTS = [entry(1, 0, 10, 1, 9, 1, 9, 8, dropped=1), entry(2, 10, 4, 2, 4, 0, 6, 6)]
COUNTS = {"examples_read": 16, "skipped": 1, "tokenized": 15, "packed": 14, "truncated": 0,
          "split": 0, "split_parts": 0, "dropped": 1}  # fmt: skip


def test_consistent_inputs_have_no_problems():
    assert input_problems(INPUTS, COUNTS) == []
    tokens = {"in": 5, "out": 5, "cut": 0}
    assert schema.conservation_problems(COUNTS, tokens, inputs=INPUTS) == []


@pytest.mark.parametrize(
    "edit, match",
    [
        (
            lambda i: i[0]["counts"].update(read=11),
            r"input 1 .*read 11 != tokenized 9 \+ skipped 1",
        ),
        (lambda i: i[1]["counts"].update(not_selected=0), r"input 2 .*x copies 2 != examples 6"),
        (lambda i: i[1]["counts"].update(packed=5), r"input 2 .*examples 6 != packed 5"),
        (lambda i: i[1]["block"].update(offset=11), r"input 2 .*expected offset 10"),
        (lambda i: i[0]["counts"].pop("examples"), r"input 1 .*not all recorded"),
        (lambda i: i[1].pop("block"), r"input 2 .*block offset/records/copies not recorded"),
    ],
)
def test_each_rule_names_the_input(edit, match):
    bad = copy.deepcopy(INPUTS)
    edit(bad)
    problems = input_problems(bad, COUNTS)
    assert problems and any(re.search(match, p) for p in problems), problems


def test_the_sums_must_match_the_global_counts():
    assert input_problems(INPUTS, {**COUNTS, "tokenized": 16}) == [
        "the inputs' examples add up to 15, counts.tokenized is 16"
    ]
    assert input_problems("nope") == ["inputs is str, not a list"]


def _manifest(**kw):
    return schema.Manifest(
        schema_version=schema.SCHEMA_VERSION, packtool_version="0", pack_len=8, strategy="bfd",
        order="sorted", max_docs=0, overflow="drop", shuffle=True, seed=0, shard_rows=1, pad_id=0,
        pad_id_from="x", tokenizer={}, tokenizer_backend={}, options={}, format="messages",
        sources=[], counts=schema.Counts(1, 0, 1, 1, 0, 0, 0, 0, 1, 1), skipped=[], dropped=[],
        truncated=[], split=[], tokens=schema.Tokens(1, 1, 0, 0, 0, 0, 0, 7), fill=0.125,
        lower_bound_rows=1, docs_per_row={}, shards=[], **kw,
    )  # fmt: skip


def test_inputs_are_written_after_sources_only_for_a_mixture():
    one = _manifest().to_json()
    assert "inputs" not in one
    assert schema.Manifest.from_json(json.loads(json.dumps(one))).inputs == []
    mix = _manifest(inputs=INPUTS).to_json()
    keys = list(mix)
    assert keys[keys.index("sources") + 1] == "inputs"
    assert schema.Manifest.from_json(json.loads(json.dumps(mix))).inputs == INPUTS
