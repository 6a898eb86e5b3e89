"""`packtool profile DATA`: how much compute would padding waste, and what each strategy saves."""

from __future__ import annotations

import json
import os
import re
from typing import Annotated

import typer

from packtool.commands import common as c
from packtool.errors import PacktoolError, UsageError

OptData = Annotated[
    str | None,
    typer.Argument(metavar="DATA", help="File, folder, glob, save_to_disk folder or cached hub id. "
                        "Omit it with --synthetic or --lengths.", show_default=False),
]
_COUNT = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([kKmMbBtT]?)\s*$")
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}


def parse_count(text: str, option: str) -> float:
    """7e9, 7B, 1.5b, 350M, 125k → a number of parameters."""
    m = _COUNT.match(text)
    if not m:
        raise UsageError(f"{option} {text!r} is not a number; e.g. {option} 7e9 or {option} 7B")
    return float(m.group(1)) * _SCALE[m.group(2).lower()]


def load_model(model: str | None, params: str | None, layers: int | None, hidden: int | None):
    from packtool import stats

    if model and params:
        raise UsageError("give either --model CONFIG.json or --params/--layers/--hidden, not both")
    if model:
        path = os.path.join(model, "config.json") if os.path.isdir(model) else model
        if not os.path.isfile(path):
            raise UsageError(f"--model {model!r}: no such file (a transformers config.json or its folder)")
        try:
            with open(path) as f:
                cfg = json.load(f)
        except (OSError, ValueError) as e:
            raise PacktoolError(f"--model {path}: not valid JSON ({e})") from None
        return stats.model_from_config(cfg, path)
    if params is None:
        if layers is not None or hidden is not None:
            raise UsageError("--layers/--hidden need --params N as well, e.g. --params 7e9 --layers 32 --hidden 4096")
        return None
    if layers is None or hidden is None:
        raise UsageError("--params needs --layers L and --hidden D too, e.g. --params 7e9 --layers 32 --hidden 4096")
    return stats.model_from_params(parse_count(params, "--params"), layers, hidden)


def profile(
    data: OptData = None,
    pack_len: Annotated[int, typer.Option("--len", help="Row length of packing and pad-to-max; longer examples are truncated to it.")] = 4096,
    batch_size: Annotated[int, typer.Option("--batch-size", "-b", help="Rows per micro-batch.")] = 8,
    group_window: Annotated[int, typer.Option("--group-window", help="Length-grouped: sort each window of this many shuffled examples by length, then batch.")] = 512,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random batch order.")] = 0,
    json_out: c.JsonOpt = None,
    plot: Annotated[str | None, typer.Option("--plot", help="Write a PNG with histograms and the strategy comparison.")] = None,
    model: Annotated[str | None, typer.Option("--model", help="transformers config.json (or its folder) for FLOPs.")] = None,
    params: Annotated[str | None, typer.Option("--params", help="Parameter count, e.g. 7e9 or 7B (with --layers, --hidden).")] = None,
    layers: Annotated[int | None, typer.Option("--layers", help="Transformer layers (with --params).")] = None,
    hidden: Annotated[int | None, typer.Option("--hidden", help="Hidden size = attention width (with --params).")] = None,
    gpu: Annotated[str | None, typer.Option("--gpu", help="h100|h100-pcie|h200|a100|l40s|l4|a10|b200|mi300x or a dense bf16 TFLOP/s number: GPU-hours.")] = None,
    mfu: Annotated[float, typer.Option("--mfu", help="Model FLOPs utilization for GPU-hours.")] = 0.4,
    synthetic: Annotated[str | None, typer.Option("--synthetic", help="Profile a length distribution instead of DATA, e.g. lognormal:median=450,sigma=0.9,n=20000,max=4096,seed=0 (grammar above).")] = None,
    lengths_file: Annotated[str | None, typer.Option("--lengths", help="Profile lengths from a file: .txt (one per line) or .npy.")] = None,
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
    """Length distribution, padding and attention waste per batching strategy, FLOPs and GPU-hours.

    Strategies: pad to --len; random batches padded to their longest; length-grouped batches;
    padding-free varlen; packed rows (BFD, FFD) with a varlen kernel and with a dense mask.

    \b
    --synthetic SPEC grammar (no dataset or tokenizer needed):
      DIST[:KEY=VALUE,...][+DIST:...]   "+" mixes components
      lognormal  median=450 sigma=0.9      normal  mean=512 std=128
      uniform    min=1 max=2048            constant  value=512
      every DIST also takes n=10000 min=1 max=(none) seed=0; numbers may be 2e4, 20k, 1M
      e.g. lognormal:median=300,n=9000+constant:value=8192,n=100
    """
    from packtool import profiler, stats
    from packtool.report import profile as report

    sources = [x for x in (data, synthetic, lengths_file) if x is not None]
    if len(sources) != 1:
        raise UsageError("give exactly one of DATA, --synthetic SPEC or --lengths FILE, "
                         "e.g. packtool profile --synthetic lognormal:median=450,n=20000")
    if data is None:
        given = [o for o, v in (("--tokenizer", tokenizer), ("--chat-template", chat_template), ("--format", fmt),
                                ("--column", column), ("--role", role), ("--limit", limit)) if v]
        if given:
            raise UsageError(f"{', '.join(given)} only apply to DATA, not to --synthetic/--lengths")
    spec = load_model(model, params, layers, hidden)
    cfg = profiler.ProfileConfig(
        pack_len=pack_len, batch_size=batch_size, group_window=group_window, seed=seed, model=spec,
        gpu=stats.gpu_spec(gpu) if gpu is not None else None, mfu=mfu,
    )
    if plot is not None and not plot.lower().endswith(".png"):
        raise UsageError(f"--plot {plot!r} must end in .png")
    con = c.console()
    with con.status("profiling", spinner="dots") as status:
        stage = lambda s: status.update(f"profiling: {s}")  # noqa: E731
        if data is not None:
            from packtool import api

            status.stop()  # load_tokenized draws its own progress bars
            from packtool.commands.pack import _input_bytes
            from packtool.tokenization import cache

            tcfg = c.tokenize_config(tokenizer=tokenizer, chat_template=chat_template, train_on=train_on, fmt=fmt,
                                     column=column, role=role, split=split, on_error=on_error, num_proc=num_proc,
                                     no_cache=no_cache, limit=limit, tokenizer_backend=tokenizer_backend,
                                     template_date=template_date, special_in_content=special_in_content,
                                     allow_download=allow_download)
            cache.check_usable(0 if limit else 2 * _input_bytes(data))  # unusable: one warning, run uncached
            td = api.load_tokenized(data, tcfg, progress=json_out != "-")
            status.start()
            result = api.profile(td, cfg, source={"data": data}, on_stage=stage)
        else:
            from packtool import synthetic as syn

            if synthetic is not None:
                stage("drawing lengths")
                arr, src = syn.synthetic_lengths(synthetic), {"kind": "synthetic", "spec": synthetic}
            else:
                stage("reading lengths")
                arr, src = syn.read_lengths(lengths_file), {"kind": "lengths", "path": lengths_file}
            result = profiler.profile_lengths(arr, cfg, source=src, on_stage=stage)
        if plot is not None:
            stage("drawing the PNG")
            report.write_png(result, plot)
    if json_out:
        c.write_json(report.to_json(result), json_out)
    if json_out != "-":
        report.render(result, con)
    if plot is not None:
        con.print(f"[dim]wrote {plot}[/]")
    if json_out and json_out != "-":
        con.print(f"[dim]wrote {json_out}[/]")
