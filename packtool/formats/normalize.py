"""A record → an Example (packtool.formats), one function per format; `template_messages` gives a
chat template the messages as it expects them. Below them, the turns: a Message dict from a turn
as stored (the role from `role` or `from`, ShareGPT tags too; the content from `content` or
`value`, a string or typed parts: text, reasoning, tool_call); tool calls and `tools` in OpenAI
or flat style, dicts or JSON strings."""

from __future__ import annotations

import json
from typing import Any

from packtool.config import ReadConfig
from packtool.errors import UsageError
from packtool.formats import AUTO, FORMATS, FormatError
from packtool.formats.detect import (
    KNOWN_ROLES_TEXT,
    ROLE_TAGS,
    ReadPlan,
    detect_format,
    keys_text,
    read_plan,
    rename,
    sft_refusal,
)


def normalize(record: dict, fmt: str, cfg: ReadConfig) -> dict:
    """Record -> Example (see the module docstring). Raises FormatError on a bad record. `fmt`
    AUTO: the record's own format (detect_format), or the FormatError saying it fits none."""
    plan = read_plan(cfg)
    if fmt == AUTO:
        fmt = detect_format(record, cfg)[0]
    fn = _NORMALIZERS.get(fmt)
    if fn is None:
        raise UsageError(f"unknown format {fmt!r}; use one of {'|'.join(FORMATS)}")
    if not isinstance(record, dict):
        raise FormatError(f"record is a {type(record).__name__}, expected a JSON object")
    if plan.renames:
        record = rename(record, plan.renames)
    if cfg.format is not None:  # detection refuses these on the file's first record
        refusal = sft_refusal(record, cfg.format)
        if refusal is not None:
            raise FormatError(refusal)
    return fn(record, plan)


def template_messages(example: dict) -> list[dict]:
    """The messages as a chat template expects them: keys whose value is None dropped, `weight`
    dropped (it is ours, not the template's); reasoning also as `thinking` (gpt-oss templates read that)."""
    out = []
    for m in example["messages"] or ():
        t = {k: v for k, v in m.items() if v is not None and k != "weight"}
        if t.get("reasoning_content") is not None:
            t["thinking"] = t["reasoning_content"]
        out.append(t)
    return out


def _require(record: dict, key: str, fmt: str) -> Any:
    value = record.get(key)
    if value is None:
        if key in record:
            raise FormatError(f"{fmt} record has '{key}': null; give it a value or drop the record")
        raise FormatError(f"{fmt} record has no '{key}'; it has keys {keys_text(record)}")
    return value


def _norm_messages(record: dict, plan: ReadPlan) -> dict:
    messages = read_turns(_require(record, "messages", "messages"), plan, "messages")
    return make_example("chat", messages, read_tools(record.get("tools")))


def _norm_sharegpt(record: dict, plan: ReadPlan) -> dict:
    turns = _require(record, "conversations", "sharegpt")
    messages = read_turns(turns, plan, "conversations")
    system = _system(record.get("system"))
    if system and messages[0]["role"] == "system":
        if messages[0]["content"] != system[0]["content"]:
            raise FormatError(
                "record has both a 'system' column and a different system turn; keep one"
            )
    else:
        messages = system + messages
    return make_example("chat", messages, read_tools(record.get("tools")))


def _system(value: Any) -> list[dict]:
    """The `system` column as [system message]; [] when absent or empty."""
    if value is None or value == "":
        return []
    if not isinstance(value, str):
        raise FormatError(f"'system' is a {type(value).__name__}, expected a string")
    return [make_message("system", value)]


def _norm_firefly(record: dict, plan: ReadPlan) -> dict:
    """Firefly / MOSS-003: `conversation` [{human, assistant}, ...] -> [system], user, assistant, ..."""
    pairs = _require(record, "conversation", "firefly")
    if not isinstance(pairs, list):
        raise FormatError(
            f"'conversation' is a {type(pairs).__name__}, expected a list of {{human, assistant}} pairs"
        )
    if not pairs:
        raise FormatError("empty conversation: 'conversation' has no turns")
    messages = _system(record.get("system"))
    for i, pair in enumerate(pairs):
        if not isinstance(pair, dict):
            raise FormatError(
                f"'conversation' item {i} is a {type(pair).__name__}, expected {{human, assistant}}"
            )
        for key, role in (("human", "user"), ("assistant", "assistant")):
            value = pair.get(key)
            if not isinstance(value, str):
                what = "has no" if value is None else f"has a {type(value).__name__} as"
                raise FormatError(
                    f"'conversation' item {i} {what} '{key}', expected a string; it has keys {keys_text(pair)}"
                )
            messages.append(make_message(role, value))
    return make_example("chat", messages)


def _norm_prompt_completion(record: dict, plan: ReadPlan) -> dict:
    prompt = _require(record, "prompt", "prompt-completion")
    completion = _require(record, "completion", "prompt-completion")
    if isinstance(prompt, str) and isinstance(completion, str):
        if not completion:
            raise FormatError("'completion' is empty")
        return make_example("prompt_completion", prompt=prompt, completion=completion)
    if isinstance(prompt, list) and isinstance(completion, list):
        if not completion:
            raise FormatError("'completion' is an empty list of messages")
        return _prompt_then(record, plan, prompt, completion, "completion")
    raise FormatError(
        f"'prompt' is a {type(prompt).__name__} and 'completion' a {type(completion).__name__}; "
        "both must be strings or both lists of messages"
    )


