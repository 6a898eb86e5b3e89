"""manifest.json, typed: what a pack holds and where every example went.

    Manifest
      schema_version, packtool_version         1, "0.x"
      pack_len, strategy, order, max_docs,      how the rows were planned
      overflow, shuffle, seed, shard_rows
      pad_id, pad_id_from                       the pad tail's token and where it came from
      tokenizer, tokenizer_backend, options     how the data was tokenized (dicts, as recorded);
                                                tokenizer.label_audit: what is trained that the
                                                data lacks, per kind ({template_inserted |
                                                empty_turns | dropped_reasoning |
                                                zero_loss_documents: {examples, turns, tokens,
                                                first}}), written only when found
      format, sources                           what was read: [{path, size, sha256}]
      not_read                                  paths found and not read: [{path, why}] (a link
                                                loop, a broken link); written only when some
      inputs                                    a mixture's inputs (input_problems); absent for one input
      counts   Counts                           examples_read ... rows (below)
      skipped, dropped, truncated, split        one entry per example, by source_index
      tokens   Tokens                           in, out, cut, loss_in, loss_out, loss_first_token, loss_cut, pad
      fill, lower_bound_rows, docs_per_row      how full the rows are
      shards                                    [{file, rows, bytes, sha256}]
      pad_to_multiple, fixed_docs               the row layout (schema/shard.py): written only when
                                                not 1 / false, with tokens.doc_pad (pad slots inside
                                                documents), so default packs keep their bytes

`to_json` writes the keys in this order and keeps any key it does not know; `from_json` names the
first key missing or of the wrong type. `conservation_problems` is the one statement of where
examples and tokens go (the writer and verify both check it).

Structured warnings (a report's `warnings`): Notice(code, message, count, items), e.g.
Notice("truncated", "truncated 3 example(s) to --len 4096: ...", 3, [12, 40, 41]), items the
source indices concerned. `group_reasons` groups skip reasons by cause for messages.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from packtool.schema.shard import MANIFEST, SCHEMA_VERSION


class ManifestError(ValueError):
    """A manifest.json that is not a readable packtool v1 manifest; the message names the key."""


@dataclass
class Counts:
    """Examples at each step; every example read ends in exactly one of the last five."""

    examples_read: int
    skipped: int
    tokenized: int
    packed: int  # packed whole
    truncated: int
    split: int
    split_parts: int  # documents the split examples became
    dropped: int
    documents: int  # documents in the rows = packed + truncated + split_parts
    rows: int


@dataclass
class Tokens:
    """Tokens and loss tokens in and out; `in` is a Python keyword, so the field is `in_`."""

    in_: int
    out: int
    cut: int
    loss_in: int
    loss_out: int
    loss_first_token: int  # loss tokens masked because they start a document (or a split part)
    loss_cut: int
    pad: int  # slots that are not real tokens: rows * pack_len - out (document padding included)
    doc_pad: int | None = None  # of those, padding inside documents (None: not written)

    def to_json(self) -> dict[str, int]:
        return {
            ("in" if f.name == "in_" else f.name): getattr(self, f.name)
            for f in fields(self)
            if not (f.name == "doc_pad" and self.doc_pad is None)
        }

    @classmethod
    def from_json(cls, d: dict) -> Tokens:
        known = {k: v for k, v in d.items() if k in (*_TOKEN_KEYS, "doc_pad")}
        return cls(in_=known.pop("in"), **known)


_TOKEN_KEYS = ("in", "out", "cut", "loss_in", "loss_out", "loss_first_token", "loss_cut", "pad")
# written only when not these (one input; the default layout): other packs keep their bytes
_OPTIONAL = {
    "inputs": [],
    "pad_to_multiple": 1,
    "fixed_docs": False,
    "not_read": [],
    "task": "sft",
    "preference": {},
}
_TYPES = {
    int: "an integer",
    bool: "true or false",
    dict: "an object",
    list: "a list",
    str: "a string",
}


@dataclass
class Manifest:
    schema_version: int
    packtool_version: str
    pack_len: int
    strategy: str
    order: str
    max_docs: int
    overflow: str
    shuffle: bool
    seed: int
    shard_rows: int
    pad_id: int
    pad_id_from: str
    tokenizer: dict[str, Any]
    tokenizer_backend: dict[str, Any]
    options: dict[str, Any]
    format: str | None
    sources: list[dict[str, Any]]
    not_read: list[dict[str, str]] = field(default_factory=list, kw_only=True)
    # several inputs (`pack A B::weight=2`): [{input, spec, data, options, weight, format, formats,
    # block {offset, records, copies}, files, counts}]; empty, and not written, for one input
    inputs: list[dict[str, Any]] = field(default_factory=list, kw_only=True)
    counts: Counts
    skipped: list[dict[str, Any]]
    dropped: list[dict[str, Any]]
    truncated: list[dict[str, Any]]
    split: list[dict[str, Any]]
    tokens: Tokens
    fill: float
    lower_bound_rows: int
    docs_per_row: dict[str, Any]
    shards: list[dict[str, Any]]
    pad_to_multiple: int = 1  # the layout (schema/shard.py); written only when not the default
    fixed_docs: bool = False
    # "preference": each example a pair of adjacent documents in one row, `preference` what
    # pack.pairs.pair_manifest says; both written only for preference packs
    task: str = "sft"
    preference: dict[str, Any] = field(default_factory=dict)
    # keys a later writer added: kept as they are
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def label_audit(self) -> dict[str, dict[str, Any]]:
        """{kind: {examples, turns, tokens, first}} of what is trained that the data lacks
        (packtool.tokenization.label_audit.label_audit); {} when nothing was found or not recorded."""
        audit = (self.tokenizer or {}).get("label_audit")
        return audit if isinstance(audit, dict) else {}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            v = getattr(self, f.name)
            if f.name in _OPTIONAL and v == _OPTIONAL[f.name]:
                continue
            if isinstance(v, Counts):
                v = asdict(v)
            out[f.name] = v.to_json() if isinstance(v, Tokens) else v
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, d: Any, where: str = MANIFEST) -> Manifest:
        """Parse a manifest object; ManifestError names `where` and the first bad key."""
        if not isinstance(d, dict):
            raise ManifestError(f"{where} is not a JSON object")
        if not is_pack_manifest(d):
            raise ManifestError(
                f"{where} is not a packtool manifest (no schema_version / packtool_version)"
            )
        if d["schema_version"] != SCHEMA_VERSION:
            raise ManifestError(
                f"{where}: schema_version {d['schema_version']!r}; this packtool reads "
                f"version {SCHEMA_VERSION}"
            )
        kw: dict[str, Any] = {}
        for f in fields(cls):
            if f.name == "extra" or (f.name in _OPTIONAL and f.name not in d):
                continue
            if f.name not in d:
                raise ManifestError(f"{where}: {f.name} is not recorded")
            kw[f.name] = d[f.name]
        lists = ("shards", "skipped", "dropped", "truncated", "split")
        types = {"pack_len": int, "counts": dict, "tokens": dict, **dict.fromkeys(lists, list)}
        types |= {"pad_to_multiple": int, "fixed_docs": bool, "not_read": list}  # when recorded
        types |= {"task": str, "preference": dict}
        for name, typ in types.items():
            if name in kw and not (_int(kw[name]) if typ is int else isinstance(kw[name], typ)):
                raise ManifestError(f"{where}: {name} is not {_TYPES[typ]}")
        for name, keys in (("counts", [f.name for f in fields(Counts)]), ("tokens", _TOKEN_KEYS)):
            for k in keys:
                if not _int(kw[name].get(k)):
                    raise ManifestError(f"{where}: {name}.{k} is not recorded as an integer")
        kw["counts"] = Counts(**{f.name: kw["counts"][f.name] for f in fields(Counts)})
        kw["tokens"] = Tokens.from_json(kw["tokens"])
        known = {f.name for f in fields(cls)}
        return cls(**kw, extra={k: v for k, v in d.items() if k not in known})


def is_pack_manifest(m) -> bool:
    """A parsed manifest.json is packtool's: a JSON object with our version keys."""
    return isinstance(m, dict) and "schema_version" in m and "packtool_version" in m


