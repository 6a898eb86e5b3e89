"""Detect a record's format and normalize it to one Example shape. Pure stdlib, plain dicts.

    detect.py     --column / --role compiled once (ReadPlan), the column check (ColumnCheck); a
                  record's format and why (detect_format); preference and KTO refused (sft_refusal)
    normalize.py  record → Example, one function per format (normalize); template_messages
    turns.py      turns, typed content parts, tool calls and tools → Message dicts (read_turns)

Every record, whatever its format, becomes an Example (JSON-serializable, every key present):

    {"kind": "chat" | "prompt_completion" | "text",
     "messages":   [Message, ...] | None,   # kind == "chat"
     "tools":      [{"type": "function", "function": {...schema...}}, ...] | None,
     "text":       str | None,              # kind == "text": every token trained, no template
     "prompt":     str | None,              # kind == "prompt_completion": plain strings,
     "completion": str | None}              #   only the completion carries loss

    Message = {"role": "system" | "user" | "assistant" | "tool",
               "content": str,                   # "" for an assistant turn that only calls tools
               "tool_calls": [{"type": "function",
                               "function": {"name": str, "arguments": dict}}] | None,
               "reasoning_content": str | None,
               "weight": float | None,           # 0.0 = no loss on this turn; None = the default
               "name": str | None}

Which keys select which format, and how turns, tools and --column / --role are read: README.md,
"Input". The caller detects once per file (tokenization/source.py), so a folder may mix formats, one
per file; a file none of whose records fits one is normalized with AUTO, each record refused with
what `detect_format` says of it.
"""

from __future__ import annotations

from packtool.errors import PacktoolError

FORMATS = (
    "messages",
    "prompt-completion",
    "text",
    "alpaca",
    "sharegpt",
    "firefly",
    "preference",
    "chosen-sft",
)
AUTO = "auto"
# What is done with prompt/completion strings (tokenization/encode.py); report/tokenized.py reads
# "no chat template" in a format reason to leave out the template line.
PLAIN_PROMPT_COMPLETION = (
    "no chat template, each record is tokenized as prompt + completion + EOS (the tokenizer's own "
    "special tokens before the prompt), the completion and EOS trained"
)


class FormatError(PacktoolError):
    """A record that cannot be normalized; the message is one line and says what is wrong."""


def wrong_type(what: str, value, expected: str) -> FormatError:
    """The FormatError "WHAT is a TYPE, expected EXPECTED"."""
    return FormatError(f"{what} is a {type(value).__name__}, expected {expected}")
