"""`packtool pack DATA --len 4096 --out DIR`: write static-length packed Parquet shards + manifest."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from packtool import api
from packtool.commands.options import (
    Inputs,
    JsonOpt,
    ModelOpt,
    TokenizeArgs,
    parse_inputs,
    tokenize_options,
    warn_model,
)
from packtool.commands.output import Output
from packtool.config import PackConfig
from packtool.report.tokenized import announce


@tokenize_options()
def pack(
    data: Inputs,
    pack_len: Annotated[
        int,
        typer.Option(
            "--len",
            help="Tokens per packed row (every row has exactly this many).",
            show_default=False,
        ),
    ],
    out: Annotated[
        str,
        typer.Option(
            "--out",
            "-o",
            help="Output folder (data/*.parquet + manifest.json).",
            show_default=False,
        ),
    ],
    strategy: Annotated[
        str,
        typer.Option("--strategy", help="bfd (best-fit decreasing) | ffd (first-fit decreasing)."),
    ] = "bfd",
    order: Annotated[
        str,
        typer.Option(
            "--order",
            help="sorted: longest first (tightest) | random: seeded shuffle, rows not length-sorted.",
        ),
    ] = "sorted",
    max_docs: Annotated[
        int, typer.Option("--max-docs", help="At most N documents per row (0 = no cap).")
    ] = 0,
    overflow: Annotated[
        str,
        typer.Option(
            "--overflow", help="Examples longer than --len: drop | truncate | split | error."
        ),
    ] = "drop",
    pad_to_multiple: Annotated[
        int,
        typer.Option(
            "--pad-to-multiple",
            metavar="N",
            help="Pad each document to a multiple of N slots (context parallelism: 2 x cp_size; --len must be a multiple of N); seq_lengths_unpadded keeps the real lengths.",
        ),
    ] = 1,
    fixed_docs: Annotated[
        bool,
        typer.Option(
            "--fixed-docs",
            help="Every row lists exactly --max-docs documents (zeros at the end): static cu_seqlens shapes for CUDA graphs.",
        ),
    ] = False,
    seed: Annotated[
        int, typer.Option("--seed", help="Seed of --order random and of the row shuffle.")
    ] = 0,
    no_shuffle: Annotated[
        bool,
        typer.Option("--no-shuffle", help="Keep rows in packing order (long documents first)."),
    ] = False,
    shard_rows: Annotated[
        int,
        typer.Option("--shard-rows", help="Rows per Parquet shard (0 = about 512 MiB of tokens)."),
    ] = 0,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Replace --out if it is a packtool pack (manifest.json and data/ shards, nothing else).",
        ),
    ] = False,
    json_out: JsonOpt = None,
    model: ModelOpt = None,
    *,
    tok: TokenizeArgs,
) -> None:
    """Pack tokenized examples into rows of exactly --len tokens (labels, position_ids, document_id)."""
    output = Output(json_out)
    cfg = PackConfig(
        pack_len=pack_len,
        strategy=strategy,
        order=order,
        max_docs=max_docs,
        overflow=overflow,
        seed=seed,
        shuffle=not no_shuffle,
        shard_rows=shard_rows,
        force=force,
        pad_to_multiple=pad_to_multiple,
        fixed_docs=fixed_docs,
    )
    tcfg = tok.config()
    engine_cfg = tok.engine_config()
    warn_model(output, model, tok.tokenizer)
    inputs = parse_inputs(data, tcfg.read)  # None: one DATA without ::options, read as always
    source = data[0] if inputs is None else inputs
    size = 0 if tok.limit else api.input_bytes(source)  # --limit reads a part of unknown size
    # before spending minutes on tokenization; packs measure ~0.4x chat JSONL, ~1x pre-tokenized Parquet
    if engine_cfg.name == "local":
        api.check_output(out, force, size)
        api.check_cache(2 * size)  # a cache entry measures ~1.5x chat JSONL
    else:  # Ray keeps the tokens in part files beside the pack until the shards are written
        what = "about 3x the input's size: the pack and Ray's part files beside it"
        api.check_output(out, force, 3 * size, what)
    from packtool.report.pack import pack_json, render_pack

    with api.engine(engine_cfg) as engine:
        if engine is not None:  # Ray keeps the encoded parts beside the pack: storage it shares
            engine.scratch_parent = str(Path(out).resolve().parent)
        tokenized = api.load_tokenized(
            source, tcfg, progress=output, seed=seed, engine=engine, pack=cfg
        )
        if output.human:
            announce(tokenized, output.console, warnings=False)  # render_pack lists the warnings
        with output.stage("writing", unit="rows") as stage:
            result = api.pack(tokenized, cfg, out, stage.update, num_proc=tcfg.num_proc)
        output.report(lambda: pack_json(result), lambda console: render_pack(result, console))
