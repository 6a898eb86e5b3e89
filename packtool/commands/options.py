"""Every option and argument the commands share, each defined once.

Single options are `Annotated` aliases (`Data`, `JsonOpt`). The read and tokenize options
(inspect, profile, pack) are one bundle, `TokenizeArgs`, that `@tokenize_options()` adds to a
command's signature (typer has no option groups):

    @tokenize_options()
    def pack(data: Data, ..., *, tok: TokenizeArgs) -> None:
        cfg = tok.config()          # a validated TokenizeConfig

Also here: NAME=NAME option values, the DATA::options of several inputs, the --model warning.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import os
import typing
from dataclasses import dataclass, field
from typing import Annotated, Any

import typer

from packtool.config import EngineConfig, ReadConfig, TokenizeConfig
from packtool.errors import UsageError

Data = Annotated[
    str,
    typer.Argument(
        help="File, folder, glob, save_to_disk folder or cached hub id.", metavar="DATA"
    ),
]
INPUTS_HELP = (
    "File, folder, glob, save_to_disk folder or cached hub id; several make a mixture, each with "
    "optional ::options, e.g. 'b.json::format=alpaca,weight=0.5' (README: Mixtures)."
)
Inputs = Annotated[list[str], typer.Argument(help=INPUTS_HELP, metavar="DATA", show_default=False)]
PACK_ARG = typer.Argument(
    metavar="PACK",
    help="Pack folder written by `packtool pack` (manifest.json + data/).",
    show_default=False,
)
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="The model you will train (folder with config.json, the file, or a cached hub id; "
        "a --tokenizer folder with a config.json is read the same way): one warning line, before "
        "tokenizing, when its architecture cannot keep packed documents apart on this machine "
        "(profile: also its FLOPs).",
        show_default=False,
    ),
]
JsonOpt = Annotated[
    str | None,
    typer.Option(
        "--json",
        help="Write the JSON report to PATH, or - for stdout (then "
        "stdout holds only the JSON and no progress is drawn).",
        show_default=False,
    ),
]

ALLOW_DOWNLOAD = typer.Option(
    "--allow-download",
    help="Fetch from the Hugging Face hub what is not in its local cache: a --tokenizer hub id "
    "(inspect, profile, pack), --model's config.json (verify). By default packtool never goes to "
    "the network for them.",
)
AllowDownloadOpt = Annotated[bool, ALLOW_DOWNLOAD]


def _option(default: Any, *decls: str, help: str, whole_input: bool = False, **kw: Any):
    """A TokenizeArgs field and its option; `whole_input`: not for `inspect` (one record)."""
    return field(
        default=default,
        metadata={
            "option": typer.Option(*decls, help=help, **kw),
            "flag": decls[0],
            "whole_input": whole_input,
        },
    )


@dataclass(frozen=True)
class TokenizeArgs:
    """The tokenization options as given on the command line; `config()` makes them a TokenizeConfig."""

    tokenizer: str | None = _option(
        None,
        "--tokenizer",
        "-t",
        help="Local tokenizer folder or cached hub id. Default: built-in Qwen3.",
    )
    chat_template: str | None = _option(
        None,
        "--chat-template",
        help="auto (default: the tokenizer's template if it marks generation, else TRL's "
        "training version of it, else the tokenizer's located by render diffs) | tokenizer | chatml-train | "
        "trl:NAME (a template TRL ships) | FILE.",
        show_default=False,
    )
    train_on: str = _option(
        "assistant", "--train-on", help="Which turns carry loss: assistant|last|all."
    )
    fmt: str | None = _option(
        None,
        "--format",
        "-f",
        help="Force the record format: messages|prompt-completion|text|alpaca|sharegpt|firefly|"
        "preference (chosen/rejected pairs, packed as pairs)|chosen-sft (SFT on the chosen answers).",
    )
    column: list[str] | None = _option(
        None,
        "--column",
        help="Map a column: OURS=THEIRS, e.g. messages=dialog. Repeatable.",
        metavar="OURS=THEIRS",
    )
    role: list[str] | None = _option(
        None,
        "--role",
        help="Map a role: THEIRS=OURS, e.g. bot=assistant. Repeatable.",
        metavar="THEIRS=OURS",
    )
    split: str = _option("train", "--split", help="Split of a hub id or DatasetDict folder.")
    on_error: str = _option(
        "error",
        "--on-error",
        help="Bad records: error (stop) or skip (count and list).",
        whole_input=True,
    )
    num_proc: int | None = _option(
        None,
        "--num-proc",
        help="Tokenizer processes; N is used as given. Default: all cores, or one for inputs "
        "under 4 MiB. Pre-tokenized input is always read in one process. pack writes the shards of a "
        "large pack (2^26 token slots or more) in up to N processes, one per 2 cores.",
        whole_input=True,
    )
    no_cache: bool = _option(
        False, "--no-cache", help="Tokenize again even if a cached result exists.", whole_input=True
    )
    limit: int | None = _option(None, "--limit", help="Read at most N records.", whole_input=True)
    tokenizer_backend: str = _option(
        "auto",
        "--tokenizer-backend",
        help="auto (fastokens when it gives ids and labels identical to the "
        "tokenizers path on this run's first examples and on the first examples of each of its files, "
        "else hf) | fastokens | hf.",
    )
    template_date: str | None = _option(
        None,
        "--template-date",
        help="Date (YYYY-MM-DD) that templates writing today's date get, so packs are "
        "reproducible. Default: 2026-01-01.",
        show_default=False,
    )
    special_in_content: str = _option(
        "keep",
        "--special-in-content",
        help="Control tokens inside message text (e.g. a typed <|im_start|>): keep "
        "(as control tokens, like apply_chat_template; counted and announced) | split (tokenize as plain text) | "
        "error (refuse the record).",
    )
    strict_labels: bool = _option(
        False,
        "--strict-labels",
        help="Refuse data that trains text it does not contain (an empty block the template "
        "writes, an empty assistant turn, an example without loss) or whose reasoning the template "
        "drops: one line naming the file, record and kind (else these are counted and warned).",
    )
    allow_download: bool = field(
        default=False,
        metadata={"option": ALLOW_DOWNLOAD, "flag": "--allow-download", "whole_input": False},
    )
    engine: str = _option(
        "local",
        "--engine",
        help="local (this machine) | ray (Ray workers: the same pack, byte for byte; "
        "needs pip install 'packtool\\[ray]'). With ray, --num-proc is the number of workers.",
        whole_input=True,
    )
    ray_address: str | None = _option(
        None,
        "--ray-address",
        help="Join a running Ray cluster (auto | HOST:PORT | ray://HOST:PORT) instead of starting "
        "a local one; needs --engine ray.",
        whole_input=True,
        show_default=False,
    )

    def config(self, **fixed: Any) -> TokenizeConfig:
        """The TokenizeConfig of these values (`fixed` replaces some, e.g. inspect's num_proc=1)."""
        v = dataclasses.replace(self, **fixed)
        read = ReadConfig(
            format=v.fmt,
            split=v.split,
            columns=name_pairs(v.column, "--column"),
            roles=name_pairs(v.role, "--role"),
            on_error=v.on_error,  # type: ignore[arg-type]
            limit=v.limit,
        )
        cfg = TokenizeConfig(
            tokenizer=v.tokenizer,
            chat_template=v.chat_template,
            train_on=v.train_on,  # type: ignore[arg-type]
            num_proc=v.num_proc,
            cache=not v.no_cache,
            tokenizer_backend=v.tokenizer_backend,
            template_date=v.template_date,
            special_in_content=v.special_in_content,
            strict_labels=v.strict_labels,
            read=read,
        )
        if v.allow_download:  # read by tokenization.loading, in this process and its workers
            os.environ["PACKTOOL_ALLOW_DOWNLOAD"] = "1"
        return cfg

    def engine_config(self) -> EngineConfig:
        """--engine, --ray-address and, for Ray, --num-proc as its workers (validated)."""
        return EngineConfig(self.engine, self.ray_address, self.num_proc)

    def pack_args(self) -> list[str]:
        """The options set away from their defaults (but those that do not change what is packed),
        as words for the recommended `packtool pack` command."""
        words: list[str] = []
        for name, f in _FIELDS.items():
            value = getattr(self, name)
            if (
                name in ("num_proc", "no_cache", "allow_download")
                or value == f.default
                or value in (None, [])
            ):
                continue
            if value is True:  # a switch: `--strict-labels True` would read True as DATA
                words.append(flag(name))
                continue
            for v in value if isinstance(value, list) else [value]:
                words += [flag(name), str(v)]
        return words

    def given(self, *names: str) -> list[str]:
        """The flags of the options among `names` that were set (to a non-empty value)."""
        return [flag(n) for n in names if getattr(self, n)]


def flag(name: str) -> str:
    return _FIELDS[name].metadata["flag"]


_FIELDS = {f.name: f for f in dataclasses.fields(TokenizeArgs)}
_HINTS = typing.get_type_hints(TokenizeArgs)


def tokenize_options(whole_input: bool = True):
    """Add the TokenizeArgs options to a command (after its own), passed as one TokenizeArgs `tok`;
    `whole_input=False` (inspect) leaves out the whole_input ones."""

    def decorate(fn):
        own = [
            p for p in inspect.signature(fn, eval_str=True).parameters.values() if p.name != "tok"
        ]
        bundle = [
            inspect.Parameter(
                name,
                inspect.Parameter.KEYWORD_ONLY,
                default=f.default,
                annotation=Annotated[_HINTS[name], f.metadata["option"]],
            )
            for name, f in _FIELDS.items()
            if whole_input or not f.metadata["whole_input"]
        ]

        @functools.wraps(fn)
        def command(*args, **kwargs):
            values = {p.name: kwargs.pop(p.name) for p in bundle if p.name in kwargs}
            return fn(*args, **kwargs, tok=TokenizeArgs(**values))

        params = own + bundle
        command.__signature__ = inspect.Signature(params, return_annotation=None)
        command.__annotations__ = {p.name: p.annotation for p in params}
        return command

    return decorate


def name_pairs(values: list[str] | None, option: str) -> tuple[tuple[str, str], ...]:
    """The (NAME, NAME) pairs of a repeated NAME=NAME option (--column, --role)."""
    out = []
    for v in values or []:
        left, sep, right = v.partition("=")
        if not sep or not left or not right:
            raise UsageError(f"{option} {v!r} is not NAME=NAME; e.g. {option} messages=dialog")
        out.append((left.strip(), right.strip()))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# several inputs: DATA::key=value,key=value (README "Mixtures: several inputs")

INPUT_SEP = "::"
INPUT_KEYS = ("format", "column", "role", "split", "limit", "weight")
# options that hold for the whole pack (one tokenizer, one template per pack): never per input
GLOBAL_KEYS = (
    "tokenizer",
    "chat-template",
    "train-on",
    "template-date",
    "special-in-content",
    "tokenizer-backend",
    "on-error",
    "num-proc",
    "no-cache",
    "allow-download",
)


def parse_inputs(data: list[str], read: ReadConfig):
    """The InputSpecs of DATA arguments, or None for one DATA without `::` (read as it always was).

        chats.jsonl                                   the global read options, weight 1
        'alpaca.json::format=alpaca'                  --format alpaca for this input only
        'x.parquet::column=messages=dialog,role=bot=assistant,weight=2'

    A key given on an input replaces that option's global value for it (column and role: the whole
    list, from the input's repeated keys). Unknown keys, bad values and per-input tokenizer options
    are UsageErrors naming the input and the fix."""
    from packtool.config import InputSpec

    if len(data) == 1 and INPUT_SEP not in data[0]:
        return None
    out = []
    for spec in data:
        path, _, opts = spec.partition(INPUT_SEP)
        if not path:
            raise UsageError(f"input {spec!r}: nothing before '::'; e.g. 'data.json::weight=0.5'")
        own: dict[str, list[str]] = {}
        for item in opts.split(",") if opts else []:
            key, sep, value = item.strip().partition("=")
            key = key.strip().replace("_", "-")
            if key in GLOBAL_KEYS:
                raise UsageError(
                    f"input {spec!r}: {key} is a global option (one tokenizer and template per "
                    f"pack); pass --{key} once, before or after the inputs"
                )
            if key not in INPUT_KEYS:
                raise UsageError(
                    f"input {spec!r}: unknown key {key!r}; an input takes "
                    f"{', '.join(k + '=' for k in INPUT_KEYS)} e.g. 'data.json::format=alpaca,weight=0.5'"
                )
            if not sep or not value.strip():
                raise UsageError(f"input {spec!r}: {key} has no value; write {key}=VALUE")
            if key not in ("column", "role") and key in own:
                raise UsageError(f"input {spec!r}: {key} is given twice; give it once")
            own.setdefault(key, []).append(value.strip())
        kw: dict = {k: own[k][0] for k in ("format", "split") if k in own}
        for key, name, example in (
            ("column", "columns", "column=messages=dialog"),
            ("role", "roles", "role=bot=assistant"),
        ):
            if key in own:
                kw[name] = tuple(_input_pair(spec, key, v, example) for v in own[key])
        if "limit" in own:
            kw["limit"] = _number(spec, "limit", own["limit"][0], int, "limit=1000")
            if kw["limit"] < 1:
                raise UsageError(f"input {spec!r}: limit={kw['limit']} must be >= 1")
        weight = _number(spec, "weight", own.get("weight", ["1"])[0], float, "weight=0.5")
        try:
            out.append(InputSpec(spec, path, dataclasses.replace(read, **kw), weight))
        except UsageError as e:
            msg = str(e)
            raise UsageError(
                msg if msg.startswith("input ") else f"input {spec!r}: {msg}"
            ) from None
    return out


def _input_pair(spec: str, key: str, value: str, example: str) -> tuple[str, str]:
    left, sep, right = value.partition("=")
    if not sep or not left.strip() or not right.strip():
        raise UsageError(f"input {spec!r}: {key}={value!r} is not NAME=NAME; e.g. ::{example}")
    return left.strip(), right.strip()


def _number(spec: str, key: str, text: str, kind, example: str):
    try:
        return kind(text)
    except ValueError:
        raise UsageError(
            f"input {spec!r}: {key}={text!r} is not a number; e.g. ::{example}"
        ) from None


def warn_model(out, model: str | None, tokenizer: str | None) -> str | None:
    """Say api.model_warning on stderr, before any tokenizing; return it (for profile's advice)."""
    from packtool import api

    text = api.model_warning(model, tokenizer)
    if text:
        out.console.print(f"[yellow]warning:[/] {text}", soft_wrap=True, highlight=False)
    return text
