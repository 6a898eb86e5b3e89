"""The pack's sources read again: the recorded options, files, tokenizer and template checked
against the manifest, then tokenized again; and the checks' names, in report order.

    manifest["options"] (JSON)                 TokenizeConfig (frozen, nested dataclasses)
      "read": {"format": "alpaca",             read=ReadConfig(format="alpaca",
               "columns": [["messages", "d"]]}               columns=(("messages", "d"),))
      "input", "labels_from"                   not fields (EXTRA_OPTIONS)
      "cache", "num_proc"                      cache=False, num_proc=None: always recomputed
      a key this packtool does not know ─────▶ Stop(OPTIONS): verify with the version that packed
      a key not recorded (an older manifest) ▶ the dataclass default, listed in the message
      inputs[k] {data, options, weight} ─────▶ InputSpec(data, ReadConfig(**options), weight)

    recorded_data: DATA as given to pack (or the one source, or their common folder); a relative
    path is found here or beside the pack folder (in both: the one with the recorded sha256)
    sources.resolve_sources(DATA) [path, size, sha256]  == manifest sources    files_check
    load_spec(cfg.tokenizer).files_hash                 == tokenizer.files_hash tokenizer_check
    pipeline.load_tokenized(DATA, cfg) ──▶ TokenizedData (the path pack took; cache off)
        tokenizer.chat_template_hash                    == manifest's          template_check
    Provenance(DATA, read)(source_index) ──▶ "chats.jsonl:12" | "data.parquet record 3" (lazily)

    Stop(name, message) ──raised by any stage──▶ check_sources: Check(name, failed, message), then
                                                 "not run: NAME failed" (skipped) for the rest of ORDER
"""

from __future__ import annotations

import dataclasses
import os

import packtool
from packtool.config import InputSpec, ReadConfig, TokenizeConfig
from packtool.errors import PacktoolError
from packtool.verify import Check
from packtool.verify.audit import section

OPTIONS = "sources options"
FILES = "sources sha256"
TOKENIZER = "sources tokenizer"
TEMPLATE = "sources chat template"
ACCOUNT = "sources accounting"
TOKENS = "sources tokens"
ORDER = (OPTIONS, FILES, TOKENIZER, TEMPLATE, ACCOUNT, TOKENS)
# keys of manifest["options"] that are not TokenizeConfig fields: the DATA argument as given to
# pack, and where the labels of pre-tokenized input came from
EXTRA_OPTIONS = {"input", "labels_from"}


class Stop(Exception):
    """A check failed in a way that leaves nothing to compare: the remaining checks are skipped."""

    def __init__(self, name: str, message: str, evidence: dict | None = None):
        super().__init__(message)
        self.check = Check(name, False, message, evidence or {})


def _tuples(v):
    """JSON lists back to the tuples a frozen config holds (columns, roles: pairs)."""
    return tuple(_tuples(x) for x in v) if isinstance(v, list) else v


def _build(cls, d: dict, where: str, missing: list[str]):
    """`cls(**d)` for a (nested) frozen dataclass: keys this packtool does not know are refused,
    missing ones take the dataclass's default (and are listed in `missing`)."""
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
        if name not in d:
            missing.append(f"{where}.{name}")
            continue
        default = f.default
        if f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        v = d[name]
        if v is None and default not in (None, dataclasses.MISSING):  # "not applicable"
            continue
        if dataclasses.is_dataclass(default) and isinstance(v, dict):
            v = _build(type(default), v, f"{where}.{name}", missing)
        kw[name] = _tuples(v)
    try:
        return cls(**kw)
    except (TypeError, ValueError) as e:
        raise Stop(OPTIONS, f"manifest {where} cannot be used: {e}") from None


def tokenize_config_from(manifest: dict):
    """(TokenizeConfig, keys not recorded): the recorded options with the cache off."""
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

    def flat(d, p=""):
        return [(f"{p}{k}", v) for k, v in d.items() if not isinstance(v, dict)] + [
            x for k, v in d.items() if isinstance(v, dict) for x in flat(v, f"{p}{k}.")
        ]

    want = dict(flat(dataclasses.asdict(TokenizeConfig())))
    diff = [
        f"{k} {v!r}"
        for k, v in flat(dataclasses.asdict(cfg))
        if k not in ("cache", "num_proc") and want.get(k) != v
    ]
    return f"tokenize options rebuilt from the manifest: {', '.join(diff) or 'all defaults'}"


