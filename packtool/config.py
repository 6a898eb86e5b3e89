"""Frozen option bundles that the CLI builds and the api functions take; each checks itself.

    ReadConfig      how records are read and normalized          (inspect, profile, pack)
    InputSpec       one input of a mixture: DATA, its ReadConfig, its weight   (profile, pack)
    TokenizeConfig  how examples become input_ids and labels      (inspect, profile, pack)
    ProfileConfig   what `profile` simulates                      (profile)
    PackConfig      how rows are planned and written              (pack)
    VerifyConfig    what `verify` checks and with which kernel    (verify)
    EngineConfig    where profile and pack run: here, or on Ray   (profile, pack)

A bad value raises UsageError in `__post_init__`, as the option does on the command line. Pure:
no heavy imports (the CLI imports this module before `--help`).
"""

from __future__ import annotations

import datetime
from dataclasses import asdict, dataclass, field
from typing import Any

from packtool.errors import UsageError

TRAIN_ON = ("assistant", "last", "all")
ON_ERROR = ("error", "skip")
SPECIAL_IN_CONTENT = ("keep", "split", "error")
TOKENIZER_BACKENDS = ("auto", "fastokens", "hf")
ENGINES = ("local", "ray")
STRATEGIES = ("bfd", "ffd")  # best-fit / first-fit decreasing (packtool.plan)
ORDERS = ("sorted", "random")
OVERFLOWS = ("drop", "truncate", "split", "error")
VERIFY_BACKENDS = ("auto", "flash-attn", "torch-varlen", "sdpa", "eager", "flex", "reference")
DEVICES = ("auto", "cpu", "cuda")
MAX_PACK_LEN = 64**4 - 1  # the planner's 4-level bitset holds 64**4 values (plan.MAX_BITSET_SIZE)
MAX_WEIGHT = 1000  # an input taken more than 1000 times over is a typo, not a mixture


def multiple_of(pack_len: int, n: int) -> None:
    """UsageError unless --pad-to-multiple N >= 1 divides --len (a padded document then fits a row
    exactly when the real one does), naming the nearest valid --len."""
    at_least("--pad-to-multiple", n, 1, " (1 = no padding)")
    if n > 1 and pack_len % n:
        low, high = pack_len // n * n, (pack_len // n + 1) * n
        near = f"--len {low} or --len {high}" if low >= 2 else f"--len {high}"
        raise UsageError(f"--len {pack_len} is not a multiple of --pad-to-multiple {n}; use {near}")