def read_pack_manifest(folder: str) -> dict | None:
    """The manifest of the pack in `folder` as a dict; None when it has none that is ours
    (missing, unreadable, another tool's)."""
    try:
        with open(os.path.join(os.path.expanduser(folder), MANIFEST), encoding="utf-8") as f:
            m = json.load(f)
    except (OSError, ValueError):
        return None
    return m if is_pack_manifest(m) else None


def vocab_size_of(m: dict | None) -> int | None:
    """tokenizer.vocab_size when the manifest records it as a positive integer: len(tokenizer),
    added tokens included (tokenization/loading.py), so every id in the rows is below it; None for
    pre-tokenized input packed without a tokenizer (nothing bounds its ids)."""
    tok = m.get("tokenizer") if isinstance(m, dict) else None
    v = tok.get("vocab_size") if isinstance(tok, dict) else None
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else None


# the counts the conservation rules relate: all but documents and rows (checked against the rows)
CONSERVED_COUNTS = tuple(f.name for f in fields(Counts) if f.name not in ("documents", "rows"))


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


_OUTCOMES = ("packed", "truncated", "split", "dropped")  # what becomes of each example
# the counts of one input of a mixture (manifest inputs[].counts; data.input_counts)
INPUT_COUNTS = ("read", "skipped", "tokenized", "not_selected", "examples", *_OUTCOMES)


