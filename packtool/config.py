"""Frozen option bundles that the CLI builds and the api functions take. Pure: no heavy imports."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Literal

TrainOn = Literal["assistant", "last", "all"]
OnError = Literal["error", "skip"]


@dataclass(frozen=True)
class ReadConfig:
    """How to read and normalize records."""

    format: str | None = None  # force a format (see formats.FORMATS); None = detect
    split: str = "train"  # for hub ids and save_to_disk DatasetDicts
    columns: tuple[tuple[str, str], ...] = ()  # (our name, their column), e.g. ("messages", "dialog")
    roles: tuple[tuple[str, str], ...] = ()  # (their role, our role), e.g. ("bot", "assistant")
    on_error: OnError = "error"  # bad records: stop with a one-line error, or skip and count them
    limit: int | None = None  # read at most this many records


@dataclass(frozen=True)
class TokenizeConfig:
    """How to turn normalized examples into input_ids and labels."""

    tokenizer: str | None = None  # local folder or hub id (cache only); None = built-in Qwen3
    chat_template: str | None = None  # None/"auto", "tokenizer", a built-in, "trl:NAME" or a file (chat_template.py)
    train_on: TrainOn = "assistant"
    template_date: str | None = None  # what strftime_now() gives templates; None = chat_template.DEFAULT_DATE
    special_in_content: str = "keep"  # control tokens in message text: keep | split | error
    num_proc: int | None = None  # None = all cores (one process for inputs under 4 MiB)
    cache: bool = True
    tokenizer_backend: str = "auto"  # auto | fastokens | hf (see packtool.tokenization.pipeline)
    read: ReadConfig = field(default_factory=ReadConfig)

    def fingerprint_dict(self) -> dict:
        d = asdict(self)
        d.pop("num_proc")
        d.pop("cache")
        return d