def choice(option: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise UsageError(f"{option} {value!r} is not one of {'|'.join(allowed)}")


def at_least(option: str, value: int | None, low: int, note: str = "") -> None:
    if value is not None and value < low:
        raise UsageError(f"{option} {value} must be >= {low}{note}")


@dataclass(frozen=True)
class ReadConfig:
    """How to read and normalize records."""

    format: str | None = None  # force a format (see formats.FORMATS); None = detect
    split: str = "train"  # for hub ids and save_to_disk DatasetDicts
    columns: tuple[tuple[str, str], ...] = ()  # (our name, their column)
    roles: tuple[tuple[str, str], ...] = ()  # (their role, our role)
    on_error: str = "error"
    limit: int | None = None

    def __post_init__(self) -> None:
        choice("--on-error", self.on_error, ON_ERROR)
        at_least("--limit", self.limit, 1)
        for option, pairs in (("--column", self.columns), ("--role", self.roles)):
            for pair in pairs:
                if len(pair) != 2 or not all(isinstance(x, str) and x for x in pair):
                    raise UsageError(
                        f"{option} {pair!r} is not a pair of names; e.g. {option} messages=dialog"
                    )


@dataclass(frozen=True)
class InputSpec:
    """One input of a mixture, `DATA::key=value,...` (commands.options.parse_inputs): where it is,
    how it is read and its weight (copies = ceil(weight), the last a seeded subsample)."""

    spec: str  # as given on the command line, e.g. "alpaca.json::format=alpaca,weight=0.5"
    data: str  # the file, folder, glob, save_to_disk folder or hub id before "::"
    read: ReadConfig = field(default_factory=ReadConfig)
    weight: float = 1.0

    def __post_init__(self) -> None:
        w = self.weight
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0 < w <= MAX_WEIGHT:
            raise UsageError(
                f"input {self.spec!r}: weight={w!r} must be a number > 0 and at most {MAX_WEIGHT} "
                "(copies of every example), e.g. ::weight=0.5"
            )


@dataclass(frozen=True)
class TokenizeConfig:
    """How to turn normalized examples into input_ids and labels."""

    tokenizer: str | None = None  # local folder or hub id; None = built-in Qwen3
    chat_template: str | None = None  # None/"auto", "tokenizer", a built-in, "trl:NAME" or a file
    train_on: str = "assistant"
    template_date: str | None = None  # strftime_now() in templates; None: DEFAULT_DATE
    special_in_content: str = "keep"
    strict_labels: bool = False
    num_proc: int | None = None  # None = all cores (one process for small inputs)
    cache: bool = True
    tokenizer_backend: str = "auto"
    read: ReadConfig = field(default_factory=ReadConfig)

    def __post_init__(self) -> None:
        choice("--train-on", self.train_on, TRAIN_ON)
        choice("--tokenizer-backend", self.tokenizer_backend, TOKENIZER_BACKENDS)
        choice("--special-in-content", self.special_in_content, SPECIAL_IN_CONTENT)
        at_least("--num-proc", self.num_proc, 1)
        if self.template_date is not None:
            try:
                datetime.date.fromisoformat(self.template_date)
            except (TypeError, ValueError):
                raise UsageError(
                    f"--template-date {self.template_date!r} is not a date like 2026-01-01"
                ) from None

    def fingerprint_dict(self) -> dict:  # (strict_labels refuses a run, never changes its ids)
        skip = ("num_proc", "cache", "strict_labels")
        return {k: v for k, v in asdict(self).items() if k not in skip}


@dataclass(frozen=True)
class ProfileConfig:
    """The options of `packtool profile` that shape the numbers."""

    pack_len: int = 4096
    batch_size: int = 8
    group_window: int = 512
    seed: int = 0
    model: Any = None  # a stats.flops.ModelSpec; None: the reference 7B shape (relative FLOPs)
    gpu: Any = None  # a stats.flops.GpuSpec; None: no GPU-hours
    mfu: float = 0.4
    bins: int = 24  # terminal histogram
    plot_bins: int = 80  # PNG histogram
    overflow: str = "drop"  # as PackConfig
    pad_to_multiple: int = 1

    def __post_init__(self) -> None:
        choice("--overflow", self.overflow, OVERFLOWS)
        if not 1 <= self.pack_len <= MAX_PACK_LEN:
            raise UsageError(f"--len {self.pack_len} must be in 1..{MAX_PACK_LEN}, e.g. --len 4096")
        multiple_of(self.pack_len, self.pad_to_multiple)
        at_least("--batch-size", self.batch_size, 1)
        if self.group_window < self.batch_size:
            raise UsageError(
                f"--group-window {self.group_window} is smaller than --batch-size {self.batch_size}; "
                f"a window must hold at least one batch (e.g. --group-window {64 * self.batch_size})"
            )
        at_least("--seed", self.seed, 0)
        if not 0 < self.mfu <= 1:
            raise UsageError(f"--mfu {self.mfu} must be in (0, 1], e.g. --mfu 0.4")
        if self.gpu is not None and self.model is None:
            raise UsageError(
                "--gpu needs a model size: pass --model CONFIG.json or --params N --layers L --hidden D"
            )


@dataclass(frozen=True)
class PackConfig:
    """The options of `packtool pack` that shape the rows (all recorded in the manifest)."""

    pack_len: int
    strategy: str = "bfd"
    order: str = "sorted"
    max_docs: int = 0  # 0 = no cap
    overflow: str = "drop"
    seed: int = 0
    shuffle: bool = True
    shard_rows: int = 0  # 0 = about 512 MiB of raw token slots per shard (io.shards.rows_per_shard)
    force: bool = False
    pad_to_multiple: int = 1  # each document takes ceil(n/N)*N slots (1 = off); --len % N == 0
    fixed_docs: bool = False  # every row's seq_lengths exactly --max-docs long (zeros at the end)

    def __post_init__(self) -> None:
        if self.pack_len < 2:
            raise UsageError(
                f"--len {self.pack_len} is too small: a row needs at least 2 tokens "
                "(a document's first token never carries loss); use e.g. --len 4096"
            )
        if self.pack_len > MAX_PACK_LEN:
            raise UsageError(f"--len {self.pack_len} exceeds the maximum {MAX_PACK_LEN}")
        choice("--strategy", self.strategy, STRATEGIES)
        choice("--order", self.order, ORDERS)
        choice("--overflow", self.overflow, OVERFLOWS)
        at_least("--max-docs", self.max_docs, 0, " (0 = no cap)")
        at_least("--seed", self.seed, 0)
        if self.shard_rows < 0:
            raise UsageError(f"--shard-rows {self.shard_rows} must be >= 1 (or 0 = automatic)")
        multiple_of(self.pack_len, self.pad_to_multiple)
        if self.fixed_docs and self.max_docs < 1:
            raise UsageError(
                "--fixed-docs needs --max-docs K > 0: every row then lists exactly K documents; "
                "e.g. --fixed-docs --max-docs 16"
            )


@dataclass(frozen=True)
class VerifyConfig:
    """What `packtool verify` checks. The pack folder itself is checked when verify runs."""

    path: str | None = None
    backend: str = "auto"  # packtool.verify.backends
    device: str = "auto"
    rows: int | None = None  # rows tested for isolation; None = DEFAULT_ROWS[device]
    seed: int = 0
    batch_rows: int | None = None  # rows per forward; None = 2 (1 above 8192 tokens)
    model: str | None = None  # isolation through this architecture (packtool.arch)
    allow_download: bool = False  # --model may fetch config.json from the hub

    def __post_init__(self) -> None:
        choice("--backend", self.backend, VERIFY_BACKENDS)
        choice("--device", self.device, DEVICES)
        at_least("--rows", self.rows, 0, " (0 = integrity only)")
        at_least("batch_rows", self.batch_rows, 1)


@dataclass(frozen=True)
class EngineConfig:
    """--engine local|ray, --ray-address, and the workers (--num-proc) of a Ray run. Not recorded:
    both engines write the same pack."""

    name: str = "local"
    address: str | None = None  # None: a local Ray cluster, started and stopped by the run
    workers: int | None = None  # None: every CPU of the cluster

    def __post_init__(self):
        choice("--engine", self.name, ENGINES)
        if self.address is not None and self.name != "ray":
            raise UsageError("--ray-address joins a Ray cluster: it needs --engine ray")
        at_least("--num-proc", self.workers, 1)
