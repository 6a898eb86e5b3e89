"""`packtool sample OUT.jsonl`: write the built-in synthetic chat set (for demos and trials)."""

from __future__ import annotations

from typing import Annotated

import typer

from packtool import api
from packtool.commands.output import Output
from packtool.errors import UsageError


def sample(
    out: Annotated[str, typer.Argument(help="Where to write the JSONL file.", metavar="OUT")],
    n: Annotated[int, typer.Option("--n", help="Number of conversations.")] = 600,
    seed: Annotated[int, typer.Option("--seed", help="Random seed.")] = 0,
) -> None:
    """Write a synthetic multi-turn chat set with a long-tailed length mix (OpenAI messages JSONL)."""
    if n < 1:
        raise UsageError(f"--n {n} must be >= 1")
    path = api.write_sample(out, n=n, seed=seed)
    Output().console.print(f"wrote {n} conversations to {path}")
