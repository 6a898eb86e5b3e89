"""Native renderers: the built-in chatml-train and TRL's `gptoss_training` written out in Python,
giving the text and the generation spans jinja renders (benchmarks/README.md, "Renderers").

    render.native_for(template text) -> chatml | gptoss | None      by the template's bytes
    chatml / gptoss(messages, tools, kwargs, date) -> (text, [(start, end), ...], complete)  or NotNative

Each covers what its template does with the messages `packtool.formats` produces; anything else (a
non-string content, a tool-call turn with both content and thinking, a parameter schema with a
default, items, oneOf, ...) raises NotNative and the next renderer renders it. Values are printed
as jinja prints them (`|tojson` is json.dumps(ensure_ascii=False)).

    gptoss_training   <|start|>system<|message|>...<|end|>(<|start|>developer<|message|>...<|end|>)
                      <|start|>user<|message|>Hi<|end|>
                      {<|start|>assistant<|channel|>final<|message|>Hello!<|return|>}
                                       {...}: a generation block, a span; (...): when there is one

`complete`: the text holds, as written, everything render.lost_content looks for (so it need not
search); False says nothing. Every run checks it on its first examples (pipeline.FastCheck).
"""

from __future__ import annotations

import datetime
import functools
import json

_REASONING = ("reasoning_content", "thinking", "reasoning")


class NotNative(Exception):
    """This conversation goes to the next renderer of the chain."""


def _tojson(x) -> str:  # transformers' tojson filter with its defaults
    return json.dumps(x, ensure_ascii=False)


def _str(x) -> str:
    if type(x) is not str:
        raise NotNative
    return x


def alias(m: dict) -> dict:
    """Reasoning under each name templates read it by, as transformers passes it (its
    `_alias_reasoning_fields`: `thinking` first, `reasoning_content` last)."""
    if m.keys().isdisjoint(_REASONING):  # (most turns have no reasoning)
        return m
    r = next((m[k] for k in _REASONING if m.get(k) is not None), None)
    return m if r is None else {"thinking": r, **m, "reasoning_content": r}


# -- chatml: the built-in chatml-train, natively ---------------------------------------------------
TOOLS_HEAD = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_TAIL = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
)
GENERATION_PROMPT = "<|im_start|>assistant\n"  # what add_generation_prompt writes


def chatml(messages: list[dict], tools: list | None, kwargs=None, date=None):
    """templates/chatml-train.jinja natively: (text, generation spans, complete: always) for the
    messages `formats` produces (string contents, OpenAI tool calls, reasoning); else NotNative."""
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
            emit("\n" + _tojson(tool))
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
    return "".join(out), spans, True


# -- gptoss_training ------------------------------------------------------------------------------
_SYSTEM = (
    "<|start|>system<|message|>You are ChatGPT, a large language model trained by OpenAI.\n"
    "Knowledge cutoff: 2024-06\nCurrent date: {date}\n\nReasoning: medium\n\n"
    "# Valid channels: analysis, commentary, final. Channel must be included for every message."
)
_CALLS = "\nCalls to these tools must go to the commentary channel: 'functions'."
_USER_LEN = len("<|start|>user<|message|><|end|>")
_TAGS = ("<|channel|>analysis<|message|>", "<|channel|>final<|message|>")
_SIMPLE = {"string": "string", "number": "number", "integer": "number", "boolean": "boolean"}
_PARAM_KEYS = {"type", "description", "enum"}


def _param_type(spec) -> str:
    """render_typescript_type for a plain type: string (or a string enum), number, integer,
    boolean; anything else (nullable, items, oneOf, a default, ...) is NotNative."""
    if type(spec) is not dict or not spec.keys() <= _PARAM_KEYS:
        raise NotNative
    t = spec.get("type")
    if type(t) is not str or t not in _SIMPLE:
        raise NotNative
    enum = spec.get("enum")
    if t == "string" and enum:
        if type(enum) is not list or not all(type(x) is str for x in enum):
            raise NotNative
        return '"' + '" | "'.join(enum) + '"'
    return _SIMPLE[t]


def _namespace(tools: list) -> str:
    """render_tool_namespace("functions", tools) for a list of tools of plain parameters."""
    if type(tools) is not list:
        raise NotNative
    out = ["## functions\n\nnamespace functions {\n\n"]
    for tool in tools:
        fn = tool.get("function") if type(tool) is dict else None
        if type(fn) is not dict:
            raise NotNative
        out.append("// " + _str(fn.get("description")) + "\ntype " + _str(fn.get("name")) + " = ")
        params = fn.get("parameters")
        props = params.get("properties") if type(params) is dict else None
        if params and type(params) is not dict or props and type(props) is not dict:
            raise NotNative
        if not props:
            out.append("() => any;\n\n")
            continue
        required = params.get("required") or []
        if type(required) is not list:
            raise NotNative
        out.append("(_: {\n")
        for name, spec in props.items():
            t = _param_type(spec)
            desc = spec.get("description")
            if desc:
                out.append("// " + _str(desc) + "\n")
            out.append(_str(name) + ("" if name in required else "?") + ": " + t + ",\n")
        out.append("}) => any;\n\n")
    out.append("} // namespace functions")
    return "".join(out)


