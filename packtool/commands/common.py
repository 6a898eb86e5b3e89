"""What the commands share besides options and output: NAME=NAME option values, the DATA::options
of several inputs, the --model warning."""

from __future__ import annotations

from packtool.config import ReadConfig
from packtool.errors import UsageError


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
GLOBAL_KEYS = {
    "tokenizer": "--tokenizer",
    "chat-template": "--chat-template",
    "train-on": "--train-on",
    "template-date": "--template-date",
    "special-in-content": "--special-in-content",
    "tokenizer-backend": "--tokenizer-backend",
    "on-error": "--on-error",
    "num-proc": "--num-proc",
    "no-cache": "--no-cache",
    "allow-download": "--allow-download",
}


def parse_inputs(data: list[str], read: ReadConfig):
    """The InputSpecs of DATA arguments, or None for one DATA without `::` (read as it always was).

        chats.jsonl                                   the global read options, weight 1
        'alpaca.json::format=alpaca'                  --format alpaca for this input only
        'x.parquet::column=messages=dialog,role=bot=assistant,weight=2'

    A key given on an input replaces that option's global value for it (column and role: the whole
    list, from the input's repeated keys). Unknown keys, bad values and per-input tokenizer options
    are UsageErrors naming the input and the fix."""
    import dataclasses

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
                    f"pack); pass {GLOBAL_KEYS[key]} once, before or after the inputs"
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
    """Say packtool.arch's early warning for --model (or a --tokenizer model folder) on stderr,
    before any tokenizing; return it (profile puts it beside its recommendation)."""
    from packtool import api

    text = api.model_warning(model, tokenizer)
    if text:
        out.console.print(f"[yellow]warning:[/] {text}", soft_wrap=True, highlight=False)
    return text
