"""Options shared by the commands that read and tokenize data, and the console helpers."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

from packtool.config import ReadConfig, TokenizeConfig
from packtool.errors import UsageError

Data = Annotated[str, typer.Argument(help="File, folder, glob, save_to_disk folder or cached hub id.")]
Tokenizer = Annotated[
    str | None,
    typer.Option("--tokenizer", "-t", help="Local tokenizer folder or cached hub id. Default: built-in Qwen3."),
]
ChatTemplate = Annotated[
    str | None,
    typer.Option("--chat-template", help="Jinja file or built-in name (chatml-train) overriding the tokenizer's."),
]
TrainOnOpt = Annotated[str, typer.Option("--train-on", help="Which turns carry loss: assistant|last|all.")]
FormatOpt = Annotated[
    str | None,
    typer.Option("--format", "-f", help="Force the record format: messages|prompt-completion|text|alpaca|sharegpt."),
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
) -> TokenizeConfig:
    if train_on not in ("assistant", "last", "all"):
        raise UsageError(f"--train-on {train_on!r} is not one of assistant|last|all")
    if on_error not in ("error", "skip"):
        raise UsageError(f"--on-error {on_error!r} is not one of error|skip")
    if tokenizer_backend not in ("auto", "fastokens", "hf"):
        raise UsageError(f"--tokenizer-backend {tokenizer_backend!r} is not one of auto|fastokens|hf")
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


def announce(td, con, warnings: bool = True) -> None:
    """Say what was read and how: format and why, tokenizer and template, cache, warnings, skips."""
    tok = td.tokenizer or {}
    con.print(f"format: [cyan]{td.format}[/] — {td.format_reason}")
    if tok.get("name"):
        tpl = tok.get("chat_template")
        con.print(f"tokenizer: {tok['name']}" + (f", chat template: {tpl}" if tpl else ""))
    backend = (td.backend or {}).get("name")
    con.print(f"examples: {td.num_read} read, {len(td)} tokenized, {len(td.skipped)} skipped"
              + (f", tokenizer backend {backend}" if backend else "") + (" (from cache)" if td.cache_hit else ""))
    for w in td.warnings if warnings else ():
        con.print(f"[yellow]warning:[/] {w}")
