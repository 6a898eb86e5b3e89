"""Tokenizer backends: FastBackend (fastokens + byte lengths) gives exactly HFBackend's ids and masks,
and HFBackend gives transformers' rule (a token is trained when its char range overlaps a span),
checked against a brute-force oracle over `enc.offsets` and against apply_chat_template itself."""

from __future__ import annotations

import json
import pickle
import random
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest
from paths import SHARED_TOKENIZERS

from packtool.tokenization.backends import (
    BACKENDS,
    FastBackend,
    HFBackend,
    _covered,
    make_backend,
    refusal_of,
    spans_to_mask,
)
from packtool.tokenization.loading import Engines
from packtool.tokenization.pipeline import fast_refused

SHARED = SHARED_TOKENIZERS


def supports_fast(js: str) -> str | None:
    """The byte rules' verdict on a tokenizer JSON (TokenizerSpec.fast_refusal)."""
    return refusal_of(json.loads(js))


FAMILIES = ["qwen", "llama3", "gptoss"]

# pieces of adversarial text: normalizer bait (NFD accents, singletons, composition exclusions,
# canonical reordering), invisible marks, multi-char emoji, control chars, every family's
# control-token strings, byte-fallback lookalikes, long runs
PIECES = [
    "hello",
    " world",
    "Hi",
    " the",
    "don't",
    "CAPS",
    ".",
    "!!",
    ",",
    "```py\n",
    "  ",
    " ",
    "\n",
    "\n\n",
    "\t",
    "\r\n",
    " " * 37,
    "\n" * 9,
    "0123456789" * 5,
    "7",
    " 42",
    "3.14159",
    "e\u0301",
    "a\u0308",
    "n\u0303",
    "é",
    "ü",
    "ñ",
    "\u212b",
    "\u0958",
    "q\u0307\u0323",
    "\u1e0b\u0323",
    "\u200b",
    "\u200c",
    "\u200d",
    "\u2060",
    "\u200f",
    "\u200e",
    "\u202e",
    "שלום",
    "مرحبا",
    "👨\u200d👩\u200d👧\u200d👦",
    "🏳️\u200d🌈",
    "👍🏽",
    "🇯🇵",
    "😀",
    "\ufeff",
    "\x00",
    "\x01",
    "\x7f",
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<think>",
    "</think>",
    "<tool_call>",
    "<|begin_of_text|>",
    "<|eot_id|>",
    "<|start_header_id|>",
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|return|>",
    "日本語のテキスト",
    "中文",
    "한국어",
    "ภาษาไทย",
    "𝔘𝔫𝔦",
    "▁",
    "Ġ",
    "<0x0A>",
    "\u00a0",
    "\u3000",
    "\ud7a3",
]

CONVERSATIONS = [
    [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4."}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi 日本 e\u0301"},
        {"role": "assistant", "content": "Hello 👨\u200d👩\u200d👧\u200d👦 <|im_end|> there"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "Sure\u200b 𝔘𝔫𝔦"},
    ],
    [
        {"role": "user", "content": "Count"},
        {"role": "assistant", "content": "1 2 3 " + "9" * 40 + " " * 30},
    ],
    [
        {"role": "user", "content": "\ufeffzero\x00width\u200f?"},
        {"role": "assistant", "content": "مرحبا שלום\u202e ok 🇯🇵 ภาษาไทย"},
    ],
    [
        {"role": "user", "content": "tags"},
        {"role": "assistant", "content": "<think>x</think>\n\n<|endoftext|>y"},
    ],
]


_BUILT: dict[str, SimpleNamespace] = {}


