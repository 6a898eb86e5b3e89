"""tokenization.cut: a BPE tokenizer cut to a few texts' words encodes them as the whole one does
(ids, offsets, decoded text), for every real tokenizer we have; what it cannot prove it refuses."""

from __future__ import annotations

import json
import random

import pytest
from paths import SHARED_DATA, SHARED_TOKENIZERS, needs_shared

from packtool.tokenization import cut
from packtool.tokenization.loading import Engines

FAMILIES = ["builtin", "llama3", "gptoss"]

# pieces that stress words: combining marks, emoji, CJK, long runs, special tokens mid-text
PIECES = [
    "hello",
    " world",
    "  ",
    "\n\n",
    "\t",
    "café",
    "e\u0301",
    "\u0301",
    "😀",
    "日本語",
    "<0x0A>",
    "'s",
    "1234567",
    "<|im_start|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|start|>",
    "<|end|>",
    "<|endoftext|>",
    "<think>",
    " " * 40,
    "=" * 70,
    "ﬁ",
    "\u00a0",
    "Ǆ",
    "\x1c",
]


def _texts() -> list[str]:
    rng = random.Random(0)
    texts = ["".join(rng.choice(PIECES) for _ in range(rng.randint(0, 40))) for _ in range(60)]
    if SHARED_DATA.is_dir():  # real SFT text, in windows of 1,500 chars
        for f in sorted(SHARED_DATA.iterdir()):
            if f.suffix in (".json", ".jsonl"):
                raw = f.read_text(encoding="utf-8")
                texts += [raw[i : i + 1500] for i in range(0, min(len(raw), 15000), 1500)]
    return texts


@pytest.fixture(scope="module", params=FAMILIES)
def family(request):
    from tokenizers import Tokenizer

    from packtool.tokenization.loading import load_spec

    name = None
    if request.param != "builtin":
        folder = SHARED_TOKENIZERS / request.param
        if not (folder / "tokenizer.json").is_file():
            pytest.skip(f"{folder} is absent")
        name = str(folder)
    js = load_spec(name).backend_json
    return js, Tokenizer.from_str(js), cut.tables_for(js)


def _cut(tables, texts):
    from tokenizers import Tokenizer

    js = cut.cut_json(tables, texts)
    assert js is not None
    return Tokenizer.from_str(js)


def _assert_same(whole, small, texts):
    a = whole.encode_batch(texts, add_special_tokens=False)
    b = small.encode_batch(texts, add_special_tokens=False)
    for text, x, y in zip(texts, a, b, strict=True):
        assert x.ids == y.ids, text
        assert x.offsets == y.offsets, text
        for skip in (False, True):
            assert whole.decode(x.ids, skip_special_tokens=skip) == small.decode(
                y.ids, skip_special_tokens=skip
            ), text


def test_cut_encodes_each_text_as_the_whole_tokenizer(family):
    js, whole, tables = family
    assert tables is not None  # all three are byte-level BPE
    for text in _texts():
        _assert_same(whole, _cut(tables, [text]), [text])


def test_one_cut_for_many_texts_and_its_size(family):
    js, whole, tables = family
    texts = _texts()
    small = _cut(tables, texts)
    _assert_same(whole, small, texts)
    assert small.get_vocab_size(with_added_tokens=False) < whole.get_vocab_size() / 4


@needs_shared("tokenizers", "gptoss")
def test_generated_conversations_through_inspect_identical(tmp_path, monkeypatch):
    """inspect with the cut tokenizer gives what it gives with the whole one, record by record."""
    from packtool.config import ReadConfig, TokenizeConfig
    from packtool.inspecting import inspect_example

    rng = random.Random(1)
    rows = []
    for i in range(6):
        turns = []
        for r in range(rng.randint(1, 3)):
            words = " ".join(rng.choice(PIECES[:13]) for _ in range(rng.randint(1, 30)))
            turns += [
                {"role": "user", "content": f"q{i}.{r} {words}"},
                {"role": "assistant", "content": words[::-1]},
            ]
        rows.append({"messages": turns})
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = TokenizeConfig(num_proc=1, tokenizer=str(SHARED_TOKENIZERS / "gptoss"), read=ReadConfig())
    used = []
    real = cut.cut_json
    monkeypatch.setattr(cut, "cut_json", lambda *a: used.append(1) or real(*a))
    small = [inspect_example(str(data), cfg, i) for i in range(len(rows))]
    assert len(used) == len(rows)  # every record went through a cut tokenizer
    monkeypatch.setattr(cut, "cut_json", lambda *a: None)
    whole = [inspect_example(str(data), cfg, i) for i in range(len(rows))]
    for a, b in zip(small, whole, strict=True):
        assert a["input_ids"] == b["input_ids"] and a["labels"] == b["labels"]
        assert a["runs"] == b["runs"]


