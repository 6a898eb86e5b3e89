"""The pack's sources read again: located, checked against the manifest, and tokenized again.

    manifest  options.input | sources [path, size, sha256]   tokenizer {name, files_hash, chat_template_hash}
        │ recorded_data: DATA as given to pack (or the one source, or their common folder);
        │ a relative path is tried from here, then beside the pack folder
        ▼
    sources.resolve_sources(DATA) ──▶ [path, size, sha256] now, sorted by path  ─── files_check (FILES)
    load_spec(cfg.tokenizer).files_hash      == tokenizer.files_hash            ─── tokenizer_check (TOKENIZER)
    pipeline.load_tokenized(DATA, cfg) ──▶ data.TokenizedData (the path `pack` took; cache off)
        table      input_ids list<int32>, labels (data.labels)  one row per tokenized record
        lengths, source_index, loss_counts, skipped, num_read
        tokenizer  {chat_template, chat_template_hash}          == manifest's ─── template_check (TEMPLATE)

    Provenance(DATA, read)(source_index) ──▶ "chats.jsonl:12" | "data.parquet record 3"
        (read lazily, only for the few records a message names)

A failure that leaves nothing to compare raises Stop (names.py): the later checks are skipped.
"""

from __future__ import annotations

import os

from packtool.errors import PacktoolError
from packtool.verify import Check
from packtool.verify.sources.names import FILES, TEMPLATE, TOKENIZER, TOKENS, Stop


def recorded_data(manifest: dict, pack: str) -> str:
    """What to read when --sources names no DATA: the input given to pack, or the one recorded
    source, or the folder holding all of them. Relative paths are relative to the directory pack
    ran in: tried from here, then beside the pack folder."""
    options = manifest.get("options") if isinstance(manifest.get("options"), dict) else {}
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
    return locate_recorded(str(rec), pack)


def locate_recorded(rec: str, pack: str, folder: str | None = None) -> str:
    """A recorded input path as it can be read from here: absolute as it is; relative tried from
    `folder` (the folder pack ran in, when given), else from the current directory, then beside
    the pack folder; else as recorded (a hub id)."""
    if os.path.isabs(rec):
        return rec
    if folder is not None:
        return os.path.join(folder, rec)
    for base in (os.getcwd(), os.path.dirname(os.path.abspath(pack))):
        cand = os.path.join(base, rec)
        if os.path.exists(cand):
            return cand if base != os.getcwd() else rec
    return rec  # a hub id, or a path that moved: located (or refused) like any input


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
    problems = []
    if len(now) != len(rec):
        problems.append(
            f"{data} holds {len(now)} source file(s), the manifest records {len(rec)} "
            f"({', '.join(str(s.get('path')) for s in rec[:5])}); pass the data that was packed: "
            f"packtool verify PACK --sources DATA"
        )
    else:
        for f, r in zip(now, rec, strict=True):
            if f.sha256 != r.get("sha256"):
                was = (
                    f" (recorded as {r.get('path')})"
                    if os.path.basename(f.path) != os.path.basename(str(r.get("path")))
                    else ""
                )
                problems.append(
                    f"{f.path}{was}: sha256 {f.sha256[:12]}… ({f.size} bytes), the manifest records "
                    f"{str(r.get('sha256'))[:12]}… ({r.get('size')} bytes): the source changed after packing"
                )
    if problems:
        raise Stop(FILES, "; ".join(problems), ev)
    return Check(
        FILES, True, f"{len(now)} source file(s) at {data}: sha256 match the manifest", ev
    ), now


def tokenizer_check(cfg, manifest: dict) -> Check:
    """Check TOKENIZER: the recorded tokenizer loads and its files hash to what the manifest records
    (skipped for pre-tokenized input)."""
    rec = manifest.get("tokenizer") if isinstance(manifest.get("tokenizer"), dict) else {}
    want = rec.get("files_hash")
    if not want:
        return Check(
            TOKENIZER,
            False,
            "no tokenizer files hash in the manifest (pre-tokenized input): ids are read "
            "as they are",
            skipped=True,
        )
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


def inputs_files_check(specs: list, manifest: dict) -> Check:
    """Check FILES of a mixture: each input's files (inputs[k].files) have the recorded sha256."""
    entries = manifest.get("inputs") or []
    n = 0
    for k, (spec, e) in enumerate(zip(specs, entries, strict=True), 1):
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
    return Check(
        FILES,
        True,
        f"{n} source file(s) of {len(specs)} inputs: sha256 match the manifest",
        {"inputs": len(specs), "files": n},
    )


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
    rec = manifest.get("tokenizer") if isinstance(manifest.get("tokenizer"), dict) else {}
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
        return Check(
            TEMPLATE,
            False,
            f"chat template '{now.get('chat_template')}' (resolved from the recorded {how}) "
            f"hashes {have}, the manifest records {want} ('{rec.get('chat_template')}'): the template changed "
            f"since packing, so ids and labels may differ",
            ev,
        )
    return Check(
        TEMPLATE,
        True,
        f"'{now.get('chat_template')}' ({how}): hash {want} matches the manifest",
        ev,
    )


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
        from packtool.data.blocks import input_of

        for i in indices:
            b = input_of(int(i), self.blocks)
            if b is not None:
                self.each[b.number - 1].resolve([b.locate(i)[1]])

    def __call__(self, i: int) -> str:
        from packtool.data.blocks import describe_source, input_of

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
