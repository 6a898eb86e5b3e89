"""The manifest's recorded options -> the TokenizeConfig that tokenizes the pack's sources again.

    manifest["options"] (JSON)                          TokenizeConfig (frozen, nested dataclasses)
      "train_on": "last"                                 train_on="last"
      "read": {"format": "alpaca",                       read=ReadConfig(format="alpaca",
               "columns": [["messages", "dialog"]]}                      columns=(("messages", "dialog"),))
      "input": "data/", "labels_from": "..."             not fields (EXTRA_OPTIONS): the DATA pack was given,
                                                         where pre-tokenized labels came from
      "cache", "num_proc"                                cache=False, num_proc=None: always recomputed
      a key this packtool does not know ───────────────▶ Stop(OPTIONS): verify with the version that packed
      a key not recorded (an older manifest) ──────────▶ the dataclass default, listed in the message
      inputs[k] {data, options, weight} (a mixture) ──▶ InputSpec(data, ReadConfig(**options), weight)

The cache is off so that a poisoned tokenization cache cannot hide damage (the sources layer of
docs/ARCHITECTURE.md, "Verify").
"""

from __future__ import annotations

import dataclasses

from packtool.verify import Check
from packtool.verify.sources.names import OPTIONS, Stop

# keys of manifest["options"] that are not TokenizeConfig fields: the DATA argument as given to
# pack, and where the labels of pre-tokenized input came from
EXTRA_OPTIONS = {"input", "labels_from"}


def _tuples(v):
    """JSON lists back to the tuples a frozen config holds (columns, roles: pairs)."""
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _build(cls, d: dict, where: str, missing: list[str]):
    """`cls(**d)` for a (nested) frozen dataclass: keys this packtool does not know are refused,
    missing ones take the dataclass's default (and are listed in `missing`)."""
    import packtool

    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = sorted(set(d) - set(fields) - (EXTRA_OPTIONS if where == "options" else set()))
    if unknown:
        raise Stop(
            OPTIONS,
            f"manifest {where}.{unknown[0]} = {d[unknown[0]]!r} is unknown to packtool "
            f"{packtool.__version__}: the pack was made by a packtool with options this one does not have; "
            f"verify with that version (or a newer one)",
            {"unknown": [f"{where}.{k}" for k in unknown]},
        )
    kw = {}
    for name, f in fields.items():
        default = (
            f.default
            if f.default is not dataclasses.MISSING
            else (f.default_factory() if f.default_factory is not dataclasses.MISSING else None)
        )
        if name not in d:
            missing.append(f"{where}.{name}")
            continue
        v = d[name]
        if v is None and default is not None:  # "not applicable" (train_on of pre-tokenized input)
            continue
        if dataclasses.is_dataclass(default) and isinstance(v, dict):
            v = _build(type(default), v, f"{where}.{name}", missing)
        kw[name] = _tuples(v)
    try:
        return cls(**kw)
    except (TypeError, ValueError) as e:
        raise Stop(OPTIONS, f"manifest {where} cannot be used: {e}") from None


def tokenize_config_from(manifest: dict):
    """(TokenizeConfig, keys not recorded) that re-tokenizes the pack's sources: the recorded
    options with the cache off. Raises Stop for options this packtool does not know."""
    from packtool.config import TokenizeConfig

    options = manifest.get("options")
    if not isinstance(options, dict):
        raise Stop(
            OPTIONS,
            f"manifest options is {options!r}, not an object: the pack cannot be tokenized again",
        )
    d = {k: v for k, v in options.items() if k not in EXTRA_OPTIONS}
    missing: list[str] = []
    if "tokenizer" not in d:  # packed before the options were recorded: the tokenizer's name
        name = (manifest.get("tokenizer") or {}).get("name")
        d["tokenizer"] = None if name is None or "built-in" in str(name) else name
    cfg = _build(TokenizeConfig, d, "options", missing)
    cfg = dataclasses.replace(cfg, cache=False, num_proc=None)
    # not recorded (they change no id or label): the cache, the workers, --strict-labels
    unrecorded = ("options.cache", "options.num_proc", "options.strict_labels")
    return cfg, [m for m in missing if m not in unrecorded]


def options_text(cfg) -> str:
    """The options that differ from a default TokenizeConfig, e.g. 'train_on last, read.format alpaca'."""
    from packtool.config import TokenizeConfig

    base = dataclasses.asdict(TokenizeConfig())

    def flat(d, p=""):
        return [(f"{p}{k}", v) for k, v in d.items() if not isinstance(v, dict)] + [
            x for k, v in d.items() if isinstance(v, dict) for x in flat(v, f"{p}{k}.")
        ]

    want = dict(flat(base))
    diff = [
        f"{k} {v!r}"
        for k, v in flat(dataclasses.asdict(cfg))
        if k not in ("cache", "num_proc") and want.get(k) != v
    ]
    return "tokenize options rebuilt from the manifest: " + (
        ", ".join(diff) if diff else "all defaults"
    )


def options_check(manifest: dict):
    """(Check OPTIONS, TokenizeConfig): the config rebuilt, and what it differs in from the defaults."""
    cfg, missing = tokenize_config_from(manifest)
    note = f"; not recorded, defaults used: {', '.join(missing)}" if missing else ""
    return Check(
        OPTIONS,
        True,
        f"{options_text(cfg)}; cache off{note}",
        {"options": dataclasses.asdict(cfg), "defaults": missing},
    ), cfg


def input_specs_from(manifest: dict, cfg, locate=lambda data: data) -> list:
    """The InputSpecs of a mixture pack (manifest `inputs`): each input's recorded data (through
    `locate`, which resolves relative paths), its ReadConfig rebuilt from inputs[k].options (keys this
    packtool does not know: Stop(OPTIONS)) and its weight; [] for a single-input pack."""
    from packtool.config import InputSpec, ReadConfig
    from packtool.errors import PacktoolError

    inputs = manifest.get("inputs")
    if not inputs:
        return []
    if not isinstance(inputs, list) or not all(isinstance(e, dict) for e in inputs):
        raise Stop(
            OPTIONS, "manifest inputs is not a list of objects: the mixture cannot be rebuilt"
        )
    specs = []
    for k, e in enumerate(inputs, 1):
        opts = e.get("options")
        if not isinstance(opts, dict) or not e.get("data") or "weight" not in e:
            raise Stop(
                OPTIONS,
                f"manifest inputs[{k - 1}] records no data, options or weight: input {k} cannot be "
                "read again",
            )
        read = _build(ReadConfig, opts, f"inputs[{k - 1}].options", [])
        try:
            specs.append(
                InputSpec(
                    str(e.get("spec") or e["data"]), locate(str(e["data"])), read, e["weight"]
                )
            )
        except PacktoolError as err:
            raise Stop(OPTIONS, f"manifest inputs[{k - 1}]: {err}") from None
    return specs
