"""Detect a record's format and normalize it to one Example shape. Pure stdlib, plain dicts.

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
without an assistant turn is valid here (it carries 0 loss tokens; `has_assistant` tells).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from packtool.config import ReadConfig
from packtool.errors import PacktoolError, UsageError

FORMATS = ("messages", "prompt-completion", "text", "alpaca", "sharegpt", "firefly", "preference")
AUTO = (
    "auto"  # normalize(): detect each record's own format (a file none of whose records fits one)
)
# What is done with prompt/completion strings (tokenization/encode.py); report/tokenized.py reads
# "no chat template" in a format reason to leave out the template line.
PLAIN_PROMPT_COMPLETION = (
    "no chat template, each record is tokenized as prompt + completion + EOS (the tokenizer's own "
    "special tokens before the prompt), the completion and EOS trained"
)

# Role names and ShareGPT tags -> (our role, whether the content is a JSON tool call).
_ROLE_TAGS: dict[str, tuple[str, bool]] = {
    "system": ("system", False),
    "user": ("user", False),
    "assistant": ("assistant", False),
    "tool": ("tool", False),
    "human": ("user", False),
    "gpt": ("assistant", False),
    "function_call": ("assistant", True),
    "observation": ("tool", False),
}
_KNOWN_ROLES_TEXT = (
    "system, user, assistant, tool (ShareGPT tags: human, gpt, function_call, observation)"
)

# Our top-level field names (what the formats read; targets of --column) and the turn-level ones.
RECORD_FIELDS = (
    "messages", "conversations", "tools", "prompt", "completion",
    "instruction", "input", "output", "history", "system", "text", "conversation",
)  # fmt: skip
_TURN_FIELDS = ("role", "content")

_FORMAT_KEYS = (
    ("messages", "messages"),
    ("sharegpt", "conversations"),
    ("firefly", "conversation of human/assistant pairs"),
    ("prompt-completion", "prompt + completion"),
    ("alpaca", "instruction + output"),
    ("text", "text"),
    ("preference", "chosen + rejected, with --format preference"),
)
_FORMATS_TEXT = ", ".join(f"{name} ({keys})" for name, keys in _FORMAT_KEYS)

_TEXT_PARTS = frozenset(("text", "input_text", "output_text"))
_REASONING_PARTS = frozenset(("reasoning", "thinking"))
_TOOL_CALL_PARTS = frozenset(("tool_call", "function_call"))


class FormatError(PacktoolError):
    """A record that cannot be normalized; the message is one line and says what is wrong."""


@dataclass(frozen=True)
class _Plan:
    """A ReadConfig compiled once: renames and role map as dicts."""

    renames: dict[str, str]  # their column -> our column
    back: dict[str, str]  # our column -> their column (for messages)
    role_keys: tuple[str, ...]
    content_keys: tuple[str, ...]
    roles: dict[str, str]  # their role -> our role or tag


@lru_cache(maxsize=32)
def _plan(cfg: ReadConfig) -> _Plan:
    renames: dict[str, str] = {}
    role_keys: tuple[str, ...] = ("role", "from")
    content_keys: tuple[str, ...] = ("content", "value")
    for ours, theirs in cfg.columns:
        if ours == "role":
            role_keys = (theirs,)
        elif ours == "content":
            content_keys = (theirs,)
        elif ours in RECORD_FIELDS:
            renames[theirs] = ours
        else:
            backwards = (
                f"; the form is --column FIELD=COLUMN (our field, then your column): "
                f"--column {theirs}={ours}"
                if theirs in RECORD_FIELDS + _TURN_FIELDS
                else ""
            )
            raise UsageError(
                f"--column {ours}={theirs}: {ours!r} is not one of our names "
                f"({', '.join(RECORD_FIELDS + _TURN_FIELDS)}){backwards}"
            )
    roles: dict[str, str] = {}
    for theirs, ours in cfg.roles:
        if ours not in _ROLE_TAGS:
            raise UsageError(
                f"--role {theirs}={ours}: {ours!r} is not a role; use one of {_KNOWN_ROLES_TEXT}"
            )
        roles[theirs] = ours
    if cfg.format is not None and cfg.format not in FORMATS:
        raise UsageError(f"--format {cfg.format!r} is not one of {'|'.join(FORMATS)}")
    back = {ours: theirs for theirs, ours in renames.items()}
    return _Plan(renames, back, role_keys, content_keys, roles)


def _rename(record: dict, renames: dict[str, str]) -> dict:
    # A mapped column wins over a column that already has our name; swaps (a=b, b=a) work.
    out = {k: v for k, v in record.items() if k not in renames}
    for theirs, ours in renames.items():
        if theirs in record:
            out[ours] = record[theirs]
    return out


def _keys(record: dict) -> str:
    return ", ".join(repr(k) for k in record) or "none"


class ColumnCheck:
    """Every --column mapping must match in at least one record of the input: its column (a
    top-level key, or a key of a turn for role / content) is seen somewhere, else a UsageError names
    the mapping, the columns seen and, when it reads backwards, the form FIELD=COLUMN. A mapping
    that matches nothing would be silently ignored (the file's own `messages` read, say).

        feed(record) / feed_raw(json bytes) / feed_names(arrow field names)   until `done`
        problem(what)   the message, or None when every mapping matched

    Raw JSON is tested as bytes (`"dialog"` appears in the text): no parse, and a false match only
    lets a mapping through that a record's value names."""

    SEEN = 3  # records whose top-level keys the message quotes

    def __init__(self, cfg: ReadConfig):
        _plan(cfg)  # a name that is not ours fails first, with its own message
        self.pending = {(ours, theirs) for ours, theirs in cfg.columns}
        self._needles = {pair: json.dumps(pair[1]).encode() for pair in self.pending}
        self.seen: list[str] = []
        self.records = 0
        self._quoted = 0

    @property
    def done(self) -> bool:
        return not self.pending

    def _keys_of(self, keys) -> None:
        if self._quoted < self.SEEN:
            self._quoted += 1
            self.seen += [k for k in keys if k not in self.seen]

    def feed(self, record: Any) -> None:
        self.records += 1
        if not isinstance(record, dict):
            return
        self._keys_of(record)
        for pair in list(self.pending):
            ours, theirs = pair
            if theirs in record if ours not in _TURN_FIELDS else _has_turn_key(record, theirs):
                self.pending.discard(pair)

    def feed_raw(self, raw: bytes) -> None:
        self.records += 1
        if self._quoted < self.SEEN:
            try:
                rec = json.loads(raw)
                if isinstance(rec, dict):
                    self._keys_of(rec)
            except ValueError:
                pass
        for pair in list(self.pending):
            if self._needles[pair] in raw:
                self.pending.discard(pair)

    def feed_names(self, top: list[str], nested: set[str], rows: int) -> None:
        self.records += rows
        self._keys_of(top)
        for pair in list(self.pending):
            ours, theirs = pair
            if theirs in (nested if ours in _TURN_FIELDS else top):
                self.pending.discard(pair)

    def problem(self, what: str) -> str | None:
        if not self.pending:
            return None
        ours, theirs = sorted(self.pending)[0]
        where = "key of a turn" if ours in _TURN_FIELDS else "column"
        seen = ", ".join(repr(k) for k in self.seen) or "none"
        msg = (
            f"--column {ours}={theirs}: no {where} {theirs!r} in any of the {self.records:,} records "
            f"of {what} (columns seen: {seen}); the form is --column FIELD=COLUMN (our field, then "
            "the column in your data)"
        )
        if ours in self.seen:
            msg += f"; the records have {ours!r} itself: drop this --column"
            if theirs in RECORD_FIELDS + _TURN_FIELDS:
                msg += f", or if it is written backwards, use --column {theirs}={ours}"
        more = len(self.pending) - 1
        return msg + (f" ({more} more --column mapping(s) match nothing)" if more else "")


def _has_turn_key(record: dict, key: str) -> bool:
    for value in record.values():
        if isinstance(value, list):
            for turn in value[:64]:
                if isinstance(turn, dict) and key in turn:
                    return True
    return False


# --------------------------------------------------------------------------- detection


def detect_format(record: dict, cfg: ReadConfig) -> tuple[str, str]:
    """(format name, why): from the keys of one record, or `cfg.format` when forced."""
    plan = _plan(cfg)
    if cfg.format is not None:
        return cfg.format, f"forced by --format {cfg.format}"
    if not isinstance(record, dict):
        raise FormatError(f"record is a {type(record).__name__}, expected a JSON object")
    stored = record
    if plan.renames:
        record = _rename(record, plan.renames)

    def named(key: str) -> str:
        theirs = plan.back.get(key)
        return f"'{key}' (column '{theirs}')" if theirs in stored else f"'{key}'"

    refusal = sft_refusal(record, None)
    if refusal is not None:
        raise UsageError(refusal)
    if "messages" in record:
        return "messages", f"has {named('messages')}{_turn_shape(record['messages'], plan)}"
    if "conversations" in record:
        return (
            "sharegpt",
            f"has {named('conversations')}{_turn_shape(record['conversations'], plan)}",
        )
    if "conversation" in record:
        return "firefly", f"has {named('conversation')}{_pair_shape(record['conversation'])}"
    if "prompt" in record and "completion" in record:
        p = record["prompt"]
        shape = (
            "lists of messages" if isinstance(p, list) else f"strings: {PLAIN_PROMPT_COMPLETION}"
        )
        return "prompt-completion", f"has {named('prompt')} and {named('completion')} as {shape}"
    if "instruction" in record and "output" in record:
        extra = [named(k) for k in ("input", "system", "history") if k in record]
        more = f" (with {', '.join(extra)})" if extra else ""
        return "alpaca", f"has {named('instruction')} and {named('output')}{more}"
    if "text" in record:
        return "text", f"has {named('text')}"
    hint = ""
    if "input_ids" in record:
        hint = (
            "; it is pre-tokenized (input_ids), and pre-tokenized and chat files cannot be mixed in one "
            "input: read them separately"
        )
    elif "prompt" in record or "completion" in record:
        hint = "; prompt-completion needs both 'prompt' and 'completion'"
    elif "instruction" in record:
        hint = "; alpaca needs both 'instruction' and 'output'"
    if plan.renames and stored.keys() != record.keys():
        mapped = " ".join(f"--column {o}={t}" for t, o in plan.renames.items() if t in stored)
        hint = f" (after {mapped}; as stored: {_keys(stored)}){hint}"
    raise FormatError(
        f"record fits no known format: it has keys {_keys(record)}{hint}; "
        f"known formats: {_FORMATS_TEXT}; use --format NAME, or --column OURS=THEIRS to map a column"
    )


_KTO_KEYS = ("messages", "conversations", "conversation", "completion")


def sft_refusal(record: dict, forced: str | None) -> str | None:
    """Why `record` (columns already mapped) may not be read as plain SFT, or None. The one rule for
    preference and KTO fields, with the fix; `forced`: the --format given (None: detecting).

        chosen + rejected            refused unless --format preference: SFT would ignore 'chosen'
        label: bool (KTO) detected   refused: name the --format that reads it
        label: false, --format X     refused per record (X would train the undesirable answer);
                                     label: true under --format X is packed
    """
    if forced == "preference":
        return None
    if "chosen" in record and "rejected" in record:
        how = f"--format {forced} would ignore" if forced else "packing them as SFT would ignore"
        return (
            f"records are preference data (keys {_keys(record)}): {how} 'chosen'; "
            "pass --format preference to train on the chosen answers (the prompt turns carry no loss; "
            "rejected is ignored)"
        )
    label = record.get("label")
    if not isinstance(label, bool) or not any(k in record for k in _KTO_KEYS):
        return None
    if forced is None:
        fmt = "prompt-completion" if "completion" in record else "messages"
        if "conversations" in record and "messages" not in record:
            fmt = "sharegpt"
        return (
            f"records are KTO data (a boolean 'label'; keys {_keys(record)}): SFT would train the undesirable "
            f"answers too; keep the records whose label is true, then pass --format {fmt} (or pass "
            f"--format {fmt} --on-error skip: records with label false are then skipped and counted)"
        )
    if label is False:
        return (
            f"record is KTO data with label false: --format {forced} would train its undesirable answer; "
            "keep only the records whose label is true"
        )
    return None


def _pair_shape(pairs: Any) -> str:
    if isinstance(pairs, list) and pairs and isinstance(pairs[0], dict):
        if "human" in pairs[0] and "assistant" in pairs[0]:
            return " of human/assistant pairs"
    return ""


def _turn_shape(turns: Any, plan: _Plan) -> str:
    if isinstance(turns, list) and turns and isinstance(turns[0], dict):
        first = turns[0]
        role = next((k for k in plan.role_keys if k in first), None)
        content = next((k for k in plan.content_keys if k in first), None)
        if role and content:
            return f" with {role}/{content} turns"
    return ""


# --------------------------------------------------------------------------- normalization


def normalize(record: dict, fmt: str, cfg: ReadConfig) -> dict:
    """Record -> Example (see the module docstring). Raises FormatError on a bad record. `fmt`
    AUTO: the record's own format (detect_format), or the FormatError saying it fits none."""
    plan = _plan(cfg)
    if fmt == AUTO:
        fmt = detect_format(record, cfg)[0]
    fn = _NORMALIZERS.get(fmt)
    if fn is None:
        raise UsageError(f"unknown format {fmt!r}; use one of {'|'.join(FORMATS)}")
    if not isinstance(record, dict):
        raise FormatError(f"record is a {type(record).__name__}, expected a JSON object")
    if plan.renames:
        record = _rename(record, plan.renames)
    if cfg.format is not None:  # detection refuses these on the file's first record
        refusal = sft_refusal(record, cfg.format)
        if refusal is not None:
            raise FormatError(refusal)
    return fn(record, plan)


def has_assistant(example: dict) -> bool:
    """Whether the example has something to train on besides plain text: an assistant turn or a
    completion. Examples without one are valid; the tokenizer counts them (0 loss tokens)."""
    if example["kind"] == "chat":
        return any(m["role"] == "assistant" for m in example["messages"])
    return True


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


def _example(kind: str, messages=None, tools=None, text=None, prompt=None, completion=None) -> dict:
    return {
        "kind": kind,
        "messages": messages,
        "tools": tools,
        "text": text,
        "prompt": prompt,
        "completion": completion,
    }


def _message(role, content, tool_calls=None, reasoning=None, weight=None, name=None) -> dict:
    return {
        "role": role,
        "content": content,
        "tool_calls": tool_calls,
        "reasoning_content": reasoning,
        "weight": weight,
        "name": name,
    }


def _require(record: dict, key: str, fmt: str) -> Any:
    value = record.get(key)
    if value is None:
        if key in record:
            raise FormatError(f"{fmt} record has '{key}': null; give it a value or drop the record")
        raise FormatError(f"{fmt} record has no '{key}'; it has keys {_keys(record)}")
    return value


def _norm_messages(record: dict, plan: _Plan) -> dict:
    turns = _require(record, "messages", "messages")
    return _example("chat", _turns(turns, plan, "messages"), _tools(record.get("tools")))


def _norm_sharegpt(record: dict, plan: _Plan) -> dict:
    turns = _require(record, "conversations", "sharegpt")
    messages = _turns(turns, plan, "conversations")
    system = record.get("system")
    if system is not None and system != "":
        if not isinstance(system, str):
            raise FormatError(f"'system' is a {type(system).__name__}, expected a string")
        if messages[0]["role"] == "system":
            if messages[0]["content"] != system:
                raise FormatError(
                    "record has both a 'system' column and a different system turn; keep one"
                )
        else:
            messages.insert(0, _message("system", system))
    return _example("chat", messages, _tools(record.get("tools")))


def _norm_firefly(record: dict, plan: _Plan) -> dict:
    """Firefly / MOSS-003: `conversation` [{human, assistant}, ...] -> [system], user, assistant, ..."""
    pairs = _require(record, "conversation", "firefly")
    if not isinstance(pairs, list):
        raise FormatError(
            f"'conversation' is a {type(pairs).__name__}, expected a list of {{human, assistant}} pairs"
        )
    if not pairs:
        raise FormatError("empty conversation: 'conversation' has no turns")
    messages = []
    system = record.get("system")
    if system is not None and system != "":
        if not isinstance(system, str):
            raise FormatError(f"'system' is a {type(system).__name__}, expected a string")
        messages.append(_message("system", system))
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
                    f"'conversation' item {i} {what} '{key}', expected a string; it has keys {_keys(pair)}"
                )
            messages.append(_message(role, value))
    return _example("chat", messages)