def _family(name: str, qwen) -> SimpleNamespace:
    """A real tokenizer, its backend JSON and both backends, built once per module.

    `rust` is transformers' own Rust tokenizer (ragged, untruncated): the reference for ids.
    """
    if name not in _BUILT:
        if name == "qwen":
            tok = qwen.tokenizer
        else:
            folder = SHARED / name
            if not (folder / "tokenizer.json").is_file():
                pytest.skip(f"{folder} is absent")
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(str(folder))
        js = tok.backend_tokenizer.to_str()
        fast = FastBackend(Engines(js))
        fast.engines.preload()  # builds on a thread while the HF tokenizer is built
        hf = HFBackend(Engines(js))
        hf.encode(["warm up"])
        rust = tok.backend_tokenizer
        if rust.padding is not None or rust.truncation is not None:  # left on by an earlier call
            rust = _rust(js)
            rust.no_padding()
            rust.no_truncation()
        _BUILT[name] = SimpleNamespace(name=name, tok=tok, js=js, hf=hf, fast=fast, rust=rust)
    return _BUILT[name]


@pytest.fixture(scope="module", params=FAMILIES)
def family(request, qwen):
    return _family(request.param, qwen)


@pytest.fixture(scope="module")
def qwen_family(qwen):
    return _family("qwen", qwen)


def _adversarial(seed: int, n: int) -> tuple[list[str], list[np.ndarray]]:
    """Texts of random pieces; random sorted spans, half their bounds next to non-ASCII chars."""
    rng = random.Random(seed)
    texts, spans = [], []
    for _ in range(n):
        t = "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 30)))
        near = [
            j + d
            for j, c in enumerate(t)
            if not c.isascii()
            for d in (-1, 0, 1, 2)
            if 0 <= j + d <= len(t)
        ]
        k = rng.randint(0, 4)
        pos = sorted(
            rng.choice(near) if near and rng.random() < 0.5 else rng.randint(0, len(t))
            for _ in range(2 * k)
        )
        texts.append(t)
        spans.append(np.array(pos, dtype=np.int64).reshape(-1, 2))
    return texts, spans


def _oracle(enc, sp: np.ndarray) -> list[bool]:
    """transformers' rule, written out: token (a, b) is trained if a < e and b > s for a span."""
    return [any(a < e and b > s for s, e in sp.tolist()) for a, b in enc.offsets]


def _rust(js: str):
    from tokenizers import Tokenizer

    return Tokenizer.from_str(js)


def _assert_same(a, b):
    for x, y, what in zip(a, b, ("ids", "offsets", "mask"), strict=True):
        assert x.dtype == y.dtype, what
        assert np.array_equal(x, y), what


def _check_layout(texts, out, ids_ref):
    ids, offsets, mask = out
    assert ids.dtype == np.int32 and offsets.dtype == np.int64 and mask.dtype == bool
    assert (
        len(offsets) == len(texts) + 1 and offsets[0] == 0 and offsets[-1] == len(ids) == len(mask)
    )
    assert [ids[offsets[i] : offsets[i + 1]].tolist() for i in range(len(texts))] == ids_ref


def _chat(tok, conversations):
    """Rendered with the tokenizer's own template; spans = assistant contents found in order."""
    texts, spans = [], []
    for msgs in conversations:
        text = tok.apply_chat_template(msgs, tokenize=False)
        sp, at = [], 0
        for m in msgs:
            j = text.find(m["content"], at)
            if j >= 0:
                at = j + len(m["content"])
                if m["role"] == "assistant":
                    sp.append((j, at))
        texts.append(text)
        spans.append(np.array(sp, dtype=np.int64).reshape(-1, 2))
    return texts, spans


# -- real tokenizers --------------------------------------------------------------------------------
def test_chat_texts_identical(family):
    texts, spans = _chat(family.tok, CONVERSATIONS)
    assert sum(len(s) for s in spans) >= 4
    ref = family.hf.encode_spans(texts, spans)
    _assert_same(family.fast.encode_spans(texts, spans), ref)
    _check_layout(
        texts, ref, [e.ids for e in family.rust.encode_batch(texts, add_special_tokens=False)]
    )
    assert 0 < ref[2].sum() < len(ref[2])


