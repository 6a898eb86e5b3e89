"""Labels from chat templates: identical to apply_chat_template, weights, fallback, other kinds."""

from __future__ import annotations

import re

import numpy as np
import pytest
from chat_examples import CONVERSATIONS, TOOLS, chat, chat_examples
from paths import SHARED_TOKENIZERS

from packtool.formats.normalize import template_messages
from packtool.tokenization.backends import spans_to_mask
from packtool.tokenization.chat_template import BUILTIN_TEMPLATES, ChatTemplate, pick
from packtool.tokenization.chat_template import make_template as _template
from packtool.tokenization.encode import Encoder
from packtool.tokenization.loading import TokenizerSpec
from packtool.tokenization.render import locate, lost_content


def resolve_template(loaded, name):
    return pick(
        TokenizerSpec.from_loaded(loaded) if not isinstance(loaded, TokenizerSpec) else loaded, name
    )


def spec_of(loaded):
    return TokenizerSpec.from_loaded(loaded)


@pytest.fixture(scope="module")
def chatml(qwen):
    return resolve_template(qwen, "chatml-train")


@pytest.mark.parametrize("backend", ["hf", "fastokens"])
@pytest.mark.parametrize("k", range(len(CONVERSATIONS)))
def test_identical_to_apply_chat_template(qwen, chatml, k, backend):
    msgs = CONVERSATIONS[k]
    tools = TOOLS if k == 2 else None
    ours = Encoder(spec_of(qwen), chatml, backend=backend).encode([chat(msgs, tools)])
    assert ours.errors == [None]
    ref = qwen.tokenizer.apply_chat_template(
        msgs,
        tools=tools,
        chat_template=chatml.text,
        tokenize=True,
        return_dict=True,
        return_assistant_tokens_mask=True,
    )
    assert ours.input_ids[0].tolist() == ref["input_ids"]
    assert (ours.labels[0] != -100).astype(int).tolist() == ref["assistant_masks"]
    assert np.array_equal(
        ours.labels[0][ours.labels[0] != -100], ours.input_ids[0][ours.labels[0] != -100]
    )


def test_batch_equals_one_by_one(qwen, chatml):
    enc = Encoder(spec_of(qwen), chatml)
    batch = enc.encode([chat(m) for m in CONVERSATIONS])
    for k, m in enumerate(CONVERSATIONS):
        one = enc.encode([chat(m)])
        assert np.array_equal(batch.input_ids[k], one.input_ids[0])
        assert np.array_equal(batch.labels[k], one.labels[0])


def test_end_of_turn_token_is_trained(qwen, chatml):
    enc = Encoder(spec_of(qwen), chatml).encode([chat(CONVERSATIONS[1])])
    ids, labels = enc.input_ids[0], enc.labels[0]
    im_end = qwen.tokenizer.convert_tokens_to_ids("<|im_end|>")
    trained_ends = int(np.sum((ids == im_end) & (labels != -100)))
    assert trained_ends == 2  # one per assistant turn; system/user ends carry no loss
    assert int(np.sum(ids == im_end)) == 5


def test_weight_zero_and_train_on(qwen, chatml):
    msgs = [dict(m) for m in CONVERSATIONS[1]]
    full = Encoder(spec_of(qwen), chatml).encode([chat(msgs)]).labels[0]
    msgs[2]["weight"] = 0.0
    weighted = Encoder(spec_of(qwen), chatml).encode([chat(msgs)]).labels[0]
    last = Encoder(spec_of(qwen), chatml, "last").encode([chat(CONVERSATIONS[1])]).labels[0]
    every = Encoder(spec_of(qwen), chatml, "all").encode([chat(CONVERSATIONS[1])])
    assert np.array_equal(weighted, last)
    assert 0 < np.sum(weighted != -100) < np.sum(full != -100)
    assert np.array_equal(every.labels[0], every.input_ids[0])


def test_no_assistant_turn_has_zero_loss(qwen, chatml):
    enc = Encoder(spec_of(qwen), chatml).encode(
        [chat([{"role": "user", "content": "only a question"}])]
    )
    assert enc.errors == [None] and np.all(enc.labels[0] == -100)


def test_prefix_diff_fallback_matches_markers(qwen, chatml):
    """The same template without markers gives the same trained tokens through the prefix diff."""
    plain = re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", chatml.text)
    fallback = _template(plain, "chatml-plain")
    assert not fallback.has_generation
    for k, msgs in enumerate(CONVERSATIONS):
        tools = TOOLS if k == 2 else None
        a = Encoder(spec_of(qwen), chatml).encode([chat(msgs, tools)])
        b = Encoder(spec_of(qwen), fallback).encode([chat(msgs, tools)])
        assert b.errors == [None]
        assert np.array_equal(a.input_ids[0], b.input_ids[0])
        assert np.array_equal(a.labels[0], b.labels[0])


