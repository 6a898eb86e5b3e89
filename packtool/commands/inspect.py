"""`packtool inspect DATA --index N`: check the template and labels of one example before training."""

from __future__ import annotations

from typing import Annotated

import typer

from packtool import api
from packtool.commands.options import (
    Data,
    JsonOpt,
    ModelOpt,
    TokenizeArgs,
    tokenize_options,
    warn_model,
)
from packtool.commands.output import Output


@tokenize_options(whole_input=False)
def inspect(
    data: Data,
    index: Annotated[int, typer.Option("--index", "-i", help="Record to show (0-based).")] = 0,
    json_out: JsonOpt = None,
    model: ModelOpt = None,
    *,
    tok: TokenizeArgs,
) -> None:
    """Show one example: detected format, normalized conversation, tokens with loss highlighted."""
    from packtool.report.tokenized import render_inspect

    out = Output(json_out)
    warn_model(out, model, tok.tokenizer)
    # one record: no workers, no cache
    cfg = tok.config(on_error="error", num_proc=1, no_cache=True)
    result = api.inspect_example(data, cfg, index)
    out.report(result, lambda console: render_inspect(result, console))
