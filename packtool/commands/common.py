"""What the commands share besides options and output: the tokenization configs from option
values (NAME=NAME pairs parsed here; the configs check the rest), the lines that say what was read."""

from __future__ import annotations

import os

from packtool.config import ReadConfig, TokenizeConfig
from packtool.errors import UsageError


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
    """The configs of the tokenization options; ReadConfig and TokenizeConfig check the values."""
    read = ReadConfig(
        format=fmt,
        split=split,
        columns=_pairs(column, "--column"),
        roles=_pairs(role, "--role"),
        on_error=on_error,  # type: ignore[arg-type]
        limit=limit,
    )
    cfg = TokenizeConfig(
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
    if allow_download:  # read by packtool.tokenization.loading, in this process and its workers
        os.environ["PACKTOOL_ALLOW_DOWNLOAD"] = "1"
    return cfg
