"""A record → an Example (packtool.formats), one function per format; `template_messages` gives a
chat template the messages as it expects them."""

from __future__ import annotations

from typing import Any

from packtool.config import ReadConfig
from packtool.errors import UsageError
from packtool.formats import AUTO, FORMATS, FormatError, wrong_type
from packtool.formats.detect import (
    ROLE_TAGS,
    ReadPlan,
    detect_format,
    keys_text,
    read_plan,
    rename,
    sft_refusal,
)
from packtool.formats.turns import first_of, make_example, make_message, read_tools, read_turns


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
        raise wrong_type("record", record, "a JSON object")
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
        raise wrong_type("'system'", value, "a string")
    return [make_message("system", value)]


def _norm_firefly(record: dict, plan: ReadPlan) -> dict:
    """Firefly / MOSS-003: `conversation` [{human, assistant}, ...] -> [system], user, assistant, ..."""
    pairs = _require(record, "conversation", "firefly")
    if not isinstance(pairs, list):
        raise wrong_type("'conversation'", pairs, "a list of {human, assistant} pairs")
    if not pairs:
        raise FormatError("empty conversation: 'conversation' has no turns")
    messages = _system(record.get("system"))
    for i, pair in enumerate(pairs):
        if not isinstance(pair, dict):
            raise wrong_type(f"'conversation' item {i}", pair, "{human, assistant}")
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

    return read_pair(record, plan)


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
        raise wrong_type("'chosen'", chosen, "a string, a turn or a list of turns")
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
            raise wrong_type(f"'{key}'", value, "a string")
    messages = _system(record.get("system") or None)
    history = record.get("history")
    if history:
        if not isinstance(history, list):
            raise wrong_type("'history'", history, "[[q, a], ...]")
        for i, pair in enumerate(history):
            two = isinstance(pair, (list, tuple)) and len(pair) == 2
            if not two or not all(isinstance(x, str) for x in pair):
                raise FormatError(f"'history' item {i} is not a [question, answer] pair of strings")
            messages += [make_message("user", pair[0]), make_message("assistant", pair[1])]
    user = f"{instruction}\n\n{extra}" if instruction and extra else instruction or extra or ""
    messages += [make_message("user", user), make_message("assistant", output)]
    return make_example("chat", messages)


def _norm_text(record: dict, plan: ReadPlan) -> dict:
    text = _require(record, "text", "text")
    if not isinstance(text, str):
        raise wrong_type("'text'", text, "a string")
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
