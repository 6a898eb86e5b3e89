"""Labels from chat templates: identical to apply_chat_template, weights, fallback, other kinds."""

from __future__ import annotations

import re

import numpy as np
import pytest

from packtool.tokenization.encode import Encoder, spans_to_mask
from packtool.tokenization.loading import (
    BUILTIN_TEMPLATES,
    ChatTemplate,
    _template,
    resolve_template,
)

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather by city.",
                                           "parameters": {"type": "object",
                                                          "properties": {"city": {"type": "string"}}}}}]
CONVERSATIONS = [
    [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"}],
    [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3? Explain ünïcödé 🙂 too."},
        {"role": "assistant", "content": "6 — ünïcödé 🙂", "reasoning_content": "3+3 is six."},
    ],
    [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": '{"temp": 21}'},
        {"role": "tool", "content": '{"wind": 3}'},
        {"role": "assistant", "content": "21 degrees and calm."},
    ],
]


def chat(messages, tools=None):
    return {"kind": "chat", "messages": messages, "tools": tools}


@pytest.fixture(scope="module")
def chatml(qwen):
    return resolve_template(qwen, "chatml-train")


@pytest.mark.parametrize("k", range(len(CONVERSATIONS)))
def test_identical_to_apply_chat_template(qwen, chatml, k):
    msgs = CONVERSATIONS[k]
    tools = TOOLS if k == 2 else None
    ours = Encoder(qwen.tokenizer, chatml).encode([chat(msgs, tools)])
    assert ours.errors == [None]
    ref = qwen.tokenizer.apply_chat_template(msgs, tools=tools, chat_template=chatml.source, tokenize=True,
                                             return_dict=True, return_assistant_tokens_mask=True)
    assert ours.input_ids[0].tolist() == ref["input_ids"]
    assert (ours.labels[0] != -100).astype(int).tolist() == ref["assistant_masks"]
    assert np.array_equal(ours.labels[0][ours.labels[0] != -100], ours.input_ids[0][ours.labels[0] != -100])


def test_batch_equals_one_by_one(qwen, chatml):
    enc = Encoder(qwen.tokenizer, chatml)
    batch = enc.encode([chat(m) for m in CONVERSATIONS])
    for k, m in enumerate(CONVERSATIONS):
        one = enc.encode([chat(m)])
        assert np.array_equal(batch.input_ids[k], one.input_ids[0])
        assert np.array_equal(batch.labels[k], one.labels[0])


def test_end_of_turn_token_is_trained(qwen, chatml):
    enc = Encoder(qwen.tokenizer, chatml).encode([chat(CONVERSATIONS[1])])
    ids, labels = enc.input_ids[0], enc.labels[0]
    im_end = qwen.tokenizer.convert_tokens_to_ids("<|im_end|>")
    trained_ends = int(np.sum((ids == im_end) & (labels != -100)))
    assert trained_ends == 2  # one per assistant turn; system/user ends carry no loss
    assert int(np.sum(ids == im_end)) == 5


def test_weight_zero_and_train_on(qwen, chatml):
    msgs = [dict(m) for m in CONVERSATIONS[1]]
    full = Encoder(qwen.tokenizer, chatml).encode([chat(msgs)]).labels[0]
    msgs[2]["weight"] = 0.0
    weighted = Encoder(qwen.tokenizer, chatml).encode([chat(msgs)]).labels[0]
    last = Encoder(qwen.tokenizer, chatml, "last").encode([chat(CONVERSATIONS[1])]).labels[0]
    every = Encoder(qwen.tokenizer, chatml, "all").encode([chat(CONVERSATIONS[1])])
    assert np.array_equal(weighted, last)
    assert 0 < np.sum(weighted != -100) < np.sum(full != -100)
    assert np.array_equal(every.labels[0], every.input_ids[0])


def test_no_assistant_turn_has_zero_loss(qwen, chatml):
    enc = Encoder(qwen.tokenizer, chatml).encode([chat([{"role": "user", "content": "only a question"}])])
    assert enc.errors == [None] and np.all(enc.labels[0] == -100)


def test_prefix_diff_fallback_matches_markers(qwen, chatml):
    """The same template without markers gives the same trained tokens through the prefix diff."""
    plain = re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", chatml.source)
    fallback = _template(plain, "chatml-plain")
    assert not fallback.has_generation
    for k, msgs in enumerate(CONVERSATIONS):
        tools = TOOLS if k == 2 else None
        a = Encoder(qwen.tokenizer, chatml).encode([chat(msgs, tools)])
        b = Encoder(qwen.tokenizer, fallback).encode([chat(msgs, tools)])
        assert b.errors == [None]
        assert np.array_equal(a.input_ids[0], b.input_ids[0])
        assert np.array_equal(a.labels[0], b.labels[0])


def test_not_prefix_preserving_template_fails_with_pointer(qwen):
    official = ChatTemplate(qwen.tokenizer.chat_template, "tokenizer", "x", False)
    enc = Encoder(qwen.tokenizer, official).encode([chat(CONVERSATIONS[1])])
    assert enc.errors[0] is not None
    assert re.search(r"not prefix-preserving.*--chat-template chatml-train", enc.errors[0])


def test_tiny_tokenizer_fallback(tiny_tokenizer):
    tpl = "{% for m in messages %}<|im_start|>{{ m.role }} : {{ m.content }}<|im_end|>{% endfor %}" \
          "{% if add_generation_prompt %}<|im_start|>assistant : {% endif %}"
    tok = tiny_tokenizer(tpl)
    msgs = [{"role": "user", "content": "hello world"}, {"role": "assistant", "content": "the answer is four"}]
    enc = Encoder(tok, _template(tpl, "tiny")).encode([chat(msgs)])
    trained = tok.convert_ids_to_tokens(enc.input_ids[0][enc.labels[0] != -100].tolist())
    assert "".join(trained).replace(" ", "") == "theansweris four<|im_end|>".replace(" ", "")


def test_prompt_completion_and_text(qwen, chatml):
    enc = Encoder(qwen.tokenizer, chatml).encode(
        [{"kind": "prompt_completion", "prompt": "Q: capital of France?", "completion": " Paris"},
         {"kind": "text", "text": "plain pretraining text"}])
    p = qwen.tokenizer("Q: capital of France?")["input_ids"]
    ids, labels = enc.input_ids[0], enc.labels[0]
    assert np.all(labels[: len(p)] == -100) and np.all(labels[len(p):] == ids[len(p):])
    assert ids[-1] == qwen.tokenizer.eos_token_id
    assert np.array_equal(enc.labels[1], enc.input_ids[1])


def test_errors_are_per_example(qwen, chatml):
    enc = Encoder(qwen.tokenizer, chatml).encode([chat([]), chat(CONVERSATIONS[0]), {"kind": "weird"}])
    assert enc.errors[0] == "empty conversation" and enc.errors[1] is None and "unknown" in enc.errors[2]


def test_spans_to_mask_overlap_rule():
    offsets = np.array([[0, 2], [2, 5], [5, 6], [6, 9]])
    assert spans_to_mask(offsets, np.array([[3, 6]])).tolist() == [False, True, True, False]
    assert spans_to_mask(offsets, np.array([[0, 1], [8, 9]])).tolist() == [True, False, False, True]
    assert spans_to_mask(offsets, np.zeros((0, 2), int)).tolist() == [False] * 4


def test_builtin_templates_listed():
    assert "chatml-train" in BUILTIN_TEMPLATES


def test_prefix_diff_assistant_first_turn_does_not_train_its_header(qwen, chatml):
    plain = _template(re.sub(r"\{%-?\s*(end)?generation\s*-?%\}", "", chatml.source), "chatml-plain")
    msgs = [{"role": "assistant", "content": "Hi there"}, {"role": "user", "content": "q"},
            {"role": "assistant", "content": "A1"}]
    a = Encoder(qwen.tokenizer, chatml).encode([chat(msgs)])
    b = Encoder(qwen.tokenizer, plain).encode([chat(msgs)])
    assert b.errors == [None] and np.array_equal(a.labels[0], b.labels[0])
    trained = qwen.tokenizer.decode(b.input_ids[0][b.labels[0] != -100].tolist())
    assert trained == "Hi there<|im_end|>A1<|im_end|>"


def test_prefix_diff_refuses_to_guess_when_a_prefix_cannot_render(qwen):
    tpl = ("{% if add_generation_prompt and messages[-1].role != 'user' %}{{ raise_exception('no') }}{% endif %}"
           "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
           "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
            {"role": "assistant", "content": "A1"}, {"role": "system", "content": "NOTE"},
            {"role": "assistant", "content": "A2"}]
    enc = Encoder(qwen.tokenizer, _template(tpl, "strict")).encode([chat(msgs)])
    assert re.search(r"cannot render the conversation before assistant turn 4 \(no\)", enc.errors[0])