def _sum_rule(c: dict, total: str, parts: tuple[str, ...], prefix: str = "") -> list[str]:
    """[] when c[total] is the sum of c[parts], else ['total T != part P + ...']."""
    if c[total] == sum(c[k] for k in parts):
        return []
    return [prefix + f"{total} {c[total]} != " + " + ".join(f"{k} {c[k]}" for k in parts)]


def conservation_problems(
    counts: dict, tokens: dict, listed: dict[str, list] | None = None, inputs: Any = None
) -> list[str]:
    """Where every example and token went, from a manifest's `counts` and `tokens` (dicts, as in the
    JSON: a damaged manifest may lack keys, which are then named) and, when given, its per-example
    lists {skipped, dropped, truncated, split}:

        examples_read = tokenized + skipped
        tokenized     = packed + truncated + split + dropped        (each example counted once)
        tokens.in     = tokens.out + tokens.cut                     (cut = dropped lengths + truncated cuts)
        loss_in       = loss_out + loss_first_token + loss_cut
        len(list)     = counts.<list>                               (each example listed once)
        inputs (a mixture's, when given and non-empty): input_problems, per input and summed
        0 <= doc_pad <= pad                                         (when tokens.doc_pad is recorded)
    """
    problems: list[str] = []
    v = {k: counts.get(k) for k in CONSERVED_COUNTS}
    missing = [k for k, x in v.items() if not _int(x)]
    if missing:
        problems.append(f"counts.{', counts.'.join(missing)} not recorded")
    else:
        problems += _sum_rule(v, "examples_read", ("tokenized", "skipped"))
        problems += _sum_rule(v, "tokenized", _OUTCOMES)
        for key, lst in (listed or {}).items():
            if isinstance(lst, list) and len(lst) != v[key]:
                problems.append(f"counts.{key} is {v[key]} but {len(lst)} entries are listed")
    t_in, t_out, t_cut = tokens.get("in"), tokens.get("out"), tokens.get("cut")
    if not all(_int(x) for x in (t_in, t_out, t_cut)):
        problems.append("tokens.in/out/cut not all recorded")
    else:
        if t_in != t_out + t_cut:
            problems.append(
                f"tokens in {t_in} != out {t_out} + cut {t_cut} (difference {t_in - t_out - t_cut})"
            )
        if listed is not None and "dropped" in listed and "truncated" in listed:
            cut = sum(
                int(x.get("length", 0)) for x in listed["dropped"] if isinstance(x, dict)
            ) + sum(int(x.get("cut", 0)) for x in listed["truncated"] if isinstance(x, dict))
            if cut != t_cut:
                problems.append(
                    f"tokens.cut is {t_cut} but the dropped and truncated lists account for {cut}"
                )
    doc_pad, pad = tokens.get("doc_pad"), tokens.get("pad")
    if doc_pad is not None:
        if not _int(doc_pad) or doc_pad < 0:
            problems.append(f"tokens.doc_pad {doc_pad!r} is not a count")
        elif _int(pad) and doc_pad > pad:
            problems.append(
                f"tokens.doc_pad {doc_pad} > tokens.pad {pad} (padding inside documents is part of the pad slots)"
            )
    loss = [tokens.get(k) for k in ("loss_in", "loss_out", "loss_first_token", "loss_cut")]
    if all(_int(x) for x in loss) and loss[0] != loss[1] + loss[2] + loss[3]:
        problems.append(
            f"loss tokens in {loss[0]} != out {loss[1]} + first-token {loss[2]} + cut {loss[3]}"
            " (num_loss_tokens disagrees with labels?)"
        )
    if inputs:
        problems += input_problems(inputs, counts)
    return problems


