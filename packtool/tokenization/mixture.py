"""Several inputs in one pack or profile (`packtool pack A 'B::format=alpaca,weight=0.5' ...`).

Each input is read, format-detected and tokenized on its own, through pipeline.load_tokenized with
its own ReadConfig (so its own cache entry: the one a run on that input alone makes), then weighted
and laid end to end in one TokenizedData:

    input k: R_k records read (skipped ones included), n_k tokenized, weight w_k
        copies C_k = ceil(w_k); copies 0 .. floor(w_k)-1 hold every example,
        a fractional part f = w_k - floor(w_k) adds copy floor(w_k) with f × n_k examples rounded
        half up (floor(f × n_k + 0.5): 0.4 × 1 → 0, 0.5 × 1 → 1; none selected anywhere: UsageError),
        drawn without replacement by numpy default_rng([seed, MIX_TAG, k]) and kept in input order
    global source_index of copy c of record r:  O_k + c * R_k + r,   O_1 = 0,  O_{k+1} = O_k + C_k * R_k
    table = [input 1 copy 0 | input 1 copy 1 | ... | input 2 copy 0 | ...]   (source_index rewritten)

So w=2 packs every example twice, w=0.5 a seeded half, w=1.5 every example plus a seeded half
again; the same inputs, weights and seed give the same rows (pack's --seed, profile's --seed).
data.InputBlock records each block; data.describe_source names a source index
("input 2 (alpaca.json) record 17, copy 1").

The counts are of the weighted stream: num_read = examples after weighting + skipped, so that
examples_read = tokenized + skipped holds globally as for one input, and each input's own
read/tokenized/skipped are in its InputBlock (manifest `inputs`, schema.input_problems).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from packtool.config import InputSpec, TokenizeConfig
from packtool.data import labels
from packtool.data.tokenized import (
    InputBlock,
    SourceFile,
    TokenizedData,
    arrow_array,
    formats_summary,
)
from packtool.errors import PacktoolError, UsageError

MIX_TAG = 0x6D6978  # "mix": the weight subsample's stream, apart from pack's row shuffle (seed, 1)


def load_mixture(
    inputs: list[InputSpec], cfg: TokenizeConfig, seed: int = 0, progress=True
) -> TokenizedData:
    """Every input tokenized on its own (cfg with the input's ReadConfig), weighted with `seed`
    and concatenated; the result's `inputs` lists the blocks. UsageError for an input that does not
    exist (before anything is tokenized); other errors name the input."""
    from packtool.io.sources import locate
    from packtool.tokenization.pipeline import load_tokenized

    if not inputs:
        raise UsageError("no input given; e.g. packtool pack a.jsonl 'b.json::weight=0.5'")
    for k, spec in enumerate(inputs, 1):  # every input found before any is tokenized
        try:
            locate(spec.data, spec.read.split)
        except PacktoolError as e:
            raise UsageError(
                f"input {k} ({spec.spec}): {e}; fix the path (or drop the input)"
            ) from None
    parts = []
    for k, spec in enumerate(inputs, 1):
        try:
            td = load_tokenized(
                spec.data, dataclasses.replace(cfg, read=spec.read), progress=progress
            )
        except PacktoolError as e:  # (its class kept: a UsageError stays one)
            raise type(e)(f"input {k} ({spec.spec}): {e}") from None
        parts.append(td)
    return combine(inputs, parts, seed, cfg)


def selection(n: int, weight: float, seed: int, k: int) -> tuple[int, np.ndarray]:
    """(copies, rows of the last copy) of an input of `n` examples and `weight`, the k-th (1-based)
    input: the last copy holds every row for a whole weight, else frac × n (rounded half up)
    seeded rows."""
    whole = math.floor(weight)
    frac = weight - whole
    if frac <= 0:
        return whole, np.arange(n, dtype=np.int64)
    m = min(n, int(math.floor(frac * n + 0.5)))
    rng = np.random.default_rng([seed, MIX_TAG, k])
    return whole + 1, np.sort(rng.choice(n, size=m, replace=False)).astype(np.int64)


def combine(
    inputs: list[InputSpec], parts: list[TokenizedData], seed: int, cfg: TokenizeConfig
) -> TokenizedData:
    """The weighted concatenation of the inputs' tokenized data (module docstring)."""
    import pyarrow as pa

    tables, blocks, skipped, warnings, none = [], [], [], [], []
    offset = 0
    for k, (spec, td) in enumerate(zip(inputs, parts, strict=True), 1):
        n, R = len(td), int(td.num_read)
        copies, last = selection(n, spec.weight, seed, k)
        src = np.asarray(td.source_index, dtype=np.int64)
        examples = 0
        for c in range(copies):
            # the copy's rows: the table as it is (zero-copy, memory-mapped from the cache) unless
            # a fractional weight subsamples it (then only the selected rows are copied)
            rows = last if c == copies - 1 and last.size < n else None
            t = td.table if rows is None else td.table.take(pa.array(rows))
            s = src if rows is None else src[rows]
            idx = t.schema.get_field_index("source_index")
            tables.append(t.set_column(idx, "source_index", arrow_array(offset + c * R + s)))
            examples += len(t)
        for r in td.skipped:
            pos = r.position
            skipped.append(
                dataclasses.replace(
                    r,
                    source_index=offset + r.source_index,
                    record=None if r.line is not None or pos == offset + r.source_index else pos,
                )
            )
        name = f"input {k} ({spec.data})"
        warnings += [f"{name}: {w}" for w in td.warnings]
        if examples == 0 and n:
            none.append(f"{name}: weight {spec.weight:g} selects none of its {n:,} examples")
            warnings.append(f"{none[-1]}; raise the weight")
        blocks.append(
            InputBlock(
                number=k,
                spec=spec.spec,
                data=spec.data,
                read=_read_json(spec.read),
                weight=float(spec.weight),
                offset=offset,
                records=R,
                copies=copies,
                tokenized=n,
                skipped=len(td.skipped),
                examples=examples,
                format=td.format,
                formats=dict(td.formats),
                files=list(td.sources),
            )
        )
        offset += copies * R
    if none and not sum(len(t) for t in tables):  # the weights, not the data, left nothing
        raise UsageError(
            f"the weights select no example: {'; '.join(none)} (f × n rounded half up is 0); "
            "raise the weight (w >= 0.5 / n selects one)"
        )
    if len({labels.stored(t) for t in tables}) > 1:  # some entry kept its labels: all do here
        tables = [labels.with_labels(t) for t in tables]
    table = pa.concat_tables(tables) if tables else parts[0].table.slice(0, 0)
    formats = {f: x for td in parts for f, x in td.formats.items()}
    fmt, reason = _format(parts, formats)
    out = TokenizedData.from_table(
        table,
        num_read=int(table.num_rows) + len(skipped),
        skipped=skipped,
        format=fmt,
        format_reason=f"{len(inputs)} inputs; {reason}",
        formats=formats,
        tokenizer=_tokenizer(inputs, parts),
        sources=_sources(parts),
        not_read=[n for td in parts for n in td.not_read],
        options=_options(parts, cfg),
        cache_hit=all(td.cache_hit for td in parts),
        warnings=warnings,
        backend=_backend(parts),
        seconds=_seconds(parts),
        inputs=blocks,
    )
    releases = [td.release_pages for td in parts if td.release_pages is not None]
    out.release_pages = (lambda: [r() for r in releases]) if releases else None
    out.mapped_files = [f for td in parts for f in td.mapped_files]
    return out


def _format(parts, formats) -> tuple[str, str]:
    """(format, why) of the mixture: 'mixed: ...' over every file (data.formats_summary) when the
    files differ, else the one format."""
    mixed = formats_summary(formats)
    if mixed is not None:
        return mixed
    kinds = sorted({td.format for td in parts})
    if len(kinds) == 1:
        return kinds[0], f"every input read as {kinds[0]}"
    return ", ".join(kinds), "each input's format detected on its own"


def _seconds(parts) -> dict[str, float]:
    out: dict[str, float] = {}
    for td in parts:
        for k, v in td.seconds.items():
            out[k] = out.get(k, 0.0) + v
    return out


def _read_json(read) -> dict:
    return {
        k: [list(p) for p in v] if isinstance(v, tuple) else v
        for k, v in dataclasses.asdict(read).items()
    }


def _tokenizer(inputs, parts) -> dict:
    """The one tokenizer of the pack: every input that was tokenized (not pre-tokenized ids
    without a tokenizer) used the same files and template, or the inputs cannot share a pack."""
    chat = [(s, td.tokenizer or {}) for s, td in zip(inputs, parts, strict=True)]
    named = [(s, t) for s, t in chat if t.get("files_hash") or t.get("chat_template_hash")]
    if not named:
        return dict(chat[0][1])
    first_spec, first = named[0]
    for s, t in named[1:]:
        for key in ("files_hash", "chat_template_hash"):
            if t.get(key) and first.get(key) and t[key] != first[key]:
                raise PacktoolError(
                    f"input {s.spec} was tokenized with {key} {t[key]}, input {first_spec.spec} "
                    f"with {first[key]}: one pack has one tokenizer and template; pack them apart"
                )
    out = dict(first)
    out.pop("label_audit", None)
    merged: dict[str, dict] = {}  # the inputs' label audits summed per kind (the first's `first`)
    for _, t in chat:
        for kind, a in (t.get("label_audit") or {}).items():
            m = merged.setdefault(kind, {})
            for k, v in a.items():
                m[k] = m.setdefault(k, v) if k == "first" else m.get(k, 0) + v
    if merged:
        from packtool.tokenization.label_audit import AUDIT_KINDS

        out["label_audit"] = {k: merged[k] for k in AUDIT_KINDS if k in merged}
    return out


def _sources(parts) -> list[SourceFile]:
    seen: dict[str, SourceFile] = {}
    for td in parts:
        for s in td.sources:
            seen.setdefault(s.path, s)
    return sorted(seen.values(), key=lambda s: s.path)


def _options(parts, cfg: TokenizeConfig) -> dict:
    """The options that shaped ids and labels: the global ones (each input's read options are in
    its block, manifest `inputs`); a pre-tokenized input's labels_from is kept."""
    base = cfg.fingerprint_dict()
    for td in parts:
        if "labels_from" in (td.options or {}):
            base.setdefault("labels_from", td.options["labels_from"])
    return base


def _backend(parts) -> dict:
    """The tokenizer backend: one dict when every input ran the same, else each input's."""
    backends = [dict(td.backend or {}) for td in parts]
    if all(b == backends[0] for b in backends):
        return backends[0]
    names = list(dict.fromkeys(str(b.get("name")) for b in backends))
    return {"name": "/".join(names), "inputs": backends}