def options_check(manifest: dict):
    """(Check OPTIONS, TokenizeConfig): the config rebuilt, and what it differs in from the defaults."""
    cfg, missing = tokenize_config_from(manifest)
    note = f"; not recorded, defaults used: {', '.join(missing)}" if missing else ""
    ev = {"options": dataclasses.asdict(cfg), "defaults": missing}
    return Check(OPTIONS, True, f"{options_text(cfg)}; cache off{note}", ev), cfg


def input_specs_from(manifest: dict, pack: str, folder: str | None) -> list:
    """The InputSpecs of a mixture pack (manifest `inputs`; [] for a single input): each input's
    recorded data located from `folder` or beside `pack` (locate_recorded), its ReadConfig rebuilt
    from inputs[k].options, its weight."""
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
        data = str(e["data"])
        located = locate_recorded(data, pack, folder, e.get("files"), read.split)
        try:
            specs.append(InputSpec(str(e.get("spec") or data), located, read, e["weight"]))
        except PacktoolError as err:
            raise Stop(OPTIONS, f"manifest inputs[{k - 1}]: {err}") from None
    return specs


def recorded_data(manifest: dict, pack: str, split: str = "train") -> str:
    """What to read when --sources names no DATA: the input given to pack, or the one recorded
    source, or the folder holding all of them (relative paths: locate_recorded)."""
    options = section(manifest, "options")
    sources = [s for s in manifest.get("sources") or [] if isinstance(s, dict) and s.get("path")]
    rec = options.get("input")
    if not rec:
        if not sources:
            raise Stop(
                FILES,
                "the manifest records no source files (packed from data in memory?): nothing to "
                "read again; pass the data: packtool verify PACK --sources DATA",
            )
        paths = [str(s["path"]) for s in sources]
        rec = paths[0] if len(paths) == 1 else os.path.commonpath(paths)
    return locate_recorded(str(rec), pack, None, manifest.get("sources"), split)


def locate_recorded(
    rec: str,
    pack: str,
    folder: str | None = None,
    recorded: list | None = None,
    split: str = "train",
) -> str:
    """A recorded input path as it can be read from here: absolute as it is; relative joined to
    `folder` (the folder pack ran in, when given), else found in the current directory or beside
    the pack folder, as an absolute path. Where it exists in both, the one whose files have the
    `recorded` sha256 (the manifest's sources) is taken; beside the pack when neither (or both)
    has them. Else as recorded (a hub id)."""
    if os.path.isabs(rec):
        return rec
    if folder is not None:
        return os.path.join(folder, rec)
    bases = dict.fromkeys((os.path.dirname(os.path.abspath(pack)), os.getcwd()))  # beside first
    found = [os.path.join(b, rec) for b in bases if os.path.exists(os.path.join(b, rec))]
    if len(found) > 1:
        found = [c for c in found if _has_recorded_files(c, recorded, split)] or found
    return os.path.abspath(found[0]) if found else rec  # else a hub id, or a path that moved


def _has_recorded_files(path: str, recorded: list | None, split: str) -> bool:
    """Whether the files at `path` are the `recorded` ones ([{path, size, sha256}]): their count and
    sizes first, then their sha256 (only where a relative path exists in two places)."""
    from packtool.io.files import sha256_file
    from packtool.io.sources import locate

    rec = sorted(
        (r for r in recorded or [] if isinstance(r, dict)), key=lambda r: str(r.get("path"))
    )
    try:
        now = list(locate(path, split).paths)
    except PacktoolError:
        return False
    if not rec or len(now) != len(rec):
        return False
    if any(os.path.getsize(f) != r.get("size") for f, r in zip(now, rec, strict=True)):
        return False
    return all(sha256_file(f) == r.get("sha256") for f, r in zip(now, rec, strict=True))