def _norm_prompt_completion(record: dict, plan: _Plan) -> dict:
    prompt = _require(record, "prompt", "prompt-completion")
    completion = _require(record, "completion", "prompt-completion")
    if isinstance(prompt, str) and isinstance(completion, str):
        if not completion:
            raise FormatError("'completion' is empty")
        return _example("prompt_completion", prompt=prompt, completion=completion)
    if isinstance(prompt, list) and isinstance(completion, list):
        if not completion:
            raise FormatError("'completion' is an empty list of messages")
        head = _turns(prompt, plan, "prompt", allow_empty=True)
        for m in head:
            m["weight"] = 0.0  # the prompt never carries loss
        tail = _turns(completion, plan, "completion", offset=len(head))
        return _example("chat", head + tail, _tools(record.get("tools")))
    raise FormatError(
        f"'prompt' is a {type(prompt).__name__} and 'completion' a {type(completion).__name__}; "
        "both must be strings or both lists of messages"
    )


def _norm_preference(record: dict, plan: _Plan) -> dict:
    """SFT on the chosen answer: prompt turns (no loss) + chosen turns; `rejected` is not read."""
    chosen = _require(record, "chosen", "preference")
    prompt = next(
        (record[k] for k in ("conversations", "messages", "prompt") if record.get(k) is not None),
        None,
    )
    if isinstance(chosen, str):
        chosen = [{"role": "assistant", "content": chosen}]
    elif isinstance(chosen, dict):
        chosen = [chosen]
    if not isinstance(chosen, list) or not chosen:
        raise FormatError(
            f"'chosen' is a {type(chosen).__name__}, expected a string, a turn or a list of turns"
        )
    first = chosen[0] if isinstance(chosen[0], dict) else {}
    opener = _first(first, plan.role_keys)
    whole = isinstance(opener, str) and _ROLE_TAGS.get(
        plan.roles.get(opener, opener).lower(), ("",)
    )[0] in ("system", "user")
    if (
        prompt is None or whole
    ):  # implicit prompt: chosen is the whole conversation (TRL, UltraFeedback)
        messages = _turns(chosen, plan, "chosen")
        return _example("chat", messages, _tools(record.get("tools")))
    if isinstance(prompt, str):
        prompt = [{"role": "user", "content": prompt}]
    head = _turns(prompt, plan, "prompt", allow_empty=True)
    for m in head:
        m["weight"] = 0.0  # the prompt never carries loss
    tail = _turns(chosen, plan, "chosen", offset=len(head))
    return _example("chat", head + tail, _tools(record.get("tools")))


