"""Turns as stored → Message dicts (packtool.formats, "Message"): the role from `role` or `from`
(ShareGPT tags too), the content from `content` or `value`, a string or typed parts (text,
reasoning, tool_call); tool calls and `tools` in OpenAI or flat style, dicts or JSON strings."""

from __future__ import annotations

import json
from typing import Any

from packtool.formats import FormatError, wrong_type
from packtool.formats.detect import KNOWN_ROLES_TEXT, ROLE_TAGS, ReadPlan, keys_text

_TEXT_PARTS = frozenset(("text", "input_text", "output_text"))
_REASONING_PARTS = frozenset(("reasoning", "thinking"))
_TOOL_CALL_PARTS = frozenset(("tool_call", "function_call"))


def make_example(
    kind: str, messages=None, tools=None, text=None, prompt=None, completion=None
) -> dict:
    return {
        "kind": kind,
        "messages": messages,
        "tools": tools,
        "text": text,
        "prompt": prompt,
        "completion": completion,
    }


def make_message(role, content, tool_calls=None, reasoning=None, weight=None, name=None) -> dict:
    return {
        "role": role,
        "content": content,
        "tool_calls": tool_calls,
        "reasoning_content": reasoning,
        "weight": weight,
        "name": name,
    }


def read_turns(turns: Any, plan: ReadPlan, key: str, allow_empty=False, offset=0) -> list[dict]:
    if not isinstance(turns, list):
        raise wrong_type(f"'{key}'", turns, "a list of messages")
    if not turns and not allow_empty:
        raise FormatError(f"empty conversation: '{key}' has no messages")
    return [_turn(t, i, plan) for i, t in enumerate(turns, offset)]


def first_of(d: dict, keys: tuple[str, ...]) -> Any:
    for k in keys:
        v = d.get(k)
        if v is not None:
            return v
    return None


_PLAIN_ROLES = {tag: role for tag, (role, call) in ROLE_TAGS.items() if not call}


def _turn(turn: Any, i: int, plan: ReadPlan) -> dict:
    """One turn → a Message. The common turn, {"role": a role name, "content": a string} under no
    --column/--role, is made directly: `_read_turn` would give it the same Message."""
    if type(turn) is dict and len(turn) == 2 and plan.plain:
        role, content = turn.get("role"), turn.get("content")
        if type(role) is str and type(content) is str and role in _PLAIN_ROLES:
            return make_message(_PLAIN_ROLES[role], content)
    return _read_turn(turn, i, plan)


def _read_turn(turn: Any, i: int, plan: ReadPlan) -> dict:
    if not isinstance(turn, dict):
        raise wrong_type(f"message {i}", turn, "an object with a role")
    raw = first_of(turn, plan.role_keys)
    if not isinstance(raw, str):
        if raw is None:
            raise FormatError(
                f"message {i} has no {' or '.join(map(repr, plan.role_keys))}; "
                f"it has keys {keys_text(turn)}"
            )
        raise wrong_type(f"message {i} role", raw, "a string")
    tag = plan.roles.get(raw, raw)
    found = ROLE_TAGS.get(tag) or ROLE_TAGS.get(tag.lower())
    if found is None:
        fix = (
            f"map it with --role {raw}=OURS"
            if raw.strip() and "=" not in raw
            else "fix the record (--role cannot map an empty role or one with '=')"
        )
        raise FormatError(f"message {i} has unknown role {raw!r}; known: {KNOWN_ROLES_TEXT}; {fix}")
    role, is_call = found
    content = first_of(turn, plan.content_keys)

    tool_calls = None
    reasoning = first_of(turn, ("reasoning_content", "reasoning", "thinking"))
    if reasoning is not None and not isinstance(reasoning, str):
        raise wrong_type(f"message {i} ({role}) reasoning", reasoning, "a string")
    if is_call:  # ShareGPT function_call: the content is the call itself
        if content is None:
            raise FormatError(f"message {i} (function_call) has no content")
        tool_calls = _tool_calls(content, i)
        content = ""
    elif isinstance(content, list):
        content, part_reasoning, tool_calls = _parts(content, i, role)
        if part_reasoning is not None:
            reasoning = part_reasoning if reasoning is None else reasoning + part_reasoning
    calls = turn.get("tool_calls")
    if calls is not None:
        more = _tool_calls(calls, i)
        tool_calls = more if tool_calls is None else tool_calls + more
    if not isinstance(content, str):
        if content is None and tool_calls:  # OpenAI: content null beside tool_calls
            content = ""
        else:
            raise FormatError(
                f"message {i} ({role}) content is {type(content).__name__}, "
                "expected a string or a list of typed parts"
            )

    weight = first_of(turn, ("weight", "loss_weight"))
    if weight is not None:
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight not in (0, 1):
            raise FormatError(
                f"message {i} ({role}) weight is {weight!r}; packtool trains or masks whole turns, so it "
                "must be 0 or 1 (fractional weights would be silently rounded by a mask)"
            )
        weight = float(weight)
    name = turn.get("name")
    if name is not None and not isinstance(name, str):
        raise wrong_type(f"message {i} ({role}) name", name, "a string")
    return make_message(role, content, tool_calls or None, reasoning, weight, name)