def files_check(data: str, manifest: dict, split: str) -> tuple[Check, list]:
    """(Check FILES, the source files now): every file at `data` has the sha256 the manifest records."""
    from packtool.io.sources import resolve_sources

    try:
        now = resolve_sources(data, split)
    except PacktoolError as e:
        raise Stop(
            FILES,
            f"cannot read the sources at {data}: {e}; if the data moved, pass it: packtool verify "
            f"PACK --sources DATA",
        ) from None
    rec = sorted(
        (s for s in manifest.get("sources") or [] if isinstance(s, dict)),
        key=lambda s: str(s.get("path")),
    )
    ev = {"data": data, "files": len(now), "recorded": len(rec)}
    if len(now) != len(rec):
        raise Stop(
            FILES,
            f"{data} holds {len(now)} source file(s), the manifest records {len(rec)} "
            f"({', '.join(str(s.get('path')) for s in rec[:5])}); pass the data that was packed: "
            f"packtool verify PACK --sources DATA",
            ev,
        )
    problems = []
    for f, r in zip(now, rec, strict=True):
        if f.sha256 != r.get("sha256"):
            renamed = os.path.basename(f.path) != os.path.basename(str(r.get("path")))
            was = f" (recorded as {r.get('path')})" if renamed else ""
            problems.append(
                f"{f.path}{was}: sha256 {f.sha256[:12]}… ({f.size} bytes), the manifest records "
                f"{str(r.get('sha256'))[:12]}… ({r.get('size')} bytes): the source changed after packing"
            )
    if problems:
        raise Stop(FILES, "; ".join(problems), ev)
    at = os.path.abspath(data) if os.path.exists(data) else data  # the path read, in full
    msg = f"{len(now)} source file(s) at {at}: sha256 match the manifest"
    return Check(FILES, True, msg, ev), now


def inputs_files_check(specs: list, manifest: dict) -> Check:
    """Check FILES of a mixture: each input's files (inputs[k].files) have the recorded sha256."""
    n = 0
    for k, (spec, e) in enumerate(zip(specs, manifest.get("inputs") or [], strict=True), 1):
        try:
            files = files_check(spec.data, {"sources": e.get("files") or []}, spec.read.split)[1]
        except Stop as stop:
            msg = stop.check.message.replace(
                "pass it: packtool verify PACK --sources DATA",
                "run verify in the folder pack ran in, or pass that folder: packtool verify PACK "
                "--sources FOLDER",
            )
            raise Stop(FILES, f"input {k} ({spec.spec}): {msg}") from None
        n += len(files)
    msg = f"{n} source file(s) of {len(specs)} inputs: sha256 match the manifest"
    return Check(FILES, True, msg, {"inputs": len(specs), "files": n})


def tokenizer_check(cfg, manifest: dict) -> Check:
    """Check TOKENIZER: the recorded tokenizer loads and its files hash to what the manifest records
    (skipped for pre-tokenized input)."""
    rec = section(manifest, "tokenizer")
    want = rec.get("files_hash")
    if not want:
        msg = "no tokenizer files hash in the manifest (pre-tokenized input): ids are read as they are"
        return Check(TOKENIZER, False, msg, skipped=True)
    from packtool.tokenization.loading import load_spec

    what = "the built-in tokenizer" if cfg.tokenizer is None else f"tokenizer {cfg.tokenizer}"
    try:
        spec = load_spec(cfg.tokenizer)
    except PacktoolError as e:
        raise Stop(TOKENIZER, f"{what} (recorded in the manifest) cannot be loaded: {e}") from None
    ev = {"tokenizer": spec.name, "files_hash": spec.files_hash, "recorded": want}
    if spec.files_hash != want:
        raise Stop(
            TOKENIZER,
            f"{what}: files hash {spec.files_hash}, the manifest records {want} "
            f"({rec.get('name')}): the tokenizer's files changed since packing",
            ev,
        )
    return Check(TOKENIZER, True, f"{spec.name}: files hash {want} matches the manifest", ev)


