"""Preference pairs packed (pack/run.py with data.task "preference"): each pair two adjacent
documents in one row, chosen first, both with the record's source_index, the `side` column; the
manifest counts and conserves pairs and declares the task and layout."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from packtool import schema
from packtool.data.tokenized import TokenizedData
from packtool.errors import UsageError
from packtool.pack import PackConfig, pack_tokenized


def pair_data(n: int = 60, seed: int = 0, long: tuple[int, ...] = ()) -> TokenizedData:
    """n pairs: prompt (untrained) + answer, the prompt the same on both sides; pairs `long`
    get answers of 90 tokens each."""
    rng = np.random.default_rng(seed)
    ids, labels, prompts = [], [], []
    for k in range(n):
        prompt = rng.integers(2, 500, rng.integers(3, 20)).tolist()
        for _side in range(2):
            size = 90 if k in long else int(rng.integers(1, 25))
            answer = rng.integers(2, 500, size).tolist()
            ids.append(prompt + answer)
            labels.append([-100] * len(prompt) + answer)
            prompts.append(len(prompt))
    data = TokenizedData.from_lists(
        ids, labels, source_index=np.repeat(np.arange(n), 2), tokenizer={"pad_id": 0}, num_read=n
    )
    data.task, data.prompt_lengths = "preference", np.array(prompts, np.int32)
    return data


def _rows(out):
    return pq.read_table(sorted((out / "data").glob("*.parquet"))[0]).to_pylist()


@pytest.mark.parametrize(
    "options", [{}, {"pad_to_multiple": 4}, {"max_docs": 4, "fixed_docs": True}]
)
def test_pairs_are_adjacent_in_one_row_chosen_first(tmp_path, options):
    data = pair_data()
    out = tmp_path / "p"
    pack_tokenized(data, PackConfig(pack_len=128, **options), out)
    m = json.loads((out / "manifest.json").read_text())
    assert m["task"] == "preference" and m["preference"]["pairs"] == 60
    assert m["counts"]["tokenized"] == 60 and m["counts"]["documents"] == 120
    assert schema.conservation_problems(m["counts"], m["tokens"]) == []
    seen = []
    for row in _rows(out):
        docs = [i for i, s in enumerate(row["source_index"]) if s >= 0]
        assert row["side"][: len(docs)] == [0, 1] * (len(docs) // 2)
        src = [row["source_index"][i] for i in docs]
        assert src[0::2] == src[1::2]
        seen += src[0::2]
    assert sorted(seen) == list(range(60))


def test_overflow_is_decided_per_pair(tmp_path):
    data = pair_data(long=(3, 7))
    pack_tokenized(data, PackConfig(pack_len=128, overflow="drop"), tmp_path / "d")
    m = json.loads((tmp_path / "d" / "manifest.json").read_text())
    assert [d["source_index"] for d in m["dropped"]] == [3, 7]
    assert m["counts"]["dropped"] == 2 and m["preference"]["pairs"] == 58
    assert schema.conservation_problems(m["counts"], m["tokens"], {"dropped": m["dropped"]}) == []
    r = pack_tokenized(data, PackConfig(pack_len=128, overflow="truncate"), tmp_path / "t")
    m = json.loads((tmp_path / "t" / "manifest.json").read_text())
    assert [t["source_index"] for t in m["truncated"]] == [3, 7] and m["counts"]["truncated"] == 2
    listed = {"dropped": m["dropped"], "truncated": m["truncated"]}
    assert schema.conservation_problems(m["counts"], m["tokens"], listed) == []
    assert any("truncated 2 pair(s)" in w.message for w in r.warnings)
    with pytest.raises(UsageError, match="split would put a pair"):
        pack_tokenized(data, PackConfig(pack_len=128, overflow="split"), tmp_path / "s")


def test_max_docs_counts_documents_and_one_cannot_hold_a_pair(tmp_path):
    """--max-docs counts documents: 1 is refused for pairs (it once meant no cap at all), and an
    odd K holds K // 2 pairs, a fixed-docs row's last entry empty."""
    data = pair_data()
    with pytest.raises(UsageError, match="--max-docs 1 cannot hold a preference pair"):
        pack_tokenized(data, PackConfig(pack_len=128, max_docs=1), tmp_path / "one")
    assert not (tmp_path / "one").exists()
    cfg = PackConfig(pack_len=128, max_docs=3, fixed_docs=True)
    pack_tokenized(data, cfg, tmp_path / "three")
    rows = _rows(tmp_path / "three")
    assert rows and all(len(r["seq_lengths"]) == 3 and r["seq_lengths"][2] == 0 for r in rows)
    assert all(r["side"][:2] == [0, 1] for r in rows)