def input_problems(inputs: Any, counts: dict | None = None) -> list[str]:
    """The per-input rules of a mixture's `inputs` and, with the manifest's `counts`, their sums
    against the global counts (which count the weighted stream: tokenized = examples after weighting):

        read      = tokenized + skipped                     each input: every record it read
        tokenized * copies = examples + not_selected        weights: whole copies plus a seeded part
        examples  = packed + truncated + split + dropped    every example after weighting once
        offset    = previous offset + copies * records      the source-index blocks follow each other
        sum of examples = counts.tokenized; of skipped, packed, truncated, split, dropped: the same key
    """
    if not isinstance(inputs, list):
        return [f"inputs is {type(inputs).__name__}, not a list"]
    problems: list[str] = []
    total = dict.fromkeys(("examples", "skipped", *_OUTCOMES), 0)
    offset = 0
    for k, e in enumerate(inputs, 1):
        e = e if isinstance(e, dict) else {}
        c, blk = e.get("counts"), e.get("block")
        name = f"input {k} ({e.get('spec', '?')})"
        if not isinstance(c, dict) or not all(_int(c.get(x)) for x in INPUT_COUNTS):
            problems.append(f"{name}: counts.{'/'.join(INPUT_COUNTS)} not all recorded")
            continue
        if not isinstance(blk, dict) or not all(
            _int(blk.get(x)) for x in ("offset", "records", "copies")
        ):
            problems.append(f"{name}: block offset/records/copies not recorded")
            continue
        problems += _sum_rule(c, "read", ("tokenized", "skipped"), f"{name}: ")
        if c["tokenized"] * blk["copies"] != c["examples"] + c["not_selected"]:
            problems.append(
                f"{name}: tokenized {c['tokenized']} x copies {blk['copies']} != examples "
                f"{c['examples']} + not selected by weight {c['not_selected']}"
            )
        problems += _sum_rule(c, "examples", _OUTCOMES, f"{name}: ")
        if blk["records"] != c["read"] or blk["offset"] != offset:
            problems.append(
                f"{name}: block at offset {blk['offset']} of {blk['records']} records, expected "
                f"offset {offset} of {c['read']} (blocks follow each other)"
            )
        offset = blk["offset"] + blk["copies"] * blk["records"]
        for x in total:
            total[x] += c[x]
    if counts is not None and not problems:
        for x, v in total.items():
            key = "tokenized" if x == "examples" else x
            if _int(counts.get(key)) and counts[key] != v:
                problems.append(f"the inputs' {x} add up to {v}, counts.{key} is {counts[key]}")
    return problems