def test_adversarial_identical_and_oracle(family):
    texts, spans = _adversarial(seed=1, n=300)
    ref = family.hf.encode_spans(texts, spans)
    _assert_same(family.fast.encode_spans(texts, spans), ref)
    encs = family.rust.encode_batch(texts, add_special_tokens=False)
    _check_layout(texts, ref, [e.ids for e in encs])
    ids, offsets, mask = ref
    for i, (enc, sp) in enumerate(zip(encs, spans, strict=True)):
        assert mask[offsets[i] : offsets[i + 1]].tolist() == _oracle(enc, sp), repr(texts[i])
    assert mask.any()


def test_encode_identical(family):
    texts, _ = _adversarial(seed=2, n=60)
    rust = family.rust
    for special in (False, True):
        want = [e.ids for e in rust.encode_batch(texts, add_special_tokens=special)]
        for b in (family.hf, family.fast):
            ids, offsets = b.encode(texts, add_special_tokens=special)
            _check_layout(texts, (ids, offsets, np.zeros(len(ids), bool)), want)


def test_fallbacks(family):
    """Qwen3's NFC normalizer rewrites NFD text: those texts go through HF, counted, still exact."""
    nfd = ["cafe\u0301 na\u0308ive " * 3 + "x", "plain e\u0301 and more text"]
    spans = [np.array([[2, 9], [12, 20]]), np.array([[0, 8]])]
    before = family.fast.fallbacks
    _assert_same(family.fast.encode_spans(nfd, spans), family.hf.encode_spans(nfd, spans))
    if family.name == "qwen":
        assert family.fast.fallbacks - before == 2
    else:  # no normalizer: the byte path serves NFD text as it is
        assert family.fast.fallbacks == before
    ascii_texts = ["Hello there, " * k + "end" for k in range(1, 20)]
    ascii_spans = [np.array([[0, 5], [7, len(t)]]) for t in ascii_texts]
    before = family.fast.fallbacks
    _assert_same(
        family.fast.encode_spans(ascii_texts, ascii_spans),
        family.hf.encode_spans(ascii_texts, ascii_spans),
    )
    assert family.fast.fallbacks == before


def test_split_char_at_span_end(family):
    """A span ending after a char split over several byte tokens trains all of them (not only the
    first, which is what char_to_token(e - 1) alone would give)."""
    found = 0
    for c in ["𝔦", "𝔘", "ꙮ", "𓀀", "🧬", "\u0958", "ཀྵ", "ᚠ", "𐍈", "\U0002a6d6"]:
        text = "x" + c + "y"
        enc = family.rust.encode(text, add_special_tokens=False)
        if len([a for a, b in enc.offsets if a <= 1 < b]) < 2:
            continue  # the char is one token
        found += 1
        want = [a < 2 and b > 0 for a, b in enc.offsets]
        for b in (family.hf, family.fast):
            ids, offsets, mask = b.encode_spans([text], [np.array([[0, 2]])])
            assert mask.tolist() == want, (b.name, c)
    assert found  # the premise: some char is more than one token


def test_same_mask_as_apply_chat_template(qwen_family):
    """Against transformers itself, with generation spans that end inside split chars and on tokens."""
    from transformers.utils.chat_template_utils import render_jinja_template

    template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'assistant' %}"
        "{% generation %}{{ m.content }}{% endgeneration %}{% else %}{{ m.content }}{% endif %}"
        "<|im_end|>\n{% endfor %}"
    )
    tok = qwen_family.tok
    convs = CONVERSATIONS + [
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a𝔘𝔫𝔦"}]
    ]
    texts, gen = render_jinja_template(
        conversations=convs,
        chat_template=template,
        return_assistant_tokens_mask=True,
        **dict(tok.special_tokens_map),
    )
    spans = [np.array(g, dtype=np.int64).reshape(-1, 2) for g in gen]
    hf, fast = qwen_family.hf, qwen_family.fast
    ours = hf.encode_spans(texts, spans)
    _assert_same(fast.encode_spans(texts, spans), ours)
    for i, msgs in enumerate(convs):
        ref = tok.apply_chat_template(
            msgs,
            chat_template=template,
            tokenize=True,
            return_dict=True,
            return_assistant_tokens_mask=True,
        )
        a, b = ours[1][i], ours[1][i + 1]
        assert ours[0][a:b].tolist() == ref["input_ids"]
        assert ours[2][a:b].astype(int).tolist() == ref["assistant_masks"]


