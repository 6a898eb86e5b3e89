"""Preference pairs as stored → two Examples, chosen then rejected, sharing their prompt.

    explicit prompt (TRL)       {"prompt": P, "chosen": C, "rejected": R}
                                P a string or a list of messages; C and R a string, a message or a
                                list of messages (strings with a message-list prompt: one assistant turn)
    implicit prompt (TRL,       {"chosen": [m0 .. mk, c..], "rejected": [m0 .. mk, r..]}
      UltraFeedback, HH-RLHF)   the longest common prefix of turns is the prompt (strings: of
                                characters, a space before the split moved to the answers, as
                                trl.extract_prompt does)
    LLaMA-Factory pairwise      {"conversations": P, "chosen": {from, value}, "rejected": {...}}
    LLaMA-Factory v1            {"chosen_messages": [...], "rejected_messages": [...]}  (implicit prompt)
    margin (optional)           "margin", or "score_chosen" - "score_rejected" (also *_rating,
                                chosen_score / rejected_score): checked to be a number, not packed
                                yet (README, "Preference pairs")

    read_pair(record, plan) -> {"kind": "pair", "chosen", "rejected", "margin"}
        chosen   = make_example("chat", prompt turns (weight 0) + chosen turns, tools)
        rejected = make_example("chat", prompt turns (weight 0) + rejected turns, tools)
        strings:   make_example("prompt_completion", prompt=P, completion=C | R)

The prompt never carries loss, every earlier assistant turn included; the answer's turns keep their
own weights (a turn may say weight 0). A pair whose answers are equal, or whose answer is empty
after the shared prompt, is refused (FormatError, one line).
"""

from __future__ import annotations

from typing import Any

from packtool.formats import FormatError, wrong_type
from packtool.formats.detect import PAIR_KEYS, ReadPlan, keys_text
from packtool.formats.turns import first_of, make_example, read_tools, read_turns

_PROMPT_KEYS = ("prompt", "conversations", "messages")
_SCORES = (
    ("score_chosen", "score_rejected"),
    ("chosen_score", "rejected_score"),
    ("chosen_rating", "rejected_rating"),
)


def read_pair(record: dict, plan: ReadPlan) -> dict:
    for c_key, r_key in PAIR_KEYS:
        if c_key in record and r_key in record:
            break
    else:
        raise FormatError(
            f"record is not a preference pair: it has keys {keys_text(record)}; a pair needs "
            "'chosen' and 'rejected' (or 'chosen_messages' and 'rejected_messages')"
        )
    chosen, rejected = record[c_key], record[r_key]
    prompt = first_of(record, _PROMPT_KEYS)
    margin = _margin(record)
    if isinstance(chosen, str) and isinstance(rejected, str) and not isinstance(prompt, list):
        return _text_pair(prompt, chosen, rejected, margin)
    chosen, rejected = _as_turns(chosen, c_key), _as_turns(rejected, r_key)
    if prompt is None:  # implicit: the turns both sides share
        n = _shared_prefix(chosen, rejected)
        prompt, chosen, rejected = chosen[:n], chosen[n:], rejected[n:]
    elif isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    head = read_turns(prompt, plan, "prompt", allow_empty=True)
    for m in head:
        m["weight"] = 0.0
    sides = []
    for key, turns in ((c_key, chosen), (r_key, rejected)):
        if not turns:
            raise FormatError(
                f"'{key}' has no turns after the prompt both sides share: nothing to prefer"
            )
        tail = read_turns(turns, plan, key, offset=len(head))
        sides.append(
            make_example("chat", [dict(m) for m in head] + tail, read_tools(record.get("tools")))
        )
    if sides[0]["messages"] == sides[1]["messages"]:
        raise FormatError(f"'{c_key}' and '{r_key}' are the same: nothing to prefer")
    return {"kind": "pair", "chosen": sides[0], "rejected": sides[1], "margin": margin}


def _as_turns(value: Any, key: str) -> list:
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    if isinstance(value, dict):
        return [value]
    if isinstance(value, list):
        return value
    raise wrong_type(f"'{key}'", value, "a string, a message or a list of messages")


def _shared_prefix(a, b) -> int:
    """How many leading items (turns as stored, or characters) `a` and `b` share."""
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _text_pair(prompt: Any, chosen: str, rejected: str, margin: float | None) -> dict:
    if prompt is None:  # implicit: the characters both share (trl.extract_prompt's rule)
        n = _shared_prefix(chosen, rejected)
        if n and chosen[n - 1] == " ":
            n -= 1
        prompt, chosen, rejected = chosen[:n], chosen[n:], rejected[n:]
    elif not isinstance(prompt, str):
        raise wrong_type("'prompt'", prompt, "a string or a list of messages")
    if not chosen or not rejected:
        side = "chosen" if not chosen else "rejected"
        raise FormatError(f"'{side}' is empty after the prompt both sides share: nothing to prefer")
    if chosen == rejected:
        raise FormatError("'chosen' and 'rejected' are the same: nothing to prefer")
    return {
        "kind": "pair",
        "chosen": make_example("prompt_completion", prompt=prompt, completion=chosen),
        "rejected": make_example("prompt_completion", prompt=prompt, completion=rejected),
        "margin": margin,
    }


def _margin(record: dict) -> float | None:
    value = record.get("margin")
    if value is None:
        for c, r in _SCORES:
            if c in record and r in record:
                a, b = record[c], record[r]
                if _number(a) and _number(b):
                    return float(a) - float(b)
                raise FormatError(f"'{c}' and '{r}' must be numbers, got {a!r} and {b!r}")
        return None
    if not _number(value):
        raise FormatError(f"'margin' is {value!r}, expected a number")
    return float(value)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)
