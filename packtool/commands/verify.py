"""`packtool verify DIR`: integrity of every row plus isolation through a real attention kernel."""

from __future__ import annotations

from typing import Annotated

import typer

from packtool import api
from packtool.commands.options import PACK_ARG, AllowDownloadOpt, JsonOpt
from packtool.commands.output import Output
from packtool.config import VerifyConfig
from packtool.errors import UsageError


def verify(
    path: Annotated[str | None, PACK_ARG] = None,
    data: Annotated[
        str | None,
        typer.Argument(
            metavar="DATA",
            help="With --sources: where the data is now, if it moved since "
            "packing (file, folder, glob...). Default: the sources recorded in "
            "the manifest.",
            show_default=False,
        ),
    ] = None,
    backend: Annotated[
        str,
        typer.Option(
            "--backend",
            help="Attention for the isolation check: auto | flash-attn | "
            "torch-varlen | sdpa | eager | flex | reference.",
        ),
    ] = "auto",
    device: Annotated[str, typer.Option("--device", help="auto | cpu | cuda.")] = "auto",
    rows: Annotated[
        int | None,
        typer.Option(
            "--rows",
            help="Rows with >= 2 documents run through the tiny models "
            "(0 = integrity only). Default: 4 on CPU, 16 on CUDA.",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[
        int,
        typer.Option(
            "--seed", help="Seed of the row sample, the tiny models' weights and --sample."
        ),
    ] = 0,
    json_out: JsonOpt = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="List every check, also when all pass.")
    ] = False,
    quiet: Annotated[
        bool,
        typer.Option("--quiet", "-q", help="Only the result line (and each failure): for CI logs."),
    ] = False,
    self_test: Annotated[
        bool,
        typer.Option(
            "--self-test",
            help="Build a small pack in a temporary folder and "
            "verify it (for CI jobs without shards).",
        ),
    ] = False,
    sources: Annotated[
        bool,
        typer.Option(
            "--sources",
            help="Also read the sources again (sha256 against the "
            "manifest), tokenize them with the recorded tokenizer, template and "
            "options (no cache), and compare every document's input_ids and labels "
            "with the shards: `verify PACK --sources [DATA]`.",
        ),
    ] = False,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            help="Prove isolation through this model's own architecture (a folder with "
            "config.json, or a cached hub id; only config.json is read): a tiny random-weight "
            "copy with every layer kind, fed the batch PackedCollator.for_model gives, with "
            "position_ids only, + cu_seq_lens, + seq_idx.",
            show_default=False,
        ),
    ] = None,
    allow_download: AllowDownloadOpt = False,
    sample: Annotated[
        int | None,
        typer.Option(
            "--sample",
            help="With --sources: compare N records picked with --seed instead of all (a "
            "preference pair is one record: both sides; the sources are still tokenized whole).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Prove a pack is safe to train on; exit 0 only if every check passes (1: a check failed, 2: bad
    usage, 3: a check asked for could not be run, e.g. --model on an architecture verify cannot build)."""
    from packtool.report.verify import render_verify, verify_json

    if self_test and path:
        raise UsageError(f"--self-test builds its own pack; drop the folder argument {path!r}")
    if not self_test and not path:
        raise UsageError(
            "give the pack folder to verify, e.g. `packtool verify out/`, or use --self-test"
        )
    if self_test and sources:
        raise UsageError(
            "--self-test builds its pack from data in memory: there are no sources to read; drop --sources"
        )
    if data is not None and not sources:
        raise UsageError(
            f"a second argument ({data!r}) is the data for --sources: `packtool verify {path} --sources "
            f"{data}`"
        )
    if sample is not None and not sources:
        raise UsageError("--sample N picks the records --sources compares; add --sources")
    if sample is not None and sample < 1:
        raise UsageError(f"--sample {sample} must be >= 1 (omit it to compare every record)")
    if allow_download and not model:
        raise UsageError("--allow-download fetches the config.json of --model; add --model")
    if model and self_test:
        raise UsageError("--model checks a pack of yours: drop --self-test, give the pack folder")
    if model and backend != "auto":
        raise UsageError(
            "--model runs the model's own attention (sdpa/eager, flash-attention on CUDA); drop "
            f"--backend {backend}"
        )
    cfg = VerifyConfig(
        path=path,
        backend=backend,
        device=device,
        rows=rows,
        seed=seed,
        model=model,
        allow_download=allow_download,
    )
    out = Output(json_out, quiet=quiet)
    # a spinner on a terminal; no line in logs (nothing counted)
    with out.stage("verifying", spinner=True):
        result = api.self_test(cfg) if self_test else api.verify(cfg)
    if sources:
        import time

        t0 = time.perf_counter()
        result.checks.extend(api.check_sources(path, data, sample=sample, seed=seed, progress=out))
        result.timings["sources"] = time.perf_counter() - t0
    out.report(
        lambda: verify_json(result),
        lambda console: render_verify(
            result, console, verbosity=0 if quiet else 2 if verbose else 1
        ),
    )
    if not result.passed:
        raise typer.Exit(result.exit_code)
