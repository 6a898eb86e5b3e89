"""`packtool inspect DATA --index N`: check the template and labels of one example before training."""

from __future__ import annotations

from typing import Annotated

import typer

from packtool.commands import common as c


def inspect(
    data: c.Data,
    index: Annotated[int, typer.Option("--index", "-i", help="Record to show (0-based).")] = 0,
    tokenizer: c.Tokenizer = None,
    chat_template: c.ChatTemplate = None,
    train_on: c.TrainOnOpt = "assistant",
    fmt: c.FormatOpt = None,
    column: c.ColumnOpt = None,
    role: c.RoleOpt = None,
    split: c.SplitOpt = "train",
    json_out: c.JsonOpt = None,
    tokenizer_backend: c.BackendOpt = "auto",
    template_date: c.TemplateDateOpt = None,
    special_in_content: c.SpecialOpt = "keep",
    allow_download: c.AllowDownloadOpt = False,
) -> None:
    """Show one example: detected format, normalized conversation, tokens with loss highlighted."""
    from packtool.api import inspect_example
    from packtool.report.inspect import render_inspect

    cfg = c.tokenize_config(tokenizer=tokenizer, chat_template=chat_template, train_on=train_on, fmt=fmt,
                            column=column, role=role, split=split, on_error="error", num_proc=1,
                            no_cache=True, tokenizer_backend=tokenizer_backend,
                            template_date=template_date, special_in_content=special_in_content,
                             allow_download=allow_download)
    result = inspect_example(data, cfg, index)
    if json_out:
        c.write_json(result, json_out)
    if json_out != "-":
        render_inspect(result, c.console())
