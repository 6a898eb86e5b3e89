"""`packtool pack DATA --len 4096 --out DIR`: write static-length packed Parquet shards + manifest."""

from __future__ import annotations

from typing import Annotated

import typer

from packtool.commands import common as c


def pack(
    data: c.Data,
    pack_len: Annotated[int, typer.Option("--len", help="Tokens per packed row (every row has exactly this many).",
                                          show_default=False)],
    out: Annotated[str, typer.Option("--out", "-o", help="Output folder (data/*.parquet + manifest.json).",
                                     show_default=False)],
    strategy: Annotated[str, typer.Option("--strategy", help="bfd (best-fit decreasing) | ffd (first-fit decreasing).")] = "bfd",
    order: Annotated[str, typer.Option("--order", help="sorted: longest first (tightest) | random: seeded shuffle, rows not length-sorted.")] = "sorted",
    max_docs: Annotated[int, typer.Option("--max-docs", help="At most N documents per row (0 = no cap).")] = 0,
    overflow: Annotated[str, typer.Option("--overflow", help="Examples longer than --len: drop | truncate | split | error.")] = "drop",
    seed: Annotated[int, typer.Option("--seed", help="Seed of --order random and of the row shuffle.")] = 0,
    no_shuffle: Annotated[bool, typer.Option("--no-shuffle", help="Keep rows in packing order (long documents first).")] = False,
    shard_rows: Annotated[int, typer.Option("--shard-rows", help="Rows per Parquet shard (0 = about 512 MiB of tokens).")] = 0,
    force: Annotated[bool, typer.Option("--force", help="Replace --out if it is a packtool pack (manifest.json and data/ shards, nothing else).")] = False,
    json_out: c.JsonOpt = None,
    tokenizer: c.Tokenizer = None,
    chat_template: c.ChatTemplate = None,
    train_on: c.TrainOnOpt = "assistant",
    fmt: c.FormatOpt = None,
    column: c.ColumnOpt = None,
    role: c.RoleOpt = None,
    split: c.SplitOpt = "train",
    on_error: c.OnErrorOpt = "error",
    num_proc: c.NumProcOpt = None,
    no_cache: c.NoCacheOpt = False,
    limit: c.LimitOpt = None,
    tokenizer_backend: c.BackendOpt = "auto",
    template_date: c.TemplateDateOpt = None,
    special_in_content: c.SpecialOpt = "keep",
    allow_download: c.AllowDownloadOpt = False,
) -> None:
    """Pack tokenized examples into rows of exactly --len tokens (labels, position_ids, document_id)."""
    from pathlib import Path

    from packtool import api
    from packtool.io.shards import check_space, check_target
    from packtool.packer import PackConfig
    from packtool.report.pack import pack_json, render_pack
    from packtool.tokenization import cache

    cfg = PackConfig(pack_len=pack_len, strategy=strategy, order=order, max_docs=max_docs, overflow=overflow,
                     seed=seed, shuffle=not no_shuffle, shard_rows=shard_rows, force=force)
    check_target(Path(out), force)  # before spending minutes on tokenization
    size = 0 if limit else _input_bytes(data)  # --limit reads a part of unknown size
    check_space(Path(out), size)  # packs measure ~0.4x chat JSONL, ~1x pre-tokenized Parquet
    cache.check_usable(2 * size)  # a cache entry measures ~1.5x chat JSONL
    tcfg = c.tokenize_config(tokenizer=tokenizer, chat_template=chat_template, train_on=train_on, fmt=fmt,
                             column=column, role=role, split=split, on_error=on_error, num_proc=num_proc,
                             no_cache=no_cache, limit=limit,
                             tokenizer_backend=tokenizer_backend,
                             template_date=template_date, special_in_content=special_in_content,
                             allow_download=allow_download)
    console = c.console()
    tokenized = api.load_tokenized(data, tcfg, progress=json_out != "-")
    # manifest["options"]: everything `verify --sources` needs to tokenize the sources again (the
    # input as given, and the options that shape ids and labels); the keys the tokenizer recorded
    # (train_on, chat_template, labels_from) keep their values
    tokenized.options = {**tcfg.fingerprint_dict(), "input": data, **(tokenized.options or {})}
    if json_out != "-":
        c.announce(tokenized, console, warnings=False)  # render_pack lists the warnings
    from packtool.progress import Progress

    with Progress("writing", unit="rows", enabled=json_out != "-") as bar:
        result = api.pack(tokenized, cfg, out, progress=bar.update)
    if json_out:
        c.write_json(pack_json(result), json_out)
    if json_out != "-":
        render_pack(result, console)


def _input_bytes(data: str) -> int:
    """Bytes of a local input file or folder (0 for a hub id): the base of the free-space checks."""
    import os

    if os.path.isfile(data):
        return os.path.getsize(data)
    total = 0
    for folder, _, names in os.walk(data):  # nothing for a path that is not a folder
        total += sum(os.path.getsize(os.path.join(folder, n)) for n in names
                     if os.path.isfile(os.path.join(folder, n)))
    return total
