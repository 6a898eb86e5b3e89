"""What a record's keys mean: --column and --role compiled once per ReadConfig (ReadPlan), the check
that every --column mapping matches something in the input (ColumnCheck), and the record's format
from its keys (or --format when forced) and why; preference and KTO records refused as plain SFT
(sft_refusal), with the fix. Our field names: RECORD_FIELDS (top level), TURN_FIELDS (inside a
turn); our roles and ShareGPT tags: ROLE_TAGS."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from packtool.config import ReadConfig
from packtool.errors import UsageError
from packtool.formats import FORMATS, PLAIN_PROMPT_COMPLETION, FormatError, wrong_type

# Role names and ShareGPT tags -> (our role, whether the content is a JSON tool call).
ROLE_TAGS: dict[str, tuple[str, bool]] = {
    "system": ("system", False),
    "user": ("user", False),
    "assistant": ("assistant", False),
    "tool": ("tool", False),
    "human": ("user", False),
    "gpt": ("assistant", False),
    "function_call": ("assistant", True),
    "observation": ("tool", False),
}


KNOWN_ROLES_TEXT = (
    "system, user, assistant, tool (ShareGPT tags: human, gpt, function_call, observation)"
)


# Our top-level field names (what the formats read; targets of --column) and the turn-level ones.
RECORD_FIELDS = (
    "messages", "conversations", "tools", "prompt", "completion",
    "instruction", "input", "output", "history", "system", "text", "conversation",
    "chosen", "rejected", "margin",
)  # fmt: skip


TURN_FIELDS = ("role", "content")
PAIR_KEYS = (("chosen", "rejected"), ("chosen_messages", "rejected_messages"))  # a pair's two sides
ROLE_KEYS = ("role", "from")  # where a turn's role and content are, unless --column says otherwise
CONTENT_KEYS = ("content", "value")


@dataclass(frozen=True)
class ReadPlan:
    """A ReadConfig compiled once: renames and role map as dicts."""

    renames: dict[str, str]  # their column -> our column
    back: dict[str, str]  # our column -> their column (for messages)
    role_keys: tuple[str, ...]
    content_keys: tuple[str, ...]
    roles: dict[str, str]  # their role -> our role or tag

    @property
    def plain(self) -> bool:
        """No --column role/content and no --role: a turn's role and content keys are the default ones."""
        return not self.roles and self.role_keys == ROLE_KEYS and self.content_keys == CONTENT_KEYS


@lru_cache(maxsize=32)
def read_plan(cfg: ReadConfig) -> ReadPlan:
    renames: dict[str, str] = {}
    role_keys, content_keys = ROLE_KEYS, CONTENT_KEYS
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
                if theirs in RECORD_FIELDS + TURN_FIELDS
                else ""
            )
            raise UsageError(
                f"--column {ours}={theirs}: {ours!r} is not one of our names "
                f"({', '.join(RECORD_FIELDS + TURN_FIELDS)}){backwards}"
            )
    roles: dict[str, str] = {}
    for theirs, ours in cfg.roles:
        if ours not in ROLE_TAGS:
            raise UsageError(
                f"--role {theirs}={ours}: {ours!r} is not a role; use one of {KNOWN_ROLES_TEXT}"
            )
        roles[theirs] = ours
    if cfg.format is not None and cfg.format not in FORMATS:
        raise UsageError(f"--format {cfg.format!r} is not one of {'|'.join(FORMATS)}")
    back = {ours: theirs for theirs, ours in renames.items()}
    return ReadPlan(renames, back, role_keys, content_keys, roles)


def rename(record: dict, renames: dict[str, str]) -> dict:
    # A mapped column wins over a column that already has our name; swaps (a=b, b=a) work.
    out = {k: v for k, v in record.items() if k not in renames}
    for theirs, ours in renames.items():
        if theirs in record:
            out[ours] = record[theirs]
    return out


def keys_text(record: dict) -> str:
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
        read_plan(cfg)  # a name that is not ours fails first, with its own message
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
        self._matched(lambda ours, theirs: _has_column(record, ours, theirs))

    def feed_raw(self, raw: bytes) -> None:
        self.records += 1
        if self._quoted < self.SEEN:
            try:
                rec = json.loads(raw)
                if isinstance(rec, dict):
                    self._keys_of(rec)
            except ValueError:
                pass
        self._matched(lambda *pair: self._needles[pair] in raw)

    def feed_names(self, top: list[str], nested: set[str], rows: int) -> None:
        self.records += rows
        self._keys_of(top)
        self._matched(lambda ours, theirs: theirs in (nested if ours in TURN_FIELDS else top))

    def _matched(self, match) -> None:
        self.pending = {pair for pair in self.pending if not match(*pair)}

    def problem(self, what: str) -> str | None:
        if not self.pending:
            return None
        ours, theirs = sorted(self.pending)[0]
        where = "key of a turn" if ours in TURN_FIELDS else "column"
        seen = ", ".join(repr(k) for k in self.seen) or "none"
        msg = (
            f"--column {ours}={theirs}: no {where} {theirs!r} in any of the {self.records:,} records "
            f"of {what} (columns seen: {seen}); the form is --column FIELD=COLUMN (our field, then "
            "the column in your data)"
        )
        if ours in self.seen:
            msg += f"; the records have {ours!r} itself: drop this --column"
            if theirs in RECORD_FIELDS + TURN_FIELDS:
                msg += f", or if it is written backwards, use --column {theirs}={ours}"
        more = len(self.pending) - 1
        return msg + (f" ({more} more --column mapping(s) match nothing)" if more else "")


