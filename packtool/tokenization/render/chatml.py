"""A native renderer of the built-in `chatml-train` template: the same text and generation spans as
transformers' jinja renderer, faster (jinja is most of the CPU time of tokenizing chats; figures in
benchmarks/README.md, "Renderers").

    render(messages, tools) -> (text, [(start, end), ...])    spans: each {% generation %} block
    native(messages, tools, kwargs, date) -> (text, spans, True)   the same, as renderer.native_for
                                                                   hands it on (complete: always)

It covers exactly what `templates/chatml-train.jinja` does with the messages `formats` produces
(string contents, OpenAI tool calls, reasoning_content / thinking / reasoning, tools). Anything
else (a non-string content, a tool call without a name, ...) raises `NotNative` and the next
renderer of the chain (packtool.tokenization.render) renders that example. It is used only when
the template's bytes are the built-in file's, and every run checks it: the start-up probe compares it, tokenized, with the
jinja + `tokenizers` reference path on the run's first examples (packtool.tokenization.run_plan.FastCheck).
"""

from __future__ import annotations

import json

TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)
_REASONING = ("reasoning_content", "thinking", "reasoning")
GENERATION_PROMPT = "<|im_start|>assistant\n"  # what add_generation_prompt writes


class NotNative(Exception):
    """This conversation needs the jinja renderer."""


def _tojson(x) -> str:
    return json.dumps(x, ensure_ascii=False)  # transformers' tojson filter with its defaults


def _str(x) -> str:
    if type(x) is not str:
        raise NotNative
    return x


def render(messages: list[dict], tools: list | None) -> tuple[str, list[tuple[int, int]]]:
    if not messages:
        raise NotNative
    out: list[str] = []
    size = 0
    spans: list[tuple[int, int]] = []

    def emit(s: str) -> None:
        nonlocal size
        out.append(s)
        size += len(s)

    first = messages[0]
    if tools:
        emit("<|im_start|>system\n")
        if first.get("role") == "system":
            emit(_str(first.get("content")) + "\n\n")
        emit(TOOLS_HEAD)
        for tool in tools:
            emit("\n")
            emit(_tojson(tool))
        emit(TOOLS_TAIL)
    elif first.get("role") == "system":
        emit("<|im_start|>system\n" + _str(first.get("content")) + "<|im_end|>\n")
    n = len(messages)
    for i, m in enumerate(messages):
        role = m.get("role")
        if role == "user" or (role == "system" and i > 0):
            emit("<|im_start|>" + role + "\n" + _str(m.get("content")) + "<|im_end|>\n")
        elif role == "assistant":
            emit(GENERATION_PROMPT)
            start = size
            reasoning = next((m[k] for k in _REASONING if m.get(k) is not None), None)
            if reasoning:
                emit("<think>\n" + _str(reasoning).strip("\n") + "\n</think>\n\n")
            content = m.get("content", "")
            emit(_str(content))
            for j, call in enumerate(m.get("tool_calls") or ()):
                if not isinstance(call, dict):
                    raise NotNative
                fn = call["function"] if "function" in call else call
                if not isinstance(fn, dict) or "arguments" not in fn:
                    raise NotNative
                if (j == 0 and content) or j > 0:
                    emit("\n")
                args = fn["arguments"]
                emit('<tool_call>\n{"name": "' + _str(fn.get("name")) + '", "arguments": ')
                emit(args if type(args) is str else _tojson(args))
                emit("}\n</tool_call>")
            emit("<|im_end|>")
            spans.append((start, size))
            emit("\n")
        elif role == "tool":
            if i == 0 or messages[i - 1].get("role") != "tool":
                emit("<|im_start|>user")
            emit("\n<tool_response>\n" + _str(m.get("content")) + "\n</tool_response>")
            if i == n - 1 or messages[i + 1].get("role") != "tool":
                emit("<|im_end|>\n")
        elif role != "system":
            raise NotNative  # the template renders unknown roles as nothing; let jinja say so
    return "".join(out), spans


def native(messages: list[dict], tools: list | None, kwargs: dict, date: str | None):
    """render() as the chain calls a native renderer: (text, spans, complete); complete always (the
    template writes every text, reasoning, tool call and definition: lost_content is not run)."""
    text, spans = render(messages, tools)
    return text, spans, True