def _norm_pair(record: dict, plan: ReadPlan) -> dict:
    """A preference pair: {"kind": "pair", "chosen": Example, "rejected": Example, "margin"}, each
    side the shared prompt (no loss) + its answer (formats/pairs.py)."""
    from packtool.formats.pairs import read_pair  # preference runs only

    pair = read_pair(record, plan)
    return {"kind": "pair", "chosen": pair.chosen, "rejected": pair.rejected, "margin": pair.margin}


def _norm_chosen_sft(record: dict, plan: ReadPlan) -> dict:
    """SFT on the chosen answer: prompt turns (no loss) + chosen turns; `rejected` is not read."""
    if "chosen" not in record and "chosen_messages" in record:
        record = {**record, "chosen": record["chosen_messages"]}
    chosen = _require(record, "chosen", "chosen-sft")
    prompt = first_of(record, ("conversations", "messages", "prompt"))
    if isinstance(chosen, str):
        chosen = [{"role": "assistant", "content": chosen}]
    elif isinstance(chosen, dict):
        chosen = [chosen]
    if not isinstance(chosen, list) or not chosen:
        raise FormatError(
            f"'chosen' is a {type(chosen).__name__}, expected a string, a turn or a list of turns"
        )
    first = chosen[0] if isinstance(chosen[0], dict) else {}
    opener = first_of(first, plan.role_keys)
    whole = isinstance(opener, str) and ROLE_TAGS.get(
        plan.roles.get(opener, opener).lower(), ("",)
    )[0] in ("system", "user")
    if prompt is None or whole:
        prompt = []  # implicit prompt: chosen is the whole conversation (TRL, UltraFeedback)
    elif isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    return _prompt_then(record, plan, prompt, chosen, "chosen")


def _prompt_then(record: dict, plan: ReadPlan, prompt: list, answer: list, key: str) -> dict:
    """Chat: the prompt turns (no loss) then the `key` turns (`answer`), with the record's tools."""
    head = read_turns(prompt, plan, "prompt", allow_empty=True)
    for m in head:
        m["weight"] = 0.0  # the prompt never carries loss
    tail = read_turns(answer, plan, key, offset=len(head))
    return make_example("chat", head + tail, read_tools(record.get("tools")))


def _norm_alpaca(record: dict, plan: ReadPlan) -> dict:
    instruction = _require(record, "instruction", "alpaca")
    output = _require(record, "output", "alpaca")
    extra = record.get("input")
    for key, value in (("instruction", instruction), ("output", output), ("input", extra)):
        if value is not None and not isinstance(value, str):
            raise FormatError(f"'{key}' is a {type(value).__name__}, expected a string")
    messages = _system(record.get("system") or None)
    history = record.get("history")
    if history:
        if not isinstance(history, list):
            raise FormatError(f"'history' is a {type(history).__name__}, expected [[q, a], ...]")
        for i, pair in enumerate(history):
            if (
                not isinstance(pair, (list, tuple))
                or len(pair) != 2
                or not isinstance(pair[0], str)
                or not isinstance(pair[1], str)
            ):
                raise FormatError(f"'history' item {i} is not a [question, answer] pair of strings")
            messages.append(make_message("user", pair[0]))
            messages.append(make_message("assistant", pair[1]))
    user = f"{instruction}\n\n{extra}" if instruction and extra else instruction or extra or ""
    messages.append(make_message("user", user))
    messages.append(make_message("assistant", output))
    return make_example("chat", messages)


def _norm_text(record: dict, plan: ReadPlan) -> dict:
    text = _require(record, "text", "text")
    if not isinstance(text, str):
        raise FormatError(f"'text' is a {type(text).__name__}, expected a string")
    if not text:
        raise FormatError("'text' is empty")
    return make_example("text", text=text)


_NORMALIZERS = {
    "messages": _norm_messages,
    "sharegpt": _norm_sharegpt,
    "firefly": _norm_firefly,
    "prompt-completion": _norm_prompt_completion,
    "alpaca": _norm_alpaca,
    "text": _norm_text,
    "preference": _norm_pair,
    "chosen-sft": _norm_chosen_sft,
}


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
        raise FormatError(f"'{key}' is a {type(turns).__name__}, expected a list of messages")
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
        raise FormatError(f"message {i} is a {type(turn).__name__}, expected an object with a role")
    raw = first_of(turn, plan.role_keys)
    if not isinstance(raw, str):
        if raw is None:
            raise FormatError(
                f"message {i} has no {' or '.join(map(repr, plan.role_keys))}; "
                f"it has keys {keys_text(turn)}"
            )
        raise FormatError(f"message {i} role is a {type(raw).__name__}, expected a string")
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
        raise FormatError(
            f"message {i} ({role}) reasoning is a {type(reasoning).__name__}, expected a string"
        )
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
        raise FormatError(
            f"message {i} ({role}) name is a {type(name).__name__}, expected a string"
        )
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
            raise FormatError(
                f"message {i} ({role}) content part {j} is a {type(part).__name__}, "
                "expected an object with a 'type'"
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
        raise FormatError(f"message {i} tool call is a {type(call).__name__}, expected an object")
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
        raise FormatError(
            f"'tools' is a {type(value).__name__}, expected a list of function schemas"
        )
    out = []
    for j, tool in enumerate(value):
        if isinstance(tool, str):  # some datasets store each schema as its own JSON string
            tool = _json(tool, f"'tools' item {j}")
        if not isinstance(tool, dict):
            raise FormatError(f"'tools' item {j} is a {type(tool).__name__}, expected an object")
        if "function" not in tool and "name" in tool:
            tool = {"type": "function", "function": tool}
        out.append(tool)
    return out or None