def test_pickle_round_trip(qwen_family, sp_json):
    texts, spans = _adversarial(seed=3, n=40)
    for b in (
        qwen_family.hf,
        qwen_family.fast,
        HFBackend(Engines(sp_json)),
        FastBackend(Engines(sp_json)),
    ):
        want = b.encode_spans(texts, spans)
        copy = pickle.loads(pickle.dumps(b))  # the Rust tokenizer is dropped and rebuilt lazily
        assert not copy.engines._built.keys() - {"table"} and copy.name == b.name
        _assert_same(copy.encode_spans(texts, spans), want)
        assert np.array_equal(copy.encode(texts)[0], b.encode(texts)[0])
    fresh = pickle.loads(pickle.dumps(FastBackend(Engines(sp_json))))  # before any use
    _assert_same(
        fresh.encode_spans(texts, spans), FastBackend(Engines(sp_json)).encode_spans(texts, spans)
    )


def test_supports_fast_real(qwen_family):
    assert supports_fast(qwen_family.js) is None


# -- built in-process ------------------------------------------------------------------------------
CORPUS = [
    "hello world how are you",
    "user assistant system tool",
    "the answer is four",
    "héllo wörld 日本語",
] * 10


def _bpe(normalizer=None, byte_fallback=True, sentencepiece=True, added_bytes=False):
    """A tiny sentencepiece-style BPE (spaces → ▁, <0xNN> byte fallback), trained in-process.

    The <0xNN> pieces are vocabulary entries, as in converted sentencepiece models; with
    `added_bytes` they stay added tokens (so a literal "<0x0A>" in a text matches one).
    """
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

    tok = Tokenizer(
        models.BPE(byte_fallback=byte_fallback, unk_token=None if byte_fallback else "<unk>")
    )
    parts = [normalizer] if normalizer is not None else []
    if sentencepiece:
        parts.append(normalizers.Replace(" ", "▁"))
        tok.decoder = decoders.Sequence(
            [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
        )
    if parts:
        tok.normalizer = normalizers.Sequence(parts) if len(parts) > 1 else parts[0]
    specials = ["<unk>", "<|im_start|>", "<|im_end|>"] + [f"<0x{i:02X}>" for i in range(256)]
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=400, special_tokens=specials))
    spec = json.loads(tok.to_str())
    if not added_bytes:
        spec["added_tokens"] = [
            a for a in spec["added_tokens"] if not a["content"].startswith("<0x")
        ]
    return json.dumps(spec)