def _has_column(record: dict, ours: str, key: str) -> bool:
    """Whether the --column ours=key mapping matches `record`: a top-level key, or for role /
    content a key of one of its first 64 turns."""
    if ours not in TURN_FIELDS:
        return key in record
    for value in record.values():
        if isinstance(value, list):
            for turn in value[:64]:
                if isinstance(turn, dict) and key in turn:
                    return True
    return False


_FORMAT_KEYS = (
    ("messages", "messages"),
    ("sharegpt", "conversations"),
    ("firefly", "conversation of human/assistant pairs"),
    ("prompt-completion", "prompt + completion"),
    ("alpaca", "instruction + output"),
    ("text", "text"),
    ("preference", "chosen + rejected, or chosen_messages + rejected_messages: pairs"),
    ("chosen-sft", "chosen + rejected, with --format chosen-sft: SFT on the chosen answers"),
)
_FORMATS_TEXT = ", ".join(f"{name} ({keys})" for name, keys in _FORMAT_KEYS)


def detect_format(record: dict, cfg: ReadConfig) -> tuple[str, str]:
    """(format name, why): from the keys of one record, or `cfg.format` when forced."""
    plan = read_plan(cfg)
    if cfg.format is not None:
        return cfg.format, f"forced by --format {cfg.format}"
    if not isinstance(record, dict):
        raise wrong_type("record", record, "a JSON object")
    stored = record
    if plan.renames:
        record = rename(record, plan.renames)

    def named(key: str) -> str:
        theirs = plan.back.get(key)
        return f"'{key}' (column '{theirs}')" if theirs in stored else f"'{key}'"

    for c_key, r_key in PAIR_KEYS:
        if c_key in record and r_key in record:
            return "preference", (
                f"has {named(c_key)} and {named(r_key)}: preference pairs, each side the prompt + "
                "its answer (--format chosen-sft trains SFT on the chosen answers instead)"
            )
    refusal = sft_refusal(record, None)
    if refusal is not None:
        raise UsageError(refusal)
    for key, fmt in (("messages", "messages"), ("conversations", "sharegpt")):
        if key in record:
            return fmt, f"has {named(key)}{_turn_shape(record[key], plan)}"
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
        hint = f" (after {mapped}; as stored: {keys_text(stored)}){hint}"
    raise FormatError(
        f"record fits no known format: it has keys {keys_text(record)}{hint}; "
        f"known formats: {_FORMATS_TEXT}; use --format NAME, or --column OURS=THEIRS to map a column"
    )


_KTO_KEYS = ("messages", "conversations", "conversation", "completion")


def sft_refusal(record: dict, forced: str | None) -> str | None:
    """Why `record` (columns already mapped) may not be read as plain SFT, or None. The one rule for
    preference and KTO fields, with the fix; `forced`: the --format given (None: detecting).

        chosen + rejected            (detected as preference pairs) refused under another
                                     --format than preference or chosen-sft: SFT would ignore 'chosen'
        label: bool (KTO) detected   refused: name the --format that reads it
        label: false, --format X     refused per record (X would train the undesirable answer);
                                     label: true under --format X is packed
    """
    if forced in ("preference", "chosen-sft"):
        return None
    if any(c in record and r in record for c, r in PAIR_KEYS):
        how = f"--format {forced} would ignore" if forced else "packing them as SFT would ignore"
        return (
            f"records are preference data (keys {keys_text(record)}): {how} 'chosen'; "
            "pass --format preference to pack them as pairs (or --format chosen-sft to train SFT "
            "on the chosen answers: the prompt turns carry no loss, rejected is ignored)"
        )
    label = record.get("label")
    if not isinstance(label, bool) or not any(k in record for k in _KTO_KEYS):
        return None
    if forced is None:
        fmt = "prompt-completion" if "completion" in record else "messages"
        if "conversations" in record and "messages" not in record:
            fmt = "sharegpt"
        return (
            f"records are KTO data (a boolean 'label'; keys {keys_text(record)}): packtool packs "
            "preference pairs (chosen + rejected), not KTO's unpaired answers, and SFT would train the undesirable "
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


def _turn_shape(turns: Any, plan: ReadPlan) -> str:
    if isinstance(turns, list) and turns and isinstance(turns[0], dict):
        first = turns[0]
        role = next((k for k in plan.role_keys if k in first), None)
        content = next((k for k in plan.content_keys if k in first), None)
        if role and content:
            return f" with {role}/{content} turns"
    return ""