# -- refusals, tables, cache ---------------------------------------------------------------------
def _bpe_json(**model) -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(
        ["hello world", "low lower lowest", "hello hello"] * 5,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<|end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    d = json.loads(tok.to_str())
    d["model"].update(model)
    return json.dumps(d)


def test_tiny_byte_level_bpe_cut_and_added_token_ids():
    from tokenizers import Tokenizer

    js = _bpe_json()
    tables = cut.build_tables(js)
    texts = ["hello<|end|>lowest  world", "<|end|>", "", "zzz hello"]
    whole = Tokenizer.from_str(js)
    small = _cut(tables, texts)
    _assert_same(whole, small, texts)
    # the added token keeps its id, though the cut vocabulary is far smaller than that id
    assert small.token_to_id("<|end|>") == whole.token_to_id("<|end|>")


@pytest.mark.parametrize(
    "change, why",
    [
        ({"dropout": 0.1}, "dropout"),
        ({"continuing_subword_prefix": "##"}, "continuing_subword_prefix"),
        ({"byte_fallback": True}, "byte_fallback"),
    ],
)
def test_refused_models(change, why):
    assert why in cut.refusal(json.loads(_bpe_json(**change)))
    assert cut.build_tables(_bpe_json(**change)) is None


def test_refused_word_level_and_foreign_alphabet(tiny_tokenizer):
    word_level = tiny_tokenizer().backend_tokenizer.to_str()
    assert "not BPE" in cut.refusal(json.loads(word_level))
    d = json.loads(_bpe_json())
    d["model"]["vocab"]["▁x"] = len(d["model"]["vocab"])
    assert "alphabet" in cut.refusal(d)


def test_refused_without_byte_level_or_with_a_symbol_missing():
    from tokenizers import Tokenizer

    d = json.loads(_bpe_json())
    assert cut.refusal(d) is None
    d["pre_tokenizer"] = {"type": "Whitespace"}
    assert "ByteLevel" in cut.refusal(d)
    d = json.loads(_bpe_json())
    d["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [d["pre_tokenizer"]]}
    assert cut.refusal(d) is None
    # symbols the model lacks: the whole tokenizer drops them and merges their neighbours
    d = json.loads(_bpe_json())
    gone = ("Ã", "©")  # "é", byte-level
    d["model"]["vocab"] = {t: i for t, i in d["model"]["vocab"].items() if not set(t) & set(gone)}
    d["model"]["merges"] = [m for m in d["model"]["merges"] if not set("".join(m)) & set(gone)]
    whole = Tokenizer.from_str(json.dumps(d))
    assert whole.encode("loéw", add_special_tokens=False).tokens == ["low"]  # across the gap
    assert "missing" in cut.refusal(d)


def test_too_many_substrings_uses_the_whole_tokenizer(monkeypatch):
    js = _bpe_json()
    monkeypatch.setattr(cut, "MAX_SUBSTRINGS", 10)
    assert cut.cut_json(cut.build_tables(js), ["hello lowest world"]) is None
    backend = cut.CutBackend(Engines(js))
    ids, offsets, mask = backend.encode_spans(["hello lowest"], [[(0, 5)]])
    assert backend.decoder() is backend.engines.rust()  # the whole one, built once
    assert mask.any() and len(ids) == offsets[-1]


def test_tables_round_trip_and_cache(monkeypatch):
    from packtool.tokenization import cache

    js = _bpe_json()
    made = cut.tables_for(js)
    again = cut.Tables.from_bytes(made.to_bytes())
    for a, b in ((again.tokens, made.tokens), (again.merges, made.merges)):
        assert a.blob == b.blob
        for f in ("key", "value", "start", "length"):
            assert (getattr(a, f) == getattr(b, f)).all(), f
    assert again.rest == made.rest and again.longest == made.longest
    vocab = json.loads(js)["model"]["vocab"]
    assert again.tokens.find([*vocab, "not a token", ""]) == [*vocab.values(), None, None]
    merges = json.loads(js)["model"]["merges"]
    spelled = [m if isinstance(m, str) else " ".join(m) for m in merges]
    assert again.merges.find(spelled) == list(range(len(spelled)))

    def no_build(_):
        raise AssertionError("built again: the cache was not read")

    monkeypatch.setattr(cut, "build_tables", no_build)
    assert cut.tables_for(js).tokens.blob == made.tokens.blob  # from the cache
    monkeypatch.undo()
    path = cut.tables_path(js)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.warns(cache.CacheWarning, match="damaged"):
        assert cut.tables_for(js).merges.blob == made.merges.blob  # damaged: recomputed
    assert cache.read_bytes(path) == made.to_bytes()  # and stored again


def test_a_key_collision_is_told_apart_by_the_bytes(monkeypatch):
    monkeypatch.setattr(cut, "_key", lambda b: 7)  # every string the same key
    lookup = cut.Lookup.of(["a", "bb", "ccc"], [10, 20, 30])
    assert lookup.find(["ccc", "a", "d", "bb"]) == [30, 10, None, 20]


def test_tables_of_another_version_are_made_again_and_a_refusal_is_cached(monkeypatch):
    from packtool.tokenization import cache

    js = _bpe_json(vocab_note="stale")  # (a JSON of its own: a cache file of its own)
    path = cut.tables_path(js)
    cache.write_bytes(path, json.dumps({"version": cut.VERSION - 1}).encode() + b"\n")
    assert cut.tables_for(js) is not None  # a stale layout: made again, not taken as a refusal
    assert cut.Tables.from_bytes(cache.read_bytes(path)).longest >= 1

    refused = _bpe_json(dropout=0.5)
    assert cut.tables_for(refused) is None
    monkeypatch.setattr(cut, "build_tables", lambda _: pytest.fail("a refusal was not cached"))
    assert cut.tables_for(refused) is None
