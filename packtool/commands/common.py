"""Options shared by the commands that read and tokenize data, and the console helpers."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from packtool.config import ReadConfig, TokenizeConfig
from packtool.errors import UsageError

Data = Annotated[str, typer.Argument(help="File, folder, glob, save_to_disk folder or cached hub id.", metavar="DATA")]
Tokenizer = Annotated[
    str | None,
    typer.Option("--tokenizer", "-t", help="Local tokenizer folder or cached hub id. Default: built-in Qwen3."),
]
ChatTemplate = Annotated[
    str | None,
    typer.Option("--chat-template", help="auto (default: the tokenizer's template if it marks generation, else "
                 "TRL's training version of it, else the tokenizer's located by render diffs) | tokenizer | "
                 "chatml-train | trl:NAME (a template TRL ships) | FILE.", show_default=False),
]
AllowDownloadOpt = Annotated[
    bool,
    typer.Option("--allow-download", help="Fetch a --tokenizer hub id that is not in the local Hugging Face "
                 "cache (by default packtool never goes to the network for it)."),
]
TemplateDateOpt = Annotated[
    str | None,
    typer.Option("--template-date", help="Date (YYYY-MM-DD) that templates writing today's date get, so packs "
                 "are reproducible. Default: 2026-01-01.", show_default=False),
]
SpecialOpt = Annotated[
    str,
    typer.Option("--special-in-content", help="Control tokens inside message text (e.g. a typed <|im_start|>): "
                 "keep (as control tokens, like apply_chat_template; counted and announced) | split (tokenize "
                 "as plain text) | error (refuse the record)."),
]
TrainOnOpt = Annotated[str, typer.Option("--train-on", help="Which turns carry loss: assistant|last|all.")]
FormatOpt = Annotated[
    str | None,
    typer.Option("--format", "-f", help="Force the record format: messages|prompt-completion|text|alpaca|sharegpt|preference (SFT on the chosen answers)."),
]
ColumnOpt = Annotated[
    list[str] | None,
    typer.Option("--column", help="Map a column: OURS=THEIRS, e.g. messages=dialog. Repeatable."),
]
RoleOpt = Annotated[
    list[str] | None,
    typer.Option("--role", help="Map a role: THEIRS=OURS, e.g. bot=assistant. Repeatable."),
]
SplitOpt = Annotated[str, typer.Option("--split", help="Split of a hub id or DatasetDict folder.")]
OnErrorOpt = Annotated[str, typer.Option("--on-error", help="Bad records: error (stop) or skip (count and list).")]
NumProcOpt = Annotated[int | None, typer.Option("--num-proc", help="Tokenizer processes. Default: all cores (one for inputs under 4 MiB).")]
NoCacheOpt = Annotated[bool, typer.Option("--no-cache", help="Tokenize again even if a cached result exists.")]
BackendOpt = Annotated[
    str,
    typer.Option("--tokenizer-backend", help="auto (fastokens when it gives ids and labels identical to the "
                 "tokenizers path on this run's first examples, else hf) | fastokens | hf."),
]
LimitOpt = Annotated[int | None, typer.Option("--limit", help="Read at most N records.")]
JsonOpt = Annotated[str | None, typer.Option("--json", help="Write the JSON report to PATH, or - for stdout.")]


def _pairs(values: list[str] | None, option: str) -> tuple[tuple[str, str], ...]:
    out = []
    for v in values or []:
        left, sep, right = v.partition("=")
        if not sep or not left or not right:
            raise UsageError(f"{option} {v!r} is not NAME=NAME; e.g. {option} messages=dialog")
        out.append((left.strip(), right.strip()))
    return tuple(out)


def tokenize_config(
    *,
    tokenizer: str | None,
    chat_template: str | None,
    train_on: str,
    fmt: str | None,
    column: list[str] | None,
    role: list[str] | None,
    split: str,
    on_error: str,
    num_proc: int | None,
    no_cache: bool,
    limit: int | None = None,
    tokenizer_backend: str = "auto",
    template_date: str | None = None,
    special_in_content: str = "keep",
    allow_download: bool = False,
) -> TokenizeConfig:
    if train_on not in ("assistant", "last", "all"):
        raise UsageError(f"--train-on {train_on!r} is not one of assistant|last|all")
    if on_error not in ("error", "skip"):
        raise UsageError(f"--on-error {on_error!r} is not one of error|skip")
    if tokenizer_backend not in ("auto", "fastokens", "hf"):
        raise UsageError(f"--tokenizer-backend {tokenizer_backend!r} is not one of auto|fastokens|hf")
    if allow_download:  # read by packtool.tokenization.loading, in this process and its workers
        os.environ["PACKTOOL_ALLOW_DOWNLOAD"] = "1"
    if special_in_content not in ("keep", "split", "error"):
        raise UsageError(f"--special-in-content {special_in_content!r} is not one of keep|split|error")
    if template_date is not None:
        import datetime

        try:
            datetime.date.fromisoformat(template_date)
        except ValueError:
            raise UsageError(f"--template-date {template_date!r} is not a date like 2026-01-01") from None
    if num_proc is not None and num_proc < 1:
        raise UsageError(f"--num-proc {num_proc} must be >= 1")
    read = ReadConfig(
        format=fmt,
        split=split,
        columns=_pairs(column, "--column"),
        roles=_pairs(role, "--role"),
        on_error=on_error,  # type: ignore[arg-type]
        limit=limit,
    )
    return TokenizeConfig(
        tokenizer=tokenizer,
        chat_template=chat_template,
        train_on=train_on,  # type: ignore[arg-type]
        num_proc=num_proc,
        cache=not no_cache,
        tokenizer_backend=tokenizer_backend,
        template_date=template_date,
        special_in_content=special_in_content,
        read=read,
    )


def console():
    """Human output goes to stderr so that `--json -` keeps stdout clean."""
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def write_json(obj: dict, target: str) -> None:
    import json

    text = json.dumps(obj, indent=2, sort_keys=False, default=str)
    if target == "-":
        sys.stdout.write(text + "\n")
    else:
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        with open(target, "w") as f:
            f.write(text + "\n")


def template_line(tok: dict) -> str:
    """`chat template: NAME (ORIGIN) — why; labels: mode; end of turn: ...; date: ...` in one line."""
    mode = {"markers": "generation markers", "prefix": "render diffs, every assistant turn",
            "last": "render diffs, last assistant turn", "all": "every token"}.get(tok.get("chat_template_mode"), "")
    parts = [f"chat template: {tok['chat_template']}" + (f" ({tok['chat_template_origin']})"
                                                          if tok.get("chat_template_origin") else "")
             + (f" — {tok['chat_template_why']}" if tok.get("chat_template_why") else "")]
    if mode:
        parts.append(f"labels from {mode}")
    if tok.get("end_of_turn"):
        parts.append(f"end of turn {tok['end_of_turn']}")
    if tok.get("template_date"):
        parts.append(f"date fixed to {tok['template_date']} (--template-date)")
    return "; ".join(parts)


def announce(td, con, warnings: bool = True) -> None:
    """Say what was read and how: format and why, tokenizer and template, cache, warnings, skips."""
    tok = td.tokenizer or {}
    con.print(f"format: [cyan]{td.format}[/] — {td.format_reason}")
    if tok.get("name"):
        con.print(f"tokenizer: {tok['name']}")
        if tok.get("chat_template"):
            con.print(template_line(tok))
    backend = (td.backend or {}).get("name")
    con.print(f"examples: {td.num_read} read, {len(td)} tokenized, {len(td.skipped)} skipped"
              + (f", tokenizer backend {backend}" if backend else "") + (" (from cache)" if td.cache_hit else ""))
    for w in td.warnings if warnings else ():
        con.print(f"[yellow]warning:[/] {w}")