def test_not_prefix_preserving_template_fails_with_pointer(qwen):
    official = ChatTemplate(qwen.tokenizer.chat_template, "tokenizer", "x", False)
    enc = Encoder(spec_of(qwen), official).encode([chat(CONVERSATIONS[1])])
    assert enc.errors[0] is not None
    assert re.search(r"not prefix-preserving.*--chat-template chatml-train", enc.errors[0])


def test_tiny_tokenizer_fallback(tiny_tokenizer):
    tpl = (
        "{% for m in messages %}<|im_start|>{{ m.role }} : {{ m.content }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant : {% endif %}"
    )
    tok = tiny_tokenizer(tpl)
    msgs = [
        {"role": "user", "content": "hello world"},
        {"role": "assistant", "content": "the answer is four"},
    ]
    enc = Encoder(TokenizerSpec.from_tokenizer(tok), _template(tpl, "tiny")).encode([chat(msgs)])
    trained = tok.convert_ids_to_tokens(enc.input_ids[0][enc.labels[0] != -100].tolist())
    assert "".join(trained).replace(" ", "") == "theansweris four<|im_end|>".replace(" ", "")


@pytest.mark.parametrize("backend", ["hf", "fastokens"])
def test_prompt_completion_and_text(qwen, chatml, backend):
    enc = Encoder(spec_of(qwen), chatml, backend=backend).encode(
        [
            {
                "kind": "prompt_completion",
                "prompt": "Q: capital of France?",
                "completion": " Paris",
            },
            {"kind": "text", "text": "plain pretraining text"},
        ]
    )
    p = qwen.tokenizer("Q: capital of France?")["input_ids"]
    ids, labels = enc.input_ids[0], enc.labels[0]
    assert np.all(labels[: len(p)] == -100) and np.all(labels[len(p) :] == ids[len(p) :])
    assert ids[-1] == qwen.tokenizer.eos_token_id
    assert np.array_equal(enc.labels[1], enc.input_ids[1])


def test_errors_are_per_example(qwen, chatml):
    enc = Encoder(spec_of(qwen), chatml).encode(
        [chat([]), chat(CONVERSATIONS[0]), {"kind": "weird"}]
    )
    assert (
        enc.errors[0] == "empty conversation"
        and enc.errors[1] is None
        and "unknown" in enc.errors[2]
    )


def test_spans_to_mask_overlap_rule():
    offsets = np.array([[0, 2], [2, 5], [5, 6], [6, 9]])
    assert spans_to_mask(offsets, np.array([[3, 6]])).tolist() == [False, True, True, False]
    assert spans_to_mask(offsets, np.array([[0, 1], [8, 9]])).tolist() == [True, False, False, True]
    assert spans_to_mask(offsets, np.zeros((0, 2), int)).tolist() == [False] * 4


def test_builtin_templates_listed():
    assert "chatml-train" in BUILTIN_TEMPLATES


def test_prefix_diff_assistant_first_turn_does_not_train_its_header(qwen, chatml):
    plain = _template(re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", chatml.text), "chatml-plain")
    msgs = [
        {"role": "assistant", "content": "Hi there"},
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "A1"},
    ]
    a = Encoder(spec_of(qwen), chatml).encode([chat(msgs)])
    b = Encoder(spec_of(qwen), plain).encode([chat(msgs)])
    assert b.errors == [None] and np.array_equal(a.labels[0], b.labels[0])
    trained = qwen.tokenizer.decode(b.input_ids[0][b.labels[0] != -100].tolist())
    assert trained == "Hi there<|im_end|>A1<|im_end|>"


def test_prefix_diff_refuses_to_guess_when_a_prefix_cannot_render(qwen):
    tpl = (
        "{% if add_generation_prompt and messages[-1].role != 'user' %}{{ raise_exception('no') }}{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    msgs = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "A1"},
        {"role": "system", "content": "NOTE"},
        {"role": "assistant", "content": "A2"},
    ]
    enc = Encoder(spec_of(qwen), _template(tpl, "strict")).encode([chat(msgs)])
    assert re.search(
        r"cannot render the conversation before assistant turn 4 \(no\)", enc.errors[0]
    )


# ---------------------------------------------------------------------------------------------
# the native chatml-train renderer against transformers' jinja renderer


