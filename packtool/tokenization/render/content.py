"""What every renderer's output must hold, and how an example is refused.

lost_content(messages, tools, text) -> None | what the text lacks, in words
    every message's text, the last assistant turn's reasoning, every tool call (its name,
    argument names and values) and tool definition must appear in the rendered text, else
    the example is refused naming what the template dropped (Renderer.conversation)
locate / appears / leaf_values       the searches it (and label_audit) is made of
ExampleError, NotPrefixPreserving    one example cannot be encoded (the source counts it)
"""

from __future__ import annotations

import json
import sys


class ExampleError(Exception):
    """One example cannot be encoded; the source counts it (or stops, with --on-error error)."""


class NotPrefixPreserving(ExampleError):
    """The template renders an earlier turn differently once later turns follow (mode prefix)."""


def first_line(e: Exception) -> str:
    return str(e).splitlines()[0] if str(e).strip() else type(e).__name__


def locate(text: str, value: str, start: int = 0, end: int = sys.maxsize) -> int:
    """text.find(value, start, end), by the first place of its first 16 chars and a compare there
    (str.find prepares a long needle anew each call: 1-3 µs for a message in a 2,000-char text)."""
    at = text.find(value[:16], start, end)
    if at < 0 or text.startswith(value, at, end):
        return at
    return text.find(value, at, end)


def appears(value: str, text: str) -> bool:
    """`value` is in `text` as it is, stripped, or JSON-escaped (templates that `tojson` content)."""
    if locate(text, value) >= 0 or locate(text, value.strip()) >= 0:
        return True
    return any(json.dumps(value, ensure_ascii=a)[1:-1] in text for a in (False, True))


def leaf_values(value) -> list:
    """The leaf values of tool-call arguments (strings, numbers, booleans), depth first."""
    if isinstance(value, dict):
        return [x for v in value.values() for x in leaf_values(v)]
    if isinstance(value, list):
        return [x for v in value for x in leaf_values(v)]
    return [] if value is None else [value]


def _leafappears(value, text: str) -> bool:
    if isinstance(value, str):
        return not value.strip() or appears(value, text)
    return any(s in text for s in {json.dumps(value), str(value)})  # 3 / 3.0 / true / True


def lost_content(messages: list[dict], tools, text: str) -> str | None:
    """What of the conversation the rendered `text` lacks, in words; None when everything is there:
    a message's text; the reasoning of the last assistant turn (templates may drop earlier turns'
    reasoning by design: gpt-oss, Qwen3); each tool call's name (as often as it is called, beside
    its definitions), argument names and values; each tool definition."""
    last = len(messages) - 1
    while last >= 0 and messages[last]["role"] != "assistant":
        last -= 1
    defined = [
        (t.get("function", t) if isinstance(t, dict) else {}).get("name") for t in tools or ()
    ]
    calls: dict[str, int] = {}
    at = 0  # where the last text was found: the next is usually just after it
    for i, m in enumerate(messages):
        c = m.get("content")
        if isinstance(c, str):
            if (k := locate(text, c, at)) >= 0:
                at = k + len(c)
            elif c.strip() and not appears(c, text):
                return f"the text of turn {i} ({m['role']})"
        if i == last:
            r = m.get("reasoning_content")
            if isinstance(r, str) and r.strip() and not appears(r, text):
                return f"the reasoning of turn {i} (the last assistant turn)"
        if "tool_calls" not in m:
            continue
        for call in m["tool_calls"] or ():
            fn = call.get("function", call) if isinstance(call, dict) else {}
            name = fn.get("name")
            if not name:
                continue
            calls[name] = calls.get(name, 0) + 1
            if text.count(name) < calls[name] + defined.count(name):
                return f"the tool call {name!r} of turn {i} ({m['role']})"
            args = fn.get("arguments")
            if isinstance(args, dict):
                missing = [k for k in args if k not in text] + [
                    repr(v) for v in leaf_values(args) if not _leafappears(v, text)
                ]
            else:
                missing = (
                    ["(all)"]
                    if isinstance(args, str) and args.strip() and not appears(args, text)
                    else []
                )
            if missing:
                return f"the arguments {', '.join(map(str, missing))} of tool call {name!r} of turn {i}"
    for name in defined:
        if name and name not in text:
            return f"the tool definition {name!r}"
    return None
