"""The Python entry points that the CLI calls. Heavy modules are imported inside the functions."""

from __future__ import annotations

from packtool.config import TokenizeConfig
from packtool.data import TokenizedData


def load_tokenized(data: str, cfg: TokenizeConfig, progress: bool = True) -> TokenizedData:
    """Read, normalize and tokenize `data` (cached), or load it as is when it is pre-tokenized."""
    from packtool.tokenization.pipeline import load_tokenized as _load

    return _load(data, cfg, progress=progress)


def inspect_example(data: str, cfg: TokenizeConfig, index: int = 0) -> dict:
    """One example as the trainer will see it: format, conversation, tokens and loss runs."""
    from packtool.inspecting import inspect_example as _inspect

    return _inspect(data, cfg, index)


def profile(data: TokenizedData, cfg, source: dict | None = None, on_stage=None):
    """Length statistics, strategy table and FLOP projection of tokenized data (a ProfileResult).

    `cfg` is a `packtool.profiler.ProfileConfig`; for bare lengths use `profiler.profile_lengths`.
    """
    from packtool.profiler import profile_data

    return profile_data(data, cfg, source=source, on_stage=on_stage)


def pack(data: TokenizedData, cfg, out: str, progress=None):
    """Pack tokenized data into `out` (a PackResult). `cfg` is a `packtool.packer.PackConfig`."""
    from packtool.packer import pack_tokenized

    return pack_tokenized(data, cfg, out, progress=progress)


def verify(cfg):
    """Integrity and isolation checks of a pack (a VerifyResult). `cfg` is a `verify.run.VerifyConfig`."""
    from packtool.verify.run import verify as _verify

    return _verify(cfg)