def _bytelevel_bpe(trim_offsets=False, add_prefix_space=False):
    """A tiny byte-level BPE (GPT-2 style), trained in-process."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=trim_offsets)
    tok.train_from_iterator(
        CORPUS,
        trainers.BpeTrainer(
            vocab_size=300,
            special_tokens=["<|im_end|>"],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    return tok.to_str()


@pytest.fixture(scope="module")
def sp_json():
    return _bpe()


@pytest.mark.parametrize("added_bytes", [False, True])
def test_sentencepiece_style_identical(sp_json, added_bytes):
    """'▁' counts as one byte (a space), '<0xNN>' as one: only texts with a literal '▁' fall back
    (and, when the byte pieces are added tokens, texts where "<0x0A>" matches one)."""
    js = _bpe(added_bytes=True) if added_bytes else sp_json
    assert supports_fast(js) is None
    texts, spans = _adversarial(seed=4, n=300)
    hf, fast = HFBackend(Engines(js)), FastBackend(Engines(js))
    ref = hf.encode_spans(texts, spans)
    _assert_same(fast.encode_spans(texts, spans), ref)
    encs = _rust(js).encode_batch(texts, add_special_tokens=False)
    for i, (enc, sp) in enumerate(zip(encs, spans, strict=True)):
        assert ref[2][ref[1][i] : ref[1][i + 1]].tolist() == _oracle(enc, sp)
    # fastokens reads a literal "<0x0A>" as the byte piece (tokenizers spells it out): such
    # texts go through HF, with or without spans
    expected = sum(
        "<0x" in t or (len(s) > 0 and "▁" in t) for t, s in zip(texts, spans, strict=True)
    )
    assert fast.fallbacks == expected > 0
    for special in (False, True):
        _check_layout(
            texts,
            (*fast.encode(texts, special), np.zeros(len(ref[0]), bool)),
            [e.ids for e in _rust(js).encode_batch(texts, add_special_tokens=special)],
        )


def test_supports_fast_reasons(tiny_tokenizer, monkeypatch):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    assert "WordLevel models are not supported" == supports_fast(
        tiny_tokenizer().backend_tokenizer.to_str()
    )
    wp = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wp.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wp.train_from_iterator(
        CORPUS, trainers.WordPieceTrainer(special_tokens=["[UNK]"], vocab_size=100)
    )
    assert supports_fast(wp.to_str()) == "WordPiece models are not supported"
    assert "Prepend" in supports_fast(_bpe(normalizer=normalizers.Prepend("▁")))
    assert "Lowercase" in supports_fast(_bpe(normalizer=normalizers.Lowercase()))
    # fastokens loads these, but the offsets are not the byte ranges: refused, and rightly so
    trimmed, untrimmed = _bytelevel_bpe(trim_offsets=True), _bytelevel_bpe()
    assert supports_fast(untrimmed) is None
    assert "trims offsets" in supports_fast(trimmed)
    probe = "a  b"
    assert _rust(trimmed).encode(probe).offsets != _rust(untrimmed).encode(probe).offsets
    with pytest.raises(ValueError, match="trims offsets"):
        FastBackend(Engines(trimmed)).encode_spans(["x"], [np.zeros((0, 2))])
    assert "prefix space" in supports_fast(_bytelevel_bpe(add_prefix_space=True))
    spec = SimpleNamespace(fast_refusal=None)
    assert fast_refused(spec, "auto") is None
    monkeypatch.setitem(sys.modules, "fastokens", None)
    assert fast_refused(spec, "auto") == "fastokens is not installed"


def test_unknown_tokens_fall_back():
    """An <unk> has no byte length: texts holding one go through HF (and stay exact)."""
    js = _bpe(byte_fallback=False)
    texts = ["hello wörld", "hello ☃ world", "☃☃ and ☂"]
    spans = [np.array([[0, len(t)]]) for t in texts]
    fast = FastBackend(Engines(js))
    _assert_same(fast.encode_spans(texts, spans), HFBackend(Engines(js)).encode_spans(texts, spans))
    assert fast.fallbacks == 2


def test_lstrip_tokens_fall_back():
    """An lstrip added token swallows the spaces before it: its byte length is not its content's."""
    from tokenizers import AddedToken, Tokenizer

    tok = Tokenizer.from_str(_bytelevel_bpe())
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
    js = tok.to_str()
    assert "   <mask>" in tok.encode("hello   <mask> world", add_special_tokens=False).tokens
    texts = ["hello   <mask> world", "<mask>x", "no mask here"]
    spans = [np.array([[0, 7]]), np.array([[0, 1]]), np.array([[0, 2]])]
    fast = FastBackend(Engines(js))
    _assert_same(fast.encode_spans(texts, spans), HFBackend(Engines(js)).encode_spans(texts, spans))
    assert fast.fallbacks == 2


