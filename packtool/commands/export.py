"""`packtool export PACK --to nemo --out DIR`: a pack in another trainer's packed format."""

from __future__ import annotations

from typing import Annotated

import typer

from packtool import api
from packtool.commands.options import PACK_ARG, JsonOpt
from packtool.commands.output import Output


def export(
    pack: Annotated[str, PACK_ARG],
    to: Annotated[
        str,
        typer.Option(
            "--to",
            help="Format: nemo (NeMo / Megatron-Bridge GPTSFTPackedDataset .npy + metadata).",
            show_default=False,
        ),
    ],
    out: Annotated[
        str,
        typer.Option(
            "--out",
            "-o",
            help="Output folder (training_{len}.npy, {len}_metadata.jsonl, export.json).",
            show_default=False,
        ),
    ],
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace --out if it is an earlier export (the files its export.json names, nothing else).",
        ),
    ] = False,
    json_out: JsonOpt = None,
) -> None:
    """Write a pack in another trainer's packed format (nemo: NeMo / Megatron-Bridge packed SFT)."""
    from packtool.report.pack import export_json, render_export

    output = Output(json_out)
    with output.stage("exporting", unit="rows") as stage:
        result = api.export(pack, to, out, force=force, progress=stage.update)
    output.report(lambda: export_json(result), lambda console: render_export(result, console))
