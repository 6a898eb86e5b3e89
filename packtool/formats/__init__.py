"""Detect a record's format and normalize it to one Example shape. Pure stdlib, plain dicts.

    detect.py     --column / --role compiled once (ReadPlan), the column check (ColumnCheck); a
                  record's format and why (detect_format); preference and KTO refused (sft_refusal)
    normalize.py  record → Example, one function per format (normalize); template_messages
    turns.py      turns, typed content parts, tool calls and tools → Message dicts (read_turns)

This file holds the names they share: FORMATS, AUTO, FormatError, PLAIN_PROMPT_COMPLETION.

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

How each format maps (the key that selects it is checked in this order; `--format` overrides):

    format              selected by                      becomes
    messages            messages                         chat: the turns as they are
    sharegpt            conversations                    chat: human->user, gpt->assistant,
                                                         function_call->assistant with tool_calls,
                                                         observation->tool; `system` column first
    firefly             conversation                     chat: [system], then each {human, assistant}
                        ([{human, assistant}, ...])      pair as user, assistant (Firefly, MOSS-003)
    prompt-completion   prompt + completion              strings: kind "prompt_completion";
                                                         lists of messages: chat, prompt turns
                                                         weight 0.0, completion turns kept as given
    alpaca              instruction + output             chat: [system], history pairs, user
                                                         (instruction + "\\n\\n" + input), assistant
    text                text                             text
    preference          only with --format preference    chat: the prompt (conversations, messages or
                        (chosen + rejected)              prompt) + the chosen answer; rejected ignored

Preference data (chosen + rejected) and KTO data (a boolean `label`) are refused unless a format
is forced: packing them as plain SFT would ignore `chosen` (no loss) or train undesirable answers.
`--format preference` is SFT on the chosen answers; it reads TRL's layouts (explicit prompt +
chosen/rejected as strings or message lists, or implicit: chosen is the whole conversation) and
LLaMA-Factory's (conversations + chosen/rejected as one turn each).

Turns are read the same way in `messages`, `conversations` and message-list prompts: the role from
`role` (or `from`), the content from `content` (or `value`); ShareGPT tags are accepted in either
list, and role names match case-insensitively. `content` may be a string or a list of typed parts:

    [{"type": "reasoning", "value": "..."},      # "text" key also read;  -> reasoning_content
     {"type": "text", "value": "..."},           # parts concatenated     -> content
     {"type": "tool_call", "value": "{\\"name\\": ..., \\"arguments\\": {...}}"}]   -> tool_calls

Tool calls may be OpenAI style ({"type", "function": {"name", "arguments"}}) or flat ({"name",
"arguments"}), as dicts or JSON strings; `arguments` given as a JSON string is parsed to a dict.
`tools` may be a list or a JSON string; bare function schemas ({"name", "parameters"}) are wrapped
as {"type": "function", "function": schema}; an empty list becomes None. Per-turn `weight` (TRL,
OpenAI) or `loss_weight` (LLaMA-Factory) becomes `weight`; `reasoning_content`, `reasoning` or
`thinking` on a turn becomes `reasoning_content`. Ids (`id`, `tool_call_id`) are not kept.

Mapping non-standard names (ReadConfig, from the CLI):

    --column OURS=THEIRS   cfg.columns = (("messages", "dialog"),)  top-level column `dialog` is
                           read as `messages`; our names: messages, conversations, tools, prompt,
                           completion, instruction, input, output, history, system, text,
                           conversation, and role / content, which rename the keys inside each turn
                           (--column role=speaker --column content=utterance).
    --role THEIRS=OURS     cfg.roles = (("bot", "assistant"),)  applied before validation; OURS is
                           system/user/assistant/tool or a ShareGPT tag (gpt, function_call, ...).

Example: {"dialog": [{"speaker": "bot", "utterance": "hi"}]} reads with
`--column messages=dialog --column role=speaker --column content=utterance --role bot=assistant`.

Column mapping and detection happen here; the readers yield records exactly as stored. The caller
detects once per file, on that file's first record whose format is found (tokenization/decide.py,
`decide_file`), and normalizes every record of the file with that format, so a folder or glob may
mix formats, one per file; `--format` forces one format on every file. A file none of whose records fits a format is
normalized with AUTO: each record is refused with what `detect_format` says of it. An Example
without an assistant turn is valid here (it carries 0 loss tokens).
"""

from __future__ import annotations

from packtool.errors import PacktoolError

FORMATS = ("messages", "prompt-completion", "text", "alpaca", "sharegpt", "firefly", "preference")
# normalize(): detect each record's own format (a file none of whose records fits one)
AUTO = "auto"
# What is done with prompt/completion strings (tokenization/encode.py); report/tokenized.py reads
# "no chat template" in a format reason to leave out the template line.
PLAIN_PROMPT_COMPLETION = (
    "no chat template, each record is tokenized as prompt + completion + EOS (the tokenizer's own "
    "special tokens before the prompt), the completion and EOS trained"
)


class FormatError(PacktoolError):
    """A record that cannot be normalized; the message is one line and says what is wrong."""