def test_preload_and_errors(sp_json, tiny_tokenizer):
    fast = FastBackend(Engines(sp_json))
    fast.engines.preload()
    fast.engines.preload()
    texts = ["hello world", ""]
    spans = [np.array([[0, 5]]), np.zeros((0, 2), dtype=np.int64)]
    _assert_same(
        fast.encode_spans(texts, spans), HFBackend(Engines(sp_json)).encode_spans(texts, spans)
    )
    broken = FastBackend(Engines(tiny_tokenizer().backend_tokenizer.to_str()))
    broken.engines.preload()  # fails on the thread; the error surfaces in the caller
    with pytest.raises(ValueError, match="WordLevel"):
        broken.encode(["hello"])


def test_empty_and_bad_spans(sp_json):
    for b in (HFBackend(Engines(sp_json)), FastBackend(Engines(sp_json))):
        ids, offsets, mask = b.encode_spans([], [])
        assert len(ids) == len(mask) == 0 and offsets.tolist() == [0]
        ids, offsets, mask = b.encode_spans(["", "hello"], [np.zeros((0, 2)), [[0, 0], [1, 1]]])
        assert offsets[1] == 0 and len(ids) > 0
        ids, offsets = b.encode([])
        assert offsets.tolist() == [0]
        for bad in ([[3, 2]], [[-1, 2]], [[0, 6]], [[2, 4], [3, 5]]):
            with pytest.raises(ValueError, match=r"spans\[0\]"):
                b.encode_spans(["hello"], [np.array(bad)])
        with pytest.raises(ValueError):
            b.encode_spans(["a", "b"], [np.zeros((0, 2))])
        # items that are not rows of (start, end): named, not numpy's broadcast or shape error
        for bad in ([[0, 2]], [[(0, 2)], [0, 1]], [None], [[(0, 1, 2)]], [[(0, 1), (2,)]]):
            k = next(i for i, x in enumerate(bad) if x != [(0, 2)])
            with pytest.raises(ValueError, match=rf"^spans\[{k}\] must be \(start, end\) pairs"):
                b.encode_spans(["hello"] * len(bad), bad)


def test_spans_to_mask():
    off = np.array([[0, 2], [2, 4], [4, 4], [4, 7], [7, 9]])
    assert spans_to_mask(off, np.array([[3, 4]])).tolist() == [False, True, False, False, False]
    assert spans_to_mask(off, np.array([[1, 2], [5, 5]])).tolist() == [
        True,
        False,
        False,
        True,
        False,
    ]
    assert spans_to_mask(off, np.zeros((0, 2))).tolist() == [False] * 5


def test_covered_is_the_overlap_rule():
    """The fast backend's mask (two searchsorted per span over the tokens' byte bounds) against the
    rule itself, token by token, and spans_to_mask: tokens of zero bytes, empty spans, spans
    touching, at the ends, none."""
    rng = np.random.default_rng(0)
    for _ in range(3000):
        bounds = np.concatenate([[0], np.cumsum(rng.integers(0, 4, rng.integers(0, 12)))])
        cuts = np.sort(rng.integers(0, bounds[-1] + 1, 2 * rng.integers(0, 4)))
        spans = cuts.reshape(-1, 2)
        want = [
            any(bounds[t] < e and bounds[t + 1] > s for s, e in spans)
            for t in range(len(bounds) - 1)
        ]
        assert _covered(bounds, spans).tolist() == want, (bounds, spans)
        offsets = np.stack([bounds[:-1], bounds[1:]], axis=1)
        assert spans_to_mask(offsets, spans).tolist() == want


def test_make_backend(sp_json):
    assert BACKENDS == ("fastokens", "hf")
    assert isinstance(make_backend("hf", Engines(sp_json)), HFBackend)
    assert isinstance(make_backend("fastokens", Engines(sp_json)), FastBackend)
    assert [make_backend(n, Engines(sp_json)).name for n in BACKENDS] == list(BACKENDS)
    with pytest.raises(ValueError, match="unknown tokenizer backend"):
        make_backend("slow", Engines(sp_json))


def test_import_is_cheap():
    code = (
        "import sys, packtool.tokenization.backends; "
        "print(sorted(m for m in ('fastokens', 'tokenizers', 'transformers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
