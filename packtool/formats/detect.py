"""A record's format, from its keys (or --format when forced), and why; preference and KTO records
refused as plain SFT (sft_refusal), with the fix."""

from __future__ import annotations

from typing import Any

from packtool.config import ReadConfig
from packtool.errors import UsageError
from packtool.formats import PLAIN_PROMPT_COMPLETION, FormatError
from packtool.formats.columns import ReadPlan, keys_text, read_plan, rename

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


def detect_format(record: dict, cfg: ReadConfig) -> tuple[str, str]:
    """(format name, why): from the keys of one record, or `cfg.format` when forced."""
    plan = read_plan(cfg)
    if cfg.format is not None:
        return cfg.format, f"forced by --format {cfg.format}"
    if not isinstance(record, dict):
        raise FormatError(f"record is a {type(record).__name__}, expected a JSON object")
    stored = record
    if plan.renames:
        record = rename(record, plan.renames)

    def named(key: str) -> str:
        theirs = plan.back.get(key)
        return f"'{key}' (column '{theirs}')" if theirs in stored else f"'{key}'"

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
            f"records are preference data (keys {keys_text(record)}): {how} 'chosen'; "
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
            f"records are KTO data (a boolean 'label'; keys {keys_text(record)}): SFT would train the undesirable "
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
