"""The Python entry points; the CLI (packtool.commands) reaches the library only through them.

Light at import: only packtool.config (pure) is imported here, so the CLI imports this module before
`--help`; every heavy module (numpy, pyarrow, tokenizers, torch) is imported on first use. The
configs are re-exported (`from packtool.api import TokenizeConfig, pack`). The entry points that
only forward (`_FORWARD`) are the named function itself, imported on first use.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from functools import partial
from importlib import import_module
from typing import TYPE_CHECKING

from packtool.config import (
    EngineConfig,
    InputSpec,
    PackConfig,
    ProfileConfig,
    ReadConfig,
    TokenizeConfig,
    VerifyConfig,
)
from packtool.errors import UsageError

if TYPE_CHECKING:
    from packtool.data.tokenized import TokenizedData
    from packtool.progress import Reporter

# name here: (module, its name there)
_FORWARD = {
    "TokenizedData": ("packtool.data.tokenized", "TokenizedData"),
    "inspect_example": ("packtool.inspecting", "inspect_example"),
    # --len values: 4096 | 2048,4096,8192 | 1024-8192 (powers of two between) | 1024:8192:1024
    "parse_lens": ("packtool.stats.sweep", "parse_lens"),
    "synthetic_lengths": ("packtool.stats.synthetic", "synthetic_lengths"),  # --synthetic SPEC
    "read_lengths": ("packtool.stats.synthetic", "read_lengths"),  # --lengths .txt | .npy
    "model_from_config": ("packtool.stats.flops", "model_from_config"),  # config.json's shape
    "model_from_params": ("packtool.stats.flops", "model_from_params"),  # params, layers, hidden
    "gpu_spec": ("packtool.stats.flops", "gpu_spec"),  # a GPU by name or its dense bf16 TFLOP/s
    "check_cache": ("packtool.tokenization.cache", "check_usable"),  # else a temp folder
    "verify": ("packtool.verify.run", "verify"),
    "self_test": ("packtool.verify.selftest", "run_self_test"),  # verify --self-test
    "check_sources": ("packtool.verify.sources", "check_sources"),  # verify --sources
    "write_sample": ("packtool.demo_data", "write_sample"),  # the built-in synthetic chat set
    "export": ("packtool.export", "export_pack"),  # a pack in another trainer's format (nemo)
    "read_model_config": ("packtool.arch.config", "read_config"),  # --model's config.json, path
}

__all__ = [
    "EngineConfig",
    "engine",
    "PackConfig",
    "ProfileConfig",
    "ReadConfig",
    "InputSpec",
    "TokenizeConfig",
    "VerifyConfig",
    "load_tokenized",
    "profile",
    "input_bytes",
    "check_output",
    "pack",
    *_FORWARD,
]


def __getattr__(name: str):
    if name in _FORWARD:
        module, attr = _FORWARD[name]
        return getattr(import_module(module), attr)
    raise AttributeError(f"module 'packtool.api' has no attribute {name!r}")


@contextmanager
def engine(cfg: EngineConfig = EngineConfig()):
    """Where load_tokenized and pack run: None for this machine, or a cluster.session.Session on a
    Ray cluster (joined at cfg.address, or started here and stopped at the end)."""
    if cfg.name == "local":
        yield None
        return
    from packtool.cluster.session import Session  # (imports no Ray: Session checks for it)

    with Session(cfg.address, cfg.workers) as session:
        yield session


def load_tokenized(
    data: str | list[InputSpec],
    cfg: TokenizeConfig,
    progress: bool | Reporter = True,
    seed: int = 0,
    engine=None,
    pack: PackConfig | None = None,
) -> TokenizedData:
    """Read, normalize and tokenize `data` (cached), or load it as is when it is pre-tokenized.

    `data`: one input, or a mixture's InputSpecs (weighted with `seed`). `progress`: a Reporter,
    True or False. `engine`: what `engine()` gave; on Ray the tokens stay on the cluster (`.rows`,
    `.table` None). `pack`: the options of the local pack this data goes to next, whose first-use
    costs (pack.warm) are paid while tokenizing waits for the fast backend to build
    (pipeline._tokenize's idle.run; with no build, at the pack's first use). The result's
    `options` are what the manifest records and `verify --sources` tokenizes again from: the
    tokenize options, the input as given and the keys the tokenizer recorded."""
    from packtool import idle

    one = isinstance(data, str)
    warm = None
    if pack is not None and engine is None:
        from packtool.pack import warm as warm_pack

        warm = partial(warm_pack, pack)
    with idle.meanwhile(warm):
        if engine is not None:
            if not one:
                raise UsageError(
                    "--engine ray packs one input (a file, folder or glob); a mixture runs with "
                    "--engine local"
                )
            from packtool.cluster.tokenize import load_tokenized as _load_on_ray

            td = _load_on_ray(data, cfg, engine, progress=progress)
        elif not one:
            from packtool.tokenization.mixture import load_mixture

            td = load_mixture(list(data), cfg, seed=seed, progress=progress)
        else:
            from packtool.tokenization.pipeline import load_tokenized as _load

            td = _load(data, cfg, progress=progress)
    given = data if one else [s.spec for s in data]
    td.options = {**cfg.fingerprint_dict(), "input": given, **(td.options or {})}
    # preference pairs marked as pairs; mixed with SFT records, in a mixture or on Ray refused
    pair_files = sorted(p for p, f in td.formats.items() if f.format == "preference")
    if not pair_files and td.format != "preference":
        return td
    if len(pair_files) != len(td.formats):
        sft = sorted(p for p, f in td.formats.items() if f.format != "preference")
        raise UsageError(
            f"{pair_files[0]} holds preference pairs but {sft[0]} does not: pack them as separate "
            "inputs (or pass --format chosen-sft to train SFT on every file's chosen answers)"
        )
    if not one or engine is not None:
        where = "a mixture" if not one else "--engine ray"
        raise UsageError(
            f"preference pairs in {where}: packtool keeps pairs whole with --engine local and one "
            "input (a file, folder or glob) only; pack them that way"
        )
    return td.as_pairs()  # td itself marked: task "preference", prompt_lengths (pack/run.py)


def profile(
    data_or_lengths, cfg: ProfileConfig, *, lens=None, source: dict | None = None, on_stage=None
):
    """The ProfileResult of TokenizedData or bare example lengths at cfg.pack_len, or at each of
    `lens` (a list or a --len text): then at the --len the advice picks, the per-len table attached."""
    from packtool.profiler import profile_lens

    lens = [cfg.pack_len] if lens is None else lens
    return profile_lens(data_or_lengths, cfg, lens, source=source, on_stage=on_stage)


def input_bytes(data: str | list[InputSpec]) -> int:
    """Bytes of a local input file or folder (0 for a hub id or glob), summed over a mixture's
    inputs: the base of the free-space checks."""
    if not isinstance(data, str):
        return sum(input_bytes(s.data) for s in data if s.read.limit is None)
    if os.path.isfile(data):
        return os.path.getsize(data)
    # (a path that is not a folder walks no files)
    paths = (os.path.join(d, n) for d, _, names in os.walk(data) for n in names)
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p))


def check_output(
    out: str, force: bool, need_bytes: int = 0, estimate: str = "about the input's size"
) -> None:
    """Before tokenizing: UsageError when `out` may not be replaced (--force: only a pack), or its
    folder cannot be written or lacks about `need_bytes` of space (`estimate`: what that counts)."""
    from pathlib import Path

    from packtool.io.shards import check_space, check_target

    check_target(Path(out), force)
    check_space(Path(out), need_bytes, estimate)


def pack(data: TokenizedData, cfg: PackConfig, out: str, progress=None, num_proc=None):
    """Pack tokenized data into `out` (a PackResult). `progress(rows written, rows total)`;
    `num_proc`: writer processes allowed (None: all cores; a large pack uses one per 2 cores)."""
    from packtool.pack import pack_tokenized

    rows = data.rows  # on a Ray cluster (--engine ray): written there
    procs = num_proc or os.cpu_count() or 1
    result = pack_tokenized(data, cfg, out, progress, writer=rows and rows.write, procs=procs)
    if rows is not None:
        result.engine = rows.report()
    return result


def model_warning(model: str | None, tokenizer: str | None) -> str | None:
    """The early warning for --model (or a --tokenizer folder with a config.json), or None;
    packtool.arch is imported only when there is a config to judge."""
    folder = os.path.expanduser(tokenizer) if tokenizer else None
    if not model and not (folder and os.path.isfile(os.path.join(folder, "config.json"))):
        return None
    from packtool.arch.config import model_warning as _model_warning

    return _model_warning(model, tokenizer)
