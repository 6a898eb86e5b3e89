"""tokenization/mixture.py: several inputs, each read and tokenized on its own, weighted and laid
end to end in one TokenizedData with one block of global source indices per input."""

from __future__ import annotations

import json

import numpy as np
import pytest

from packtool.api import load_tokenized
from packtool.config import InputSpec, ReadConfig, TokenizeConfig
from packtool.data.tokenized import describe_source, input_of
from packtool.demo_data import write_sample
from packtool.errors import PacktoolError, UsageError
from packtool.tokenization.mixture import MIX_TAG, selection

CFG = TokenizeConfig(num_proc=1)


def alpaca(path, n, bad=()):
    rows = [
        {"instruction": f"name {i}", "input": "", "output": f"answer {i}"}
        if i not in bad
        else {"instruction": 7}
        for i in range(n)
    ]
    path.write_text(json.dumps(rows))
    return str(path)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("mix")
    chats = str(write_sample(root / "chats.jsonl", n=30, seed=4))
    return chats, alpaca(root / "alpaca.json", 10), alpaca(root / "bad.json", 6, bad=(2,))


def spec(data, weight=1.0, **read):
    text = data + (f"::weight={weight}" if weight != 1 else "")
    return InputSpec(text, data, ReadConfig(**read), weight)


def test_selection_whole_fractional_and_seeded():
    copies, rows = selection(10, 2.0, seed=0, k=1)
    assert copies == 2 and rows.tolist() == list(range(10))
    copies, rows = selection(10, 0.5, seed=0, k=1)
    assert copies == 1 and rows.size == 5 and np.all(np.diff(rows) > 0)
    rng = np.random.default_rng([0, MIX_TAG, 1])  # the documented draw
    assert rows.tolist() == sorted(rng.choice(10, size=5, replace=False).tolist())
    assert selection(10, 0.5, seed=0, k=1)[1].tolist() == rows.tolist()  # deterministic
    others = {tuple(selection(10, 0.5, seed=s, k=1)[1].tolist()) for s in range(8)}
    assert len(others) > 1  # the seed matters
    copies, rows = selection(10, 1.25, seed=3, k=2)
    assert copies == 2 and rows.size == 3  # round(0.25 * 10) = 2.5 -> 3 (half up)
    assert selection(3, 0.1, 0, 1)[1].size == 0


def test_two_formats_each_read_on_its_own_and_every_example_accounted_for(files):
    chats, alp, _ = files
    alone = [load_tokenized(p, CFG, progress=False) for p in (chats, alp)]
    td = load_tokenized([spec(chats), spec(alp)], CFG, progress=False)
    assert [b.format for b in td.inputs] == ["messages", "alpaca"]
    assert td.cache_hit  # each input's own cache entry: the one a run on it alone made
    a, b = td.inputs
    assert (a.offset, a.records, a.copies, b.offset, b.records) == (0, 30, 1, 30, 10)
    assert td.source_index.tolist() == list(range(40))
    assert td.num_read == 40 and len(td) == 40 and not td.skipped
    got = td.table.to_pydict()
    want = [x.table.to_pydict() for x in alone]
    assert got["input_ids"] == want[0]["input_ids"] + want[1]["input_ids"]
    assert td.labels().to_pylist() == alone[0].labels().to_pylist() + alone[1].labels().to_pylist()
    assert td.format.startswith("mixed: alpaca (alpaca.json 10), messages (chats.jsonl 30)")
    assert {s.path for s in td.sources} == {chats, alp}
    assert describe_source(33, td.inputs) == f"input 2 ({alp}) record 3"


