"""`packtool profile DATA`: how much compute would padding waste, and what each strategy saves."""

from __future__ import annotations

import re
from typing import Annotated

import typer

from packtool import api
from packtool.commands.options import (
    INPUTS_HELP,
    JsonOpt,
    ModelOpt,
    TokenizeArgs,
    parse_inputs,
    tokenize_options,
    warn_model,
)
from packtool.commands.output import Output
from packtool.config import ProfileConfig
from packtool.errors import UsageError

OptData = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="DATA",
        help=INPUTS_HELP + " Omit it with --synthetic or --lengths.",
        show_default=False,
    ),
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
    if model and params:
        raise UsageError("give either --model CONFIG.json or --params/--layers/--hidden, not both")
    if model:  # a folder, its config.json, or a cached hub id: read as every command reads it
        cfg, path = api.read_model_config(model, need_type=False)
        return api.model_from_config(cfg, path)
    if params is None:
        if layers is not None or hidden is not None:
            raise UsageError(
                "--layers/--hidden need --params N as well, e.g. --params 7e9 --layers 32 --hidden 4096"
            )
        return None
    if layers is None or hidden is None:
        raise UsageError(
            "--params needs --layers L and --hidden D too, e.g. --params 7e9 --layers 32 --hidden 4096"
        )
    return api.model_from_params(parse_count(params, "--params"), layers, hidden)


