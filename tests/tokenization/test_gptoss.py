"""The native renderer of TRL's gptoss_training (packtool.tokenization.render.native)
against transformers' jinja renderer: the same text and generation spans on the generated, shared
and edge-case conversations, or NotNative; `complete` only where lost_content finds nothing; the
Renderer hands what it refuses to MiniJinja."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from chat_examples import TOOLS, chat_examples

from packtool.formats.normalize import template_messages
from packtool.tokenization.chat_template import make_template, trl_dir
from packtool.tokenization.render import Renderer, dated_text, lost_content, native_for
from packtool.tokenization.render import native as gptoss
from packtool.tokenization.render.native import NotNative

TRL = trl_dir()
pytestmark = pytest.mark.skipif(TRL is None, reason="TRL is not installed (its chat_templates/)")
SPECIAL = {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"}
DATE = "2026-12-02"


def _tool(params, description="Does it."):
    return {"type": "function", "function": {"name": "f", "description": description, **params}}


TOOL_SETS = [  # parameter schemas: written natively, or NotNative (then MiniJinja renders them)
    TOOLS,
    [_tool({})],
    [_tool({"parameters": {"type": "object", "properties": {}}})],
    [
        _tool(
            {
                "parameters": {
                    "type": "object",
                    "properties": {
                        "unit": {"type": "string", "enum": ["c", "f"], "description": "Unit."},
                        "n": {"type": "integer"},
                        "x": {"type": "number", "description": ""},
                        "ok": {"type": "boolean"},
                    },
                    "required": ["n"],
                }
            }
        ),
        {"type": "function", "function": {"name": "g", "description": "G.", "parameters": {}}},
    ],
    [_tool({"parameters": {"properties": {"a": {"type": "array", "items": {"type": "string"}}}}})],
    [_tool({"parameters": {"properties": {"a": {"type": "string", "default": "x"}}}})],
    [_tool({"parameters": {"properties": {"a": {"type": "string"}}}}, description=None)],
]
CALL = {"type": "function", "function": {"name": "f", "arguments": {"unit": "c", "n": 2}}}
EDGE = [  # shapes either renderer must get right, refuse (NotNative) or leave to jinja's error
    [{"role": "system", "content": ""}, {"role": "user", "content": "u"}],
    [{"role": "developer", "content": "d"}, {"role": "assistant", "content": " a\n"}],
    [
        {"role": "user", "content": "u"},
        {"role": "system", "content": "late"},
        {"role": "assistant", "content": "a", "reasoning_content": "r", "thinking": "r"},
    ],
    [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a", "reasoning_content": "r", "thinking": "r"},
        {"role": "user", "content": "again"},
    ],
    [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "a", "reasoning_content": "r", "thinking": "other"},
    ],
    [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "looking", "tool_calls": [CALL]},
        {"role": "tool", "content": "21"},
    ],
    [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "looking", "tool_calls": [CALL]},
        {"role": "tool", "content": "21"},
        {"role": "assistant", "content": "done"},
    ],
    [
        {"role": "user", "content": "u"},
        {
            "role": "assistant",
            "tool_calls": [CALL, CALL],
            "reasoning_content": "t",
            "thinking": "t",
        },
        {"role": "tool", "content": {"k": [1, 2.5]}},
        {"role": "assistant", "content": "x", "tool_calls": [CALL]},
    ],
    [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "c", "thinking": "t", "tool_calls": [CALL]},
    ],
    [
        {"role": "user", "content": "u"},
        {"role": "assistant", "content": "<|channel|>final<|message|>"},
    ],
    [{"role": "user", "content": "u"}, {"role": "tool", "content": "orphan"}],
    [{"role": "user", "content": "u"}, {"role": "assistant"}],
    [{"role": "user", "content": ["a", "list"]}, {"role": "assistant", "content": "x"}],
    [
        {"role": "user", "content": "\x1cseparators\x1f "},
        {"role": "assistant", "content": "\u3000y"},
    ],
    [{"role": "assistant", "content": "first"}],
]


def _conversations():
    out = [(template_messages(e), e.get("tools") or None) for e in chat_examples()]
    out += [(m, None) for m in EDGE]
    out += [(m, t) for m in EDGE for t in TOOL_SETS]
    return out


def _template(name):
    t = make_template((TRL / f"{name}.jinja").read_text(), f"trl:{name}", "trl")
    return dataclasses.replace(t, date=DATE) if "strftime_now" in t.text else t


def _jinja(template, messages, tools):
    from transformers.utils.chat_template_utils import render_jinja_template

    try:
        texts, spans = render_jinja_template(
            conversations=[messages],
            tools=tools,
            chat_template=dated_text(template),
            return_assistant_tokens_mask=True,
            **SPECIAL,
        )
    except Exception:
        return None
    return texts[0], [tuple(s) for s in spans[0]]


def test_native_renders_as_jinja():
    template = _template("gptoss_training")
    native = native_for(template.text)
    assert native is not None
    same = refused = complete = 0
    for messages, tools in _conversations():
        given = copy.deepcopy(messages)
        want = _jinja(template, messages, tools)
        try:
            text, spans, whole = native(messages, tools, SPECIAL, template.date)
        except NotNative:
            refused += 1
            continue
        assert messages == given  # (nothing written into the data)
        assert want is not None, ("native renders what jinja refuses", messages, tools)
        assert (text, spans) == want, (messages, tools)
        same += 1
        if whole:  # lost_content is skipped: it must find nothing
            complete += 1
            assert lost_content(messages, tools, text) is None, (messages, tools)
    assert same > 300 and complete > 250 and refused < same / 4, (same, refused, complete)


def test_native_only_for_trl_files_byte_for_byte():
    text = (TRL / "gptoss_training.jinja").read_text()
    assert native_for(text) is gptoss.gptoss
    assert native_for(text + "\n") is None
    for other in ("llama3_training", "qwen3_training"):  # (MiniJinja renders them)
        assert native_for((TRL / f"{other}.jinja").read_text()) is None


class _Spec:
    special_tokens = SPECIAL
    eos_token = "<|eot_id|>"
    all_special_tokens = ["<|begin_of_text|>", "<|eot_id|>"]
    control_tokens = {"<|begin_of_text|>": 0, "<|eot_id|>": 1, "<|end|>": 2, "<|return|>": 3}


@pytest.mark.parametrize("name", ["llama3_training", "gptoss_training"])
def test_renderer_hands_what_native_refuses_to_minijinja(name):
    """Conversations native refuses (a parameter schema with items, a default) render through
    MiniJinja and jinja alike: the same text, spans and refusals as the jinja renderer."""
    from packtool.tokenization.render import ExampleError

    template = dataclasses.replace(_template(name), mode="markers")
    fast = Renderer(_Spec(), template, "assistant", "compiled")
    ref = Renderer(_Spec(), template, "assistant", "jinja")
    for messages, tools in [(m, t) for m in EDGE for t in (None, *TOOL_SETS[-3:])]:
        got = want = None
        try:
            got = fast.conversation(messages, tools)
        except ExampleError as e:
            got = str(e)
        try:
            want = ref.conversation(messages, tools)
        except ExampleError as e:
            want = str(e)
        assert got == want, (messages, tools)