def test_native_chatml_renderer_equals_jinja(chatml):
    from transformers.utils.chat_template_utils import render_jinja_template

    from packtool.formats.normalize import template_messages
    from packtool.tokenization.render.native import GENERATION_PROMPT, NotNative
    from packtool.tokenization.render.native import chatml as native

    checked = handed_back = 0
    for ex in chat_examples():
        msgs, tools = template_messages(ex), ex.get("tools") or None
        try:
            want_text, want_spans = render_jinja_template(
                conversations=[msgs],
                tools=tools,
                chat_template=chatml.text,
                return_assistant_tokens_mask=True,
            )
            want = (want_text[0], [tuple(s) for s in want_spans[0]])
        except Exception:
            want = None
        try:
            got = native(msgs, tools)
        except NotNative:
            handed_back += 1
            continue
        assert want is not None, msgs  # native must never render what jinja refuses
        assert got[0] == want[0] and [tuple(s) for s in got[1]] == want[1], msgs
        checked += 1
    assert checked > 300 and handed_back >= 2
    prompt = [{"role": "user", "content": "x"}]
    plain, prompted = (
        render_jinja_template(conversations=[prompt], chat_template=chatml.text, **k)[0][0]
        for k in ({}, {"add_generation_prompt": True})
    )
    assert prompted == plain + GENERATION_PROMPT


def test_fast_path_equals_reference_on_real_chats(qwen, chatml):
    """fastokens + native renderer against tokenizers + jinja: identical ids, labels and errors."""
    examples = chat_examples()
    fast = Encoder(spec_of(qwen), chatml, backend="fastokens", renderer="native").encode(examples)
    ref = Encoder(spec_of(qwen), chatml, backend="hf", renderer="jinja").encode(examples)
    assert fast.errors == ref.errors
    assert np.array_equal(fast.offsets, ref.offsets)
    assert np.array_equal(fast.ids, ref.ids) and np.array_equal(fast.label_values, ref.label_values)


# ---------------------------------------------------------------------------------------------
# the template's control markers must be tokens of the tokenizer

LLAMA3 = SHARED_TOKENIZERS / "llama3"


def test_markers_must_be_single_tokens(qwen, chatml, tiny_tokenizer):
    from packtool.errors import UsageError
    from packtool.tokenization.chat_template import check_markers

    check_markers(spec_of(qwen), chatml)  # <|im_start|>, <|im_end|> are Qwen3 tokens
    tiny = TokenizerSpec.from_tokenizer(tiny_tokenizer(None), name="tiny")
    check_markers(
        tiny,
        _template("{# mentions <|nope|> #}<|im_start|>{{ messages[0].content }}<|im_end|>", "ok"),
    )
    with pytest.raises(
        UsageError,
        match=r"'bad' writes <\|eot_id\|>, which is not a single token of tokenizer "
        r"tiny: .*plain text.*--chat-template",
    ):
        check_markers(tiny, _template("<|im_start|>{{ messages[0].content }}<|eot_id|>", "bad"))


def test_llama3_with_chatml_template_is_refused(tmp_path):
    if not LLAMA3.is_dir():
        pytest.skip(f"{LLAMA3} is absent")
    from packtool.api import load_tokenized
    from packtool.config import TokenizeConfig
    from packtool.errors import UsageError

    data = tmp_path / "d.jsonl"
    data.write_text(
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n'
    )
    with pytest.raises(
        UsageError, match=r"<\|im_end\|>, <\|im_start\|>, which are not a single token of tokenizer"
    ):
        load_tokenized(
            str(data),
            TokenizeConfig(
                tokenizer=str(LLAMA3), chat_template="chatml-train", num_proc=1, cache=False
            ),
            progress=False,
        )


def test_locate_is_str_find():
    """render.locate (a short head, then a compare) gives str.find's answer on text full of near
    misses, with and without bounds."""
    rng = np.random.default_rng(0)
    for _ in range(20000):
        alphabet = ["a", "ab", "abc", "ab\u00e9"][rng.integers(4)]
        text = "".join(rng.choice(list(alphabet), rng.integers(0, 120)))
        if rng.random() < 0.5 and text:
            i, j = sorted(rng.integers(0, len(text) + 1, 2))
            value = text[i:j]
        else:
            value = "".join(rng.choice(list(alphabet), rng.integers(0, 60)))
        start, end = sorted(rng.integers(0, len(text) + 3, 2))
        assert locate(text, value, start, end) == text.find(value, start, end)
        assert locate(text, value) == text.find(value)