def tokenize_again(data, cfg, progress=False, seed: int = 0):
    """The sources at `data` (a path, or a mixture's InputSpecs, weighted with the pack's `seed`)
    through the loading pack used, with `cfg`; Stop(TOKENS) when that fails."""
    from packtool.tokenization.mixture import load_mixture
    from packtool.tokenization.pipeline import load_tokenized

    try:
        if not isinstance(data, str):
            return load_mixture(list(data), cfg, seed=seed, progress=progress)
        td = load_tokenized(data, cfg, progress=progress)
        return td.as_pairs() if td.format == "preference" else td
    except PacktoolError as e:
        raise Stop(TOKENS, f"tokenizing the sources again failed: {e}") from None


def template_check(cfg, manifest: dict, tokenized) -> Check:
    """Check TEMPLATE: the chat template resolved now hashes to what the manifest records (a
    failure, not a Stop: the token comparison still runs and shows what changed)."""
    rec = section(manifest, "tokenizer")
    now = tokenized.tokenizer or {}
    want, have = rec.get("chat_template_hash"), now.get("chat_template_hash")
    if want is None and have is None:
        return Check(TEMPLATE, False, "no chat template (pre-tokenized input)", skipped=True)
    how = (
        f"--chat-template {cfg.chat_template}"
        if cfg.chat_template is not None
        else "no --chat-template: the tokenizer's own, or chatml-train for the built-in tokenizer"
    )
    ev = {"template": now.get("chat_template"), "hash": have, "recorded": want}
    if have != want:
        msg = (
            f"chat template '{now.get('chat_template')}' (resolved from the recorded {how}) "
            f"hashes {have}, the manifest records {want} ('{rec.get('chat_template')}'): the template changed "
            f"since packing, so ids and labels may differ"
        )
        return Check(TEMPLATE, False, msg, ev)
    msg = f"'{now.get('chat_template')}' ({how}): hash {want} matches the manifest"
    return Check(TEMPLATE, True, msg, ev)


class Provenance:
    """source_index -> 'data.jsonl:12' (or 'data.parquet record 3'), read lazily and only for the
    few records a message names."""

    def __init__(self, data: str, read):
        self.data, self.read = data, read
        self.known: dict[int, str] = {}

    def resolve(self, indices) -> None:
        want = {int(i) for i in indices} - set(self.known)
        if not want:
            return
        from packtool.io import readers
        from packtool.io.sources import locate

        try:
            for b in readers.iter_batches(locate(self.data, self.read.split), self.read, 4096):
                hits = [i for i in want if b.start <= i < b.start + len(b)]
                for i in hits:
                    self.known[i] = b.where(i - b.start)
                want.difference_update(hits)
                if not want or b.start > max(want):
                    break
        except Exception:  # provenance is decoration: never let it hide the difference itself
            pass
        for i in want:
            self.known[i] = f"record {i}"

    def __call__(self, i: int) -> str:
        self.resolve([i])
        return self.known[int(i)]


class MixtureProvenance:
    """A mixture's global source_index -> 'input 2 (alpaca.json) record 17, copy 1: alpaca.json
    record 17' (data.describe_source, then the record's file and line from its input's Provenance)."""

    def __init__(self, specs: list, blocks: list):
        self.blocks = blocks
        self.each = [Provenance(s.data, s.read) for s in specs]

    def resolve(self, indices) -> None:
        from packtool.data.tokenized import input_of

        for i in indices:
            b = input_of(int(i), self.blocks)
            if b is not None:
                self.each[b.number - 1].resolve([b.locate(i)[1]])

    def __call__(self, i: int) -> str:
        from packtool.data.tokenized import describe_source, input_of

        b = input_of(int(i), self.blocks)
        if b is None:
            return f"source_index {int(i)} (in no input's block)"
        where = self.each[b.number - 1](b.locate(i)[1])
        return f"{describe_source(i, self.blocks)}: {where}"


class SideProvenance:
    """A preference pack's documents are keyed 2 * source_index + side (pieces.pair_keys): named
    by their record's provenance and their side."""

    def __init__(self, records):
        self.records = records

    def resolve(self, keys) -> None:
        self.records.resolve([int(k) // 2 for k in keys])

    def __call__(self, key: int) -> str:
        return f"{self.records(int(key) // 2)} ({'rejected' if int(key) % 2 else 'chosen'})"