@tokenize_options()
def profile(
    data: OptData = None,
    pack_len: Annotated[
        str,
        typer.Option(
            "--len",
            metavar="N|LIST|RANGE",
            help="Row length of pack and pad-to-max, e.g. 4096. Several to compare: 2048,4096,8192, 1024-8192 (powers of two between) or 1024:8192:1024; they give a table side by side and the full profile at the --len the recommendation picks.",
        ),
    ] = "4096",
    overflow: Annotated[
        str,
        typer.Option(
            "--overflow",
            help="What pack does with examples longer than --len, and so what profile predicts: drop (pack's default: leave them out), truncate (cut to --len), split (parts of --len as separate documents), error (stop, naming the example).",
        ),
    ] = "drop",
    pad_to_multiple: Annotated[
        int,
        typer.Option(
            "--pad-to-multiple",
            metavar="N",
            help="Predict pack --pad-to-multiple N: each document padded to a multiple of N slots (--len must be a multiple of N); shows what the padding costs.",
        ),
    ] = 1,
    batch_size: Annotated[
        int, typer.Option("--batch-size", "-b", help="Rows per micro-batch.")
    ] = 8,
    group_window: Annotated[
        int,
        typer.Option(
            "--group-window",
            help="Length-grouped: sort each window of this many shuffled examples by length, then batch.",
        ),
    ] = 512,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the random batch order.")] = 0,
    json_out: JsonOpt = None,
    plot: Annotated[
        str | None,
        typer.Option("--plot", help="Write a PNG with histograms and the strategy comparison."),
    ] = None,
    model: ModelOpt = None,
    params: Annotated[
        str | None,
        typer.Option("--params", help="Parameter count, e.g. 7e9 or 7B (with --layers, --hidden)."),
    ] = None,
    layers: Annotated[
        int | None, typer.Option("--layers", help="Transformer layers (with --params).")
    ] = None,
    hidden: Annotated[
        int | None, typer.Option("--hidden", help="Hidden size = attention width (with --params).")
    ] = None,
    gpu: Annotated[
        str | None,
        typer.Option(
            "--gpu",
            help="h100|h100-pcie|h200|a100|l40s|l4|a10|b200|mi300x or a dense bf16 TFLOP/s number: GPU-hours.",
        ),
    ] = None,
    mfu: Annotated[
        float, typer.Option("--mfu", help="Model FLOPs utilization for GPU-hours.")
    ] = 0.4,
    synthetic: Annotated[
        str | None,
        typer.Option(
            "--synthetic",
            help="Profile a length distribution instead of DATA, e.g. lognormal:median=450,sigma=0.9,n=20000,max=4096,seed=0 (grammar above).",
        ),
    ] = None,
    lengths_file: Annotated[
        str | None,
        typer.Option("--lengths", help="Profile lengths from a file: .txt (one per line) or .npy."),
    ] = None,
    *,
    tok: TokenizeArgs,
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
    from packtool.report import profile as report
    from packtool.report.profile_png import write_png

    data = data or None  # typer gives [] for no DATA
    sources = [x for x in (data, synthetic, lengths_file) if x is not None]
    if len(sources) != 1:
        raise UsageError(
            "give exactly one of DATA, --synthetic SPEC or --lengths FILE, "
            "e.g. packtool profile --synthetic lognormal:median=450,n=20000"
        )
    if data is None:
        given = tok.given("tokenizer", "chat_template", "fmt", "column", "role", "limit")
        if given:
            raise UsageError(f"{', '.join(given)} only apply to DATA, not to --synthetic/--lengths")
    # one number is checked by ProfileConfig (its range in the message); lists and ranges by parse_lens
    lens = [int(pack_len)] if re.fullmatch(r"\s*-?\d+\s*", pack_len) else api.parse_lens(pack_len)
    spec = load_model(model, params, layers, hidden)
    cfg = ProfileConfig(
        pack_len=lens[-1],
        batch_size=batch_size,
        group_window=group_window,
        seed=seed,
        model=spec,
        gpu=api.gpu_spec(gpu) if gpu is not None else None,
        mfu=mfu,
        overflow=overflow,
        pad_to_multiple=pad_to_multiple,
    )
    if plot is not None and not plot.lower().endswith(".png"):
        raise UsageError(f"--plot {plot!r} must end in .png")
    out = Output(json_out)
    unsafe = warn_model(out, model, tok.tokenizer)
    td = None
    if data is not None:
        tcfg = tok.config()
        engine_cfg = tok.engine_config()
        inputs = parse_inputs(data, tcfg.read)  # None: one DATA without ::options
        given = data[0] if inputs is None else inputs
        if engine_cfg.name == "local":  # unusable: one warning, run uncached
            api.check_cache(0 if tok.limit else 2 * api.input_bytes(given))
        with api.engine(engine_cfg) as engine:  # (profile needs the lengths only: Ray stops here)
            if engine is not None:  # no part files: nothing is packed
                engine.keep_tokens = False
            td = api.load_tokenized(given, tcfg, progress=out, seed=seed, engine=engine)
    with out.stage("profiling", spinner=True) as stage:
        if td is not None:
            lengths = td
            # the recommended pack command names every input (the others after DATA) and the
            # seed: it draws the fractional weights' subsamples (and pack's row shuffle)
            seeded = ["--seed", str(seed)] if seed else []
            source = {"data": data[0], "pack_args": [*data[1:], *tok.pack_args(), *seeded]}
            if inputs is not None:
                source["inputs"] = td.input_shares()
        elif synthetic is not None:
            stage.step("drawing lengths")
            lengths = api.synthetic_lengths(synthetic)
            source = {"kind": "synthetic", "spec": synthetic}
        else:
            stage.step("reading lengths")
            lengths = api.read_lengths(lengths_file)
            source = {"kind": "lengths", "path": lengths_file}
        result = api.profile(lengths, cfg, lens=lens, source=source, on_stage=stage.step)
        if unsafe:  # the recommendation below holds only once documents stay apart
            result.notes.append(
                "packing is recommended below only for a setup that keeps this model's packed "
                f"documents apart: {unsafe}"
            )
        if plot is not None:
            stage.step("drawing the PNG")
            write_png(result, plot)
        stage.advance(result.counts["examples"])
    out.report(lambda: report.to_json(result), lambda console: report.render(result, console))
    if plot is not None:
        out.note(f"wrote {plot}")
    if json_out and not out.json_to_stdout:
        out.note(f"wrote {json_out}")
