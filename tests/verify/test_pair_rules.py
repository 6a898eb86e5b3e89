"""The pair rules of a preference pack (verify/scan.py) pass a sound batch and catch each damage:
a side missing, a pair split across rows, sides swapped, a prompt token changed, a source changed,
a side with nothing trained."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from packtool.verify.scan import (
    IDS,
    PAIR_CHECKS,
    PAIR_PROMPT,
    PAIR_SIDES,
    PAIR_SOURCE,
    PAIR_TRAINED,
    pair_checks,
)

L = 16
IGNORE = -100


def _rows(rows):
    """rows: per row a list of (source, side, prompt ids, answer ids) → the batch's columns."""
    ids = np.zeros((len(rows), L), np.int64)
    labels = np.full((len(rows), L), IGNORE, np.int64)
    seq, src, side, off = [], [], [], [0]
    for r, docs in enumerate(rows):
        at = 0
        for s, sd, prompt, answer in docs:
            toks = prompt + answer
            ids[r, at : at + len(toks)] = toks
            labels[r, at + len(prompt) : at + len(toks)] = answer
            seq.append(len(toks))
            src.append(s)
            side.append(sd)
            at += len(toks)
        off.append(len(seq))
    return ids, labels, np.array(seq), np.array(off), np.array(src), np.array(side)


SOUND = [
    [
        (7, 0, [1, 2, 3], [4, 5]),
        (7, 1, [1, 2, 3], [6]),
        (3, 0, [9, 9], [8, 8]),
        (3, 1, [9, 9], [5]),
    ],
    [(1, 0, [2], [3, 3, 3]), (1, 1, [2], [4, 4])],
]


def _fails(rows):
    return {k: v[0] for k, v in pair_checks(*_rows(rows)).items()}


def test_a_sound_batch_passes_every_rule():
    assert _fails(SOUND) == dict.fromkeys(PAIR_CHECKS, 0)


@pytest.mark.parametrize(
    "damage,rule",
    [
        (lambda r: r[1].pop(), PAIR_SIDES),  # a side missing
        (lambda r: r.append([r[0].pop()]), PAIR_SIDES),  # the last pair split across two rows
        (lambda r: r[0].__setitem__(slice(0, 2), [r[0][1], r[0][0]]), PAIR_SIDES),  # sides swapped
        (
            lambda r: r[0].__setitem__(1, (7, 1, [1, 2, 4], [6])),
            PAIR_PROMPT,
        ),  # a prompt token changed
        (lambda r: r[0].__setitem__(1, (7, 1, [1, 2], [3, 6])), PAIR_PROMPT),  # prompt cut short
        (
            lambda r: r[0].__setitem__(1, (8, 1, [1, 2, 3], [6])),
            PAIR_SOURCE,
        ),  # another record's side
        (lambda r: r[0].__setitem__(1, (7, 1, [1, 2, 3, 6], [])), PAIR_TRAINED),  # nothing trained
    ],
)
def test_each_damage_is_caught_by_its_rule(damage, rule):
    rows = [list(r) for r in SOUND]
    damage(rows)
    fails = _fails(rows)
    assert fails[rule] >= 1, fails
    count, shown = pair_checks(*_rows(rows))[rule]
    assert shown and all(isinstance(m, str) and m for _, _, m in shown)


def test_fixed_docs_empty_entries_are_no_documents():
    ids, labels, seq, off, src, side = _rows(SOUND)
    # row 1 padded to 4 entries with empty ones (length 0, source -1)
    seq = np.concatenate([seq, [0, 0]])
    src = np.concatenate([src, [-1, -1]])
    side = np.concatenate([side, [0, 0]])
    off = np.array([0, 4, 8])
    fails = pair_checks(ids, labels, seq, off, src, side)
    assert {k: v[0] for k, v in fails.items()} == dict.fromkeys(PAIR_CHECKS, 0)


def test_verify_passes_a_real_pair_pack_and_catches_damage_to_it(tmp_path):
    """check_integrity on a pack that pack_tokenized wrote from pairs, then with a pair's sides
    swapped in a shard (the side column edited, checksums re-signed as a careful forger would)."""
    import sys

    import pyarrow as pa
    import pyarrow.parquet as pq

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "pack"))
    from test_pair_pack import pair_data

    from packtool.pack import PackConfig, pack_tokenized
    from packtool.verify.integrity import check_integrity

    out = tmp_path / "p"
    pack_tokenized(pair_data(), PackConfig(pack_len=128), out)
    checks, _ = check_integrity(str(out))
    # pair_data records no tokenizer vocab_size: the token ids' upper bound is skipped, not passed
    ids = next(c for c in checks if c.name == IDS)
    assert ids.skipped and "upper bound was not checked" in ids.message
    checks = [c for c in checks if c is not ids]
    assert all(c.passed for c in checks), [c.message for c in checks if not c.passed]
    assert {c.name for c in checks} >= set(PAIR_CHECKS)

    shard = next((out / "data").glob("*.parquet"))
    table = pq.read_table(shard)
    side = table.column("side").to_pylist()
    side[0][0], side[0][1] = 1, 0  # the first pair's sides swapped
    table = table.set_column(
        table.schema.get_field_index("side"), "side", pa.array(side, pa.list_(pa.int8()))
    )
    pq.write_table(table, shard)
    _resign(out)
    failed = {c.name for c in check_integrity(str(out))[0] if not c.passed and not c.skipped}
    assert failed == {PAIR_SIDES}


def _resign(out):
    import hashlib
    import json

    m = json.loads((out / "manifest.json").read_text())
    for s in m["shards"]:
        path = out / s["file"]
        s["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        s["bytes"] = path.stat().st_size
    (out / "manifest.json").write_text(json.dumps(m))
