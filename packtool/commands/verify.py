"""`packtool verify DIR`: integrity of every row plus isolation through a real attention kernel."""

from __future__ import annotations

from typing import Annotated

import typer

from packtool.commands import common as c


def verify(
    path: Annotated[str | None, typer.Argument(help="Pack folder written by `packtool pack` (manifest.json + data/).",
                                               show_default=False)] = None,
    backend: Annotated[str, typer.Option("--backend", help="Attention for the isolation check: auto | flash-attn | "
                                         "torch-varlen | sdpa | eager | flex | reference.")] = "auto",
    device: Annotated[str, typer.Option("--device", help="auto | cpu | cuda.")] = "auto",
    rows: Annotated[int | None, typer.Option("--rows", help="Rows with >= 2 documents run through the tiny models "
                                             "(0 = integrity only). Default: 4 on CPU, 16 on CUDA.",
                                             show_default=False)] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the row sample and the tiny models' weights.")] = 0,
    json_out: c.JsonOpt = None,
    self_test: Annotated[bool, typer.Option("--self-test", help="Build a small pack in a temporary folder and "
                                            "verify it (for CI jobs without shards).")] = False,
) -> None:
    """Prove a pack is safe to train on; exit 0 only if every check passes (1: a check failed, 2: bad usage)."""
    from packtool import api
    from packtool.errors import UsageError
    from packtool.report.verify import render_verify, verify_json
    from packtool.verify.run import VerifyConfig

    if self_test and path:
        raise UsageError(f"--self-test builds its own pack; drop the folder argument {path!r}")
    if not self_test and not path:
        raise UsageError("give the pack folder to verify, e.g. `packtool verify out/`, or use --self-test")
    cfg = VerifyConfig(path=path, backend=backend, device=device, rows=rows, seed=seed)
    if self_test:
        from packtool.verify.selftest import run_self_test

        result = run_self_test(cfg)
    else:
        result = api.verify(cfg)
    if json_out:
        c.write_json(verify_json(result), json_out)
    if json_out != "-":
        render_verify(result, c.console())
    if not result.passed:
        raise typer.Exit(1)