def _parts(parts: list, i: int, role: str) -> tuple[str, str | None, list | None]:
    """Typed content parts -> (text, reasoning or None, tool calls or None)."""
    texts: list[str] = []
    thoughts: list[str] = []
    calls: list[dict] = []
    for j, part in enumerate(parts):
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, dict):
            raise wrong_type(
                f"message {i} ({role}) content part {j}", part, "an object with a 'type'"
            )
        kind = part.get("type")
        if kind in _TOOL_CALL_PARTS:
            value = first_of(part, ("value", "function", kind))
            calls.extend(_tool_calls(part if value is None else value, i))
            continue
        if kind in _TEXT_PARTS:
            out = texts
        elif kind in _REASONING_PARTS:
            out = thoughts
        else:
            raise FormatError(
                f"message {i} ({role}) has a content part of type {kind!r}; "
                "only text, reasoning and tool_call parts are supported"
            )
        value = first_of(part, ("text", "value", kind, "content"))
        if not isinstance(value, str):
            raise FormatError(
                f"message {i} ({role}) {kind} part {j} is {type(value).__name__}, expected a string"
            )
        out.append(value)
    return "".join(texts), "".join(thoughts) if thoughts else None, calls or None


def _tool_calls(value: Any, i: int) -> list[dict]:
    if isinstance(value, str):
        value = _json(value, f"message {i} tool call")
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise FormatError(f"message {i} tool calls are a {type(value).__name__}, expected a list")
    return [_tool_call(c, i) for c in value]


def _json(text: str, what: str, verb: str = "is") -> Any:
    """json.loads, or a FormatError saying what was not valid JSON and where."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise FormatError(f"{what} {verb} not valid JSON: {e.msg} (col {e.colno})") from None


def _tool_call(call: Any, i: int) -> dict:
    if isinstance(call, str):
        call = _json(call, f"message {i} tool call")
    if not isinstance(call, dict):
        raise wrong_type(f"message {i} tool call", call, "an object")
    fn = call.get("function")
    if not isinstance(fn, dict):
        fn = call
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise FormatError(f"message {i} tool call has no 'name'; it has keys {keys_text(fn)}")
    args = first_of(fn, ("arguments", "parameters"))
    if args is None or args == "":
        args = {}
    elif isinstance(args, str):
        args = _json(args, f"message {i} tool call {name!r} arguments", "are")
    if not isinstance(args, dict):
        raise FormatError(
            f"message {i} tool call {name!r} arguments are a {type(args).__name__}, expected an object"
        )
    return {"type": "function", "function": {"name": name, "arguments": args}}


def read_tools(value: Any) -> list[dict] | None:
    if value is None or value == "":
        return None
    if isinstance(value, str):
        value = _json(value, "'tools'")
    if isinstance(value, dict):
        value = [value]
    if not isinstance(value, list):
        raise wrong_type("'tools'", value, "a list of function schemas")
    out = []
    for j, tool in enumerate(value):
        if isinstance(tool, str):  # some datasets store each schema as its own JSON string
            tool = _json(tool, f"'tools' item {j}")
        if not isinstance(tool, dict):
            raise wrong_type(f"'tools' item {j}", tool, "an object")
        if "function" not in tool and "name" in tool:
            tool = {"type": "function", "function": tool}
        out.append(tool)
    return out or None