def test_weights_copy_and_subsample_with_unique_source_indices(files):
    chats, alp, _ = files
    inputs = [spec(chats, 0.5), spec(alp, 2.0), spec(chats, 1.5)]
    td = load_tokenized(inputs, CFG, progress=False, seed=7)
    a, b, c = td.inputs
    assert (a.copies, a.examples, b.copies, b.examples, c.copies, c.examples) == (
        1,
        15,
        2,
        20,
        2,
        45,
    )
    assert (a.offset, b.offset, c.offset) == (0, 30, 50) and c.end == 110
    assert len(td) == 80 and td.num_read == 80
    assert np.unique(td.source_index).size == len(td)  # every copy its own source_index
    ids = td.table.column("input_ids").to_pylist()
    src = td.source_index.tolist()
    # w=2: copy 1 of alpaca record r (30 + 10 + r) holds the ids of copy 0 (30 + r)
    pos = {s: i for i, s in enumerate(src)}
    for r in range(10):
        assert ids[pos[40 + r]] == ids[pos[30 + r]]
    # w=1.5: every chat once (50..79), then a seeded half again (80..109), same ids as the first copy
    again = [s for s in src if s >= 80]
    assert len(again) == 15 and all(ids[pos[s]] == ids[pos[s - 30]] for s in again)
    assert (
        describe_source(again[0], td.inputs) == f"input 3 ({chats}) record {again[0] - 80}, copy 1"
    )
    assert input_of(29, td.inputs) is a and input_of(110, td.inputs) is None
    same = load_tokenized(inputs, CFG, progress=False, seed=7)
    assert same.source_index.tolist() == src  # deterministic
    other = load_tokenized(inputs, CFG, progress=False, seed=8)
    assert other.source_index.tolist() != src and len(other) == 80


def test_skipped_records_keep_their_file_and_position(files):
    chats, _, bad = files
    cfg = TokenizeConfig(num_proc=1, read=ReadConfig(on_error="skip"))
    td = load_tokenized([spec(chats), InputSpec(bad, bad, cfg.read, 1.0)], cfg, progress=False)
    (s,) = td.skipped
    assert s.source_index == 32 and s.file == bad and s.position == 2
    assert s.where == f"{bad} record 2"
    assert td.inputs[1].skipped == 1 and td.inputs[1].tokenized == 5
    assert td.num_read == len(td) + 1 == 36


def test_per_input_read_options_and_the_global_tokenizer_options(files):
    chats, alp, _ = files
    cfg = TokenizeConfig(num_proc=1, train_on="last")
    td = load_tokenized([spec(chats, limit=4), spec(alp, format="alpaca")], cfg, progress=False)
    assert [b.records for b in td.inputs] == [4, 10]
    assert td.inputs[0].read["limit"] == 4 and td.inputs[1].read["format"] == "alpaca"
    assert td.options["train_on"] == "last" and td.options["read"]["limit"] is None
    lone = load_tokenized(
        chats, TokenizeConfig(num_proc=1, train_on="last", read=ReadConfig(limit=4)), False
    )
    assert td.labels().to_pylist()[:4] == lone.labels().to_pylist()


def test_an_input_that_does_not_exist_is_named_before_anything_is_tokenized(files, tmp_path):
    chats, _, _ = files
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(
        UsageError, match=r"input 2 \(.*nope.jsonl\): .*does not exist.*fix the path"
    ):
        load_tokenized([spec(chats), spec(missing)], CFG, progress=False)


def test_an_input_that_fails_is_named(files):
    chats, alp, _ = files
    with pytest.raises(PacktoolError, match=r"input 2 \(.*alpaca.json::.*\): "):
        load_tokenized(
            [spec(chats), InputSpec(alp + "::format=messages", alp, ReadConfig(format="messages"))],
            CFG,
            progress=False,
        )


def test_a_weight_that_selects_nothing_warns(files):
    chats, alp, _ = files
    td = load_tokenized([spec(chats), spec(alp, 0.01)], CFG, progress=False)
    assert td.inputs[1].examples == 0 and td.inputs[1].copies == 1
    assert any("weight 0.01 selects none of its 10 examples" in w for w in td.warnings)


def test_inputs_with_different_tokenizers_cannot_share_a_pack(files):
    from packtool.tokenization.mixture import _tokenizer

    class TD:
        def __init__(self, h):
            self.tokenizer = {"files_hash": h, "chat_template_hash": "t"}

    with pytest.raises(PacktoolError, match="one pack has one tokenizer and template"):
        _tokenizer([spec("a"), spec("b")], [TD("x"), TD("y")])


def test_weights_that_select_nothing_at_all_are_refused_by_name(files, tmp_path):
    """One record at weight 0.4: 0.4 × 1 rounds half up to 0. The error names the input and its
    weight instead of profile's 'none of the 0 examples read has a token'."""
    one = alpaca(tmp_path / "one.json", 1)
    with pytest.raises(
        UsageError,
        match=r"weights select no example: input 1 \(.*one.json\): "
        r"weight 0.4 selects none of its 1 examples.*raise the weight",
    ):
        load_tokenized([spec(one, 0.4)], CFG, progress=False)
    assert load_tokenized([spec(one, 0.5)], CFG, progress=False).inputs[0].examples == 1
