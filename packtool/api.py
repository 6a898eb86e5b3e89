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