def _norm_alpaca(record: dict, plan: _Plan) -> dict:
    instruction = _require(record, "instruction", "alpaca")
    output = _require(record, "output", "alpaca")
    extra = record.get("input")
    for key, value in (("instruction", instruction), ("output", output), ("input", extra)):
        if value is not None and not isinstance(value, str):
            raise FormatError(f"'{key}' is a {type(value).__name__}, expected a string")
    messages = []
    system = record.get("system")
    if system:
        if not isinstance(system, str):
            raise FormatError(f"'system' is a {type(system).__name__}, expected a string")
        messages.append(_message("system", system))
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
            messages.append(_message("user", pair[0]))
            messages.append(_message("assistant", pair[1]))
    user = f"{instruction}\n\n{extra}" if instruction and extra else instruction or extra or ""
    messages.append(_message("user", user))
    messages.append(_message("assistant", output))
    return _example("chat", messages)


def _norm_text(record: dict, plan: _Plan) -> dict:
    text = _require(record, "text", "text")
    if not isinstance(text, str):
        raise FormatError(f"'text' is a {type(text).__name__}, expected a string")
    if not text:
        raise FormatError("'text' is empty")
    return _example("text", text=text)


_NORMALIZERS = {
    "messages": _norm_messages,
    "sharegpt": _norm_sharegpt,
    "firefly": _norm_firefly,
    "prompt-completion": _norm_prompt_completion,
    "alpaca": _norm_alpaca,
    "text": _norm_text,
    "preference": _norm_preference,
}