@functools.lru_cache(maxsize=64)
def _system(date: str, tools: bool) -> str:
    day = datetime.date.fromisoformat(date).strftime("%Y-%m-%d")
    return _SYSTEM.format(date=day) + (_CALLS if tools else "") + "<|end|>"


def gptoss(messages: list[dict], tools, kwargs: dict, date: str | None):
    if not messages or type(messages[0]) is not dict:
        raise NotNative
    # the system block (strftime_now() unfixed: today's date)
    head = _system(date or datetime.date.today().isoformat(), bool(tools))
    out = [head]
    size = len(head)
    spans: list[tuple[int, int]] = []
    first = messages[0]
    loop, dev = messages, ""
    if first.get("role") in ("developer", "system"):
        loop, dev = messages[1:], _str(first.get("content"))
    if dev or tools:
        piece = "<|start|>developer<|message|>"
        if dev:
            piece += "# Instructions\n\n" + dev + "\n\n"
        if tools:
            piece += "# Tools\n\n" + _namespace(tools)
        out.append(piece + "<|end|>")
        size += len(out[-1])
    last_call = None  # the name of the last tool call (tool turns are its answers)
    n = len(loop)
    complete = not tools  # no tool definitions, calls or turns, no turn the template skips
    last, last_i = None, -1  # the last assistant turn (aliased) and its place in the loop
    for i, m in enumerate(loop):
        if type(m) is not dict:
            raise NotNative
        role = m.get("role")
        if role == "assistant":
            last, last_i = alias(m), i
            piece, called = _assistant(last, loop, i, i == n - 1)
            if called is not None or i != n - 1:
                last_call = called
            if called is not None:
                complete = False
            spans.append((size, size + len(piece)))
        elif role == "tool":
            if last_call is None or "content" not in m:
                raise NotNative  # the template raises: jinja says it
            piece = (
                "<|start|>functions."
                + last_call
                + " to=assistant<|channel|>commentary<|message|>"
                + _tojson(m.get("content"))
                + "<|end|>"
            )
        elif role == "user":
            content = m.get("content")
            if type(content) is not str:
                raise NotNative
            out += ("<|start|>user<|message|>", content, "<|end|>")
            size += len(content) + _USER_LEN
            continue
        else:
            complete = False
            continue  # a later system or developer turn: the template writes nothing
        out.append(piece)
        size += len(piece)
    if complete and last is not None and "reasoning_content" in last:
        # the last assistant turn's reasoning is written only when it ends the conversation
        r = last["reasoning_content"]
        if type(r) is str and r.strip():
            complete = last_i == n - 1 and last.get("thinking") == r
    return "".join(out), spans, complete


def _tagged(s: str) -> bool:
    """`s` holds a channel tag (the template refuses it)."""
    return "<|channel|>" in s and any(t in s for t in _TAGS)


def _assistant(m: dict, loop: list, i: int, last: bool) -> tuple[str, str | None]:
    """One assistant turn as gptoss_training writes it inside its generation block, and the name
    of its tool call (None: none)."""
    content = m.get("content")
    thinking = m.get("thinking")
    # ("<|channel|>" in s first: _tagged's call only for the rare text that holds it)
    if "content" in m and (
        type(content) is not str or "<|channel|>" in content and _tagged(content)
    ):
        raise NotNative
    if "thinking" in m and (
        type(thinking) is not str or "<|channel|>" in thinking and _tagged(thinking)
    ):
        raise NotNative
    if "tool_calls" not in m:
        if "content" not in m:
            raise NotNative
        if last:
            cot = (
                "<|start|>assistant<|channel|>analysis<|message|>" + thinking + "<|end|>"
                if "thinking" in m
                else ""
            )
            final = "<|start|>assistant<|channel|>final<|message|>" + content + "<|return|>"
            return cot + final, None
        return "<|start|>assistant<|channel|>final<|message|>" + content + "<|end|>", None
    calls = m["tool_calls"]
    if type(calls) is not list or not calls or type(calls[0]) is not dict:
        raise NotNative
    call = calls[0]
    if call.get("function"):
        call = call["function"]
    if type(call) is not dict or "content_type" in call:
        raise NotNative
    name = _str(call.get("name"))
    if "arguments" not in call:
        raise NotNative
    final_later = any(
        type(f) is dict and f.get("role") == "assistant" and "tool_calls" not in f
        for f in loop[i + 1 :]
    )
    out = ""
    if content and thinking:
        raise NotNative  # the template raises: jinja says it
    if content and not final_later:
        out = "<|start|>assistant<|channel|>analysis<|message|>" + content + "<|end|>"
    elif thinking and not final_later:
        out = "<|start|>assistant<|channel|>analysis<|message|>" + thinking + "<|end|>"
    call_text = (
        "<|start|>assistant to=functions."
        + name
        + "<|channel|>commentary json<|message|>"
        + _tojson(call["arguments"])
        + "<|call|>"
    )
    return out + call_text, name