TRUNCATED = "truncated"
DROPPED = "dropped"
OVERFLOW_LOSS = "overflow_loss"  # --overflow drop|truncate lost more than 1% of examples or tokens
INPUT = "input"  # a warning from reading or tokenizing the data, passed on as it was said
LEFTOVER = "leftover"  # a folder that a run which died left beside the output, removed (io.files)


@dataclass(frozen=True)
class Notice:
    code: str
    message: str
    count: int = 0
    items: list[Any] = field(default_factory=list)

    def __str__(self) -> str:
        return self.message

    def to_json(self) -> dict[str, Any]:
        # not dataclasses.asdict: it deep-copies `items` (every dropped example's index) first
        return {
            "code": self.code,
            "message": self.message,
            "count": self.count,
            "items": list(self.items),
        }


_QUOTED = re.compile(r"'([^']*)'")
_NUMBER = re.compile(r"(?<![\w.'-])\d+(?![\w.'-])")


@dataclass(frozen=True)
class ReasonGroup:
    """Reasons that differ only in quoted names and numbers: one cause, its variants counted.

    message 2 has unknown role 'bot'; ... --role bot=OURS      ┐  cause   "message N has unknown role
    message 5 has unknown role 'bot'; ... --role bot=OURS      ├─▶          '…'; ... --role …=OURS"
    message 1 has unknown role 'agent'; ... --role agent=OURS  ┘  variants [("'bot'", 2), ("'agent'", 1)]
    """

    cause: str  # the reason itself when all are the same
    count: int
    variants: tuple[tuple[str, int], ...] = ()  # the quoted values that differ, most frequent first

    def text(self, listed: int = 3) -> str:
        """The cause and, when it has variants, the first `listed` with counts: "... ('bot' 2, 'agent' 1)"."""
        return self.cause + self.variants_text(listed)

    def variants_text(self, listed: int = 3) -> str:
        if not self.variants:
            return ""
        shown = ", ".join(f"{v} {k:,}" for v, k in self.variants[:listed])
        more = len(self.variants) - listed
        return f" ({shown}{f', … {more} more' if more > 0 else ''})"


def _cause(reason: str) -> tuple[str, tuple[str, ...]]:
    """(reason with quoted values as '…', bare repeats of them as …, numbers as N; the quoted values)."""
    values = tuple(_QUOTED.findall(reason))
    key = _QUOTED.sub("'…'", reason)
    words = {v for v in values if len(v) > 1 and re.fullmatch(r"[\w.-]+", v)}
    for v in sorted(words, key=len, reverse=True):
        key = re.sub(rf"(?<![\w.-]){re.escape(v)}(?![\w.-])", "…", key)
    return _NUMBER.sub("N", key), values


def group_reasons(reasons) -> list[ReasonGroup]:
    """Reasons (one per record) grouped by cause, most frequent cause first. A cause that occurs
    with one reason only is that reason, unchanged; otherwise numbers that differ read N and quoted
    values that differ read '…', and those values are the variants."""
    exact = Counter(reasons)
    by_cause: dict[str, list[tuple[str, tuple[str, ...], int]]] = {}
    for reason, k in exact.items():
        key, values = _cause(reason)
        by_cause.setdefault(key, []).append((reason, values, k))
    out = []
    for key, members in by_cause.items():
        total = sum(k for _, _, k in members)
        if len(members) == 1:
            out.append(ReasonGroup(members[0][0], total))
            continue
        slots = {len(v) for _, v, _ in members}
        variants: Counter = Counter()
        if len(slots) == 1:
            varying = [i for i in range(slots.pop()) if len({v[i] for _, v, _ in members}) > 1]
            for _, v, k in members:
                if varying:
                    variants[", ".join(f"'{v[i]}'" for i in varying)] += k
        out.append(ReasonGroup(key, total, tuple(variants.most_common())))
    out.sort(key=lambda g: -g.count)
    return out