def test_lost_content_in_any_order():
    """Texts are looked for after the last one found first, then anywhere: a template that writes
    them in another order drops nothing; one that leaves one out is named."""
    msgs = [
        {"role": "system", "content": "Be brief and exact in every single answer you give."},
        {"role": "user", "content": "What is the capital city of France, and why is it?"},
        {"role": "assistant", "content": "Paris is the capital city of France since long ago."},
    ]
    text = "<a>" + "".join(f"[{m['content']}]" for m in reversed(msgs))
    assert lost_content(msgs, None, text) is None
    assert lost_content(msgs, None, text.replace(msgs[2]["content"], "")) == (
        "the text of turn 2 (assistant)"
    )


@pytest.mark.parametrize("backend", ["hf", "fastokens"])
def test_mixed_batch_equals_one_by_one(qwen, chatml, backend):
    """A batch of every kind, refused ones and control tokens among them: each item as it is alone
    (ids, labels, error, control tokens, label notes), the chat texts in one backend call."""
    fake = [
        {"role": "user", "content": "hi"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": "f", "arguments": {"q": "<|im_start|>x"}}}],
        },
    ]
    items = [
        chat(CONVERSATIONS[0]),
        {"kind": "prompt_completion", "prompt": "Q?", "completion": " A"},
        chat([]),
        chat(CONVERSATIONS[2], TOOLS),
        {"kind": "text", "text": "plain text"},
        {"kind": "weird"},
        chat(fake),
        chat([{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}]),
        chat(CONVERSATIONS[1]),
    ]
    for mode in ("keep", "split"):
        enc = Encoder(spec_of(qwen), chatml, backend=backend, special_in_content=mode)
        batch = enc.encode(items)
        assert batch.special.tolist() == [False] * 6 + [True, False, False]
        for k, item in enumerate(items):
            one = enc.encode([item])
            assert batch.errors[k] == one.errors[0]
            assert batch.notes[k] == one.notes[0] and batch.special[k] == one.special[0]
            assert np.array_equal(batch.input_ids[k], one.input_ids[0])
            assert np.array_equal(batch.labels[k], one.labels[0])


def test_control_tokens_found_however_the_batch_is_searched(qwen, chatml, monkeypatch):
    """The batch's one search of its messages as JSON flags exactly the conversations the walk over
    each message does: a control token in a tool call's argument among 60 clean conversations,
    with a message value JSON cannot hold (the walk then), with control tokens not written in
    JSON as themselves (the walk then)."""
    clean = [chat(m) for m in CONVERSATIONS] * 20
    hit = chat([{"role": "user", "content": "q"}, {"role": "assistant", "content": "<|im_end|>"}])
    odd = chat([{"role": "user", "content": "q", "meta": {1: "<|im_start|>"}}, *CONVERSATIONS[0]])
    enc = Encoder(spec_of(qwen), chatml)

    def may_hold(examples):
        return enc.content.may_hold([x["messages"] for x in examples])

    assert not may_hold(clean) and may_hold([*clean, hit])
    assert may_hold([odd])  # (a dict key JSON cannot hold: walked)
    batch = [*clean[:30], hit, *clean[30:], odd]
    want = [bool(enc.content.found(template_messages(x))) for x in batch]
    assert sum(want) == 1 and enc.encode(batch).special.tolist() == want
    monkeypatch.setattr(enc.content, "json_safe", False)
    assert may_hold(clean) and enc.encode(batch).special.tolist() == want


@pytest.mark.parametrize("backend", ["hf", "fastokens"])
def test_a_batch_the_tokenizer_refuses_is_tried_once_then_item_by_item(
    qwen, chatml, backend, monkeypatch
):
    """One text the backend cannot encode: the batch call fails once, then each text alone (the
    batch is not tried a second time); that example gets the error, the others their tokens."""
    enc = Encoder(spec_of(qwen), chatml, backend=backend)
    items = [chat(m) for m in CONVERSATIONS]
    want = enc.encode(items)
    real = enc.backend.encode_spans
    calls = []

    def encode_spans(texts, spans):
        calls.append(len(texts))
        if any("Paris" in t for t in texts):
            raise RuntimeError("no\nmore")
        return real(texts, spans)

    monkeypatch.setattr(enc.backend, "encode_spans", encode_spans)
    got = enc.encode(items)
    bad = [k for k, x in enumerate(items) if "Paris" in str(x["messages"])]
    assert len(bad) == 1 and calls == [len(items)] + [1] * len(items)
    assert got.errors == [
        "the tokenizer cannot encode this example: no" if k in bad else None
        for k in range(len(items))
    ]
    for k in set(range(len(items))) - set(bad):
        assert np.array_equal(got.input_ids[k], want.input_ids[k])
        assert np.array_equal(got.labels[k], want.labels[k])