# --------------------------------------------------------------------------- turns


def _turns(turns: Any, plan: _Plan, key: str, allow_empty=False, offset=0) -> list[dict]:
    if not isinstance(turns, list):
        raise FormatError(f"'{key}' is a {type(turns).__name__}, expected a list of messages")
    if not turns and not allow_empty:
        raise FormatError(f"empty conversation: '{key}' has no messages")
    return [_turn(t, i, plan) for i, t in enumerate(turns, offset)]


def _first(d: dict, keys: tuple[str, ...]) -> Any:
    for k in keys:
        v = d.get(k)
        if v is not None:
            return v
    return None


def _turn(turn: Any, i: int, plan: _Plan) -> dict:
    if not isinstance(turn, dict):
        raise FormatError(f"message {i} is a {type(turn).__name__}, expected an object with a role")
    raw = _first(turn, plan.role_keys)
    if not isinstance(raw, str):
        if raw is None:
            raise FormatError(
                f"message {i} has no {' or '.join(map(repr, plan.role_keys))}; "
                f"it has keys {_keys(turn)}"
            )
        raise FormatError(f"message {i} role is a {type(raw).__name__}, expected a string")
    tag = plan.roles.get(raw, raw)
    found = _ROLE_TAGS.get(tag) or _ROLE_TAGS.get(tag.lower())
    if found is None:
        fix = (
            f"map it with --role {raw}=OURS"
            if raw.strip() and "=" not in raw
            else "fix the record (--role cannot map an empty role or one with '=')"
        )
        raise FormatError(
            f"message {i} has unknown role {raw!r}; known: {_KNOWN_ROLES_TEXT}; {fix}"
        )
    role, is_call = found
    content = _first(turn, plan.content_keys)

    tool_calls = None
    reasoning = _first(turn, ("reasoning_content", "reasoning", "thinking"))
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

    weight = turn.get("weight")
    if weight is None:
        weight = turn.get("loss_weight")
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
    return _message(role, content, tool_calls or None, reasoning, weight, name)


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
            value = _first(part, ("value", "function", kind))
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
        value = _first(part, ("text", "value", kind, "content"))
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
        raise FormatError(f"message {i} tool call has no 'name'; it has keys {_keys(fn)}")
    args = fn.get("arguments")
    if args is None:
        args = fn.get("parameters")
    if args is None or args == "":
        args = {}
    elif isinstance(args, str):
        args = _json(args, f"message {i} tool call {name!r} arguments", "are")
    if not isinstance(args, dict):
        raise FormatError(
            f"message {i} tool call {name!r} arguments are a {type(args).__name__}, expected an object"
        )
    return {"type": "function", "function": {"name": name, "arguments": args}}


def _tools(value: Any) -> list[dict] | None:
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
