"""manifest.json, typed: what a pack holds and where every example went.

    Manifest
      schema_version, packtool_version         1, "0.x"
      pack_len, strategy, order, max_docs,      how the rows were planned
      overflow, shuffle, seed, shard_rows
      pad_id, pad_id_from                       the pad tail's token and where it came from
      tokenizer, tokenizer_backend, options     how the data was tokenized (dicts, as recorded)
      format, sources                           what was read: [{path, size, sha256}]
      counts   Counts                           examples_read ... rows (below)
      skipped, dropped, truncated, split        one entry per example, by source_index
      tokens   Tokens                           in, out, cut, loss_in, loss_out, loss_first_token, loss_cut, pad
      fill, lower_bound_rows, docs_per_row      how full the rows are
      shards                                    [{file, rows, bytes, sha256}]

`to_json` writes the keys in this order (the bytes of a pack do not change with this class) and
keeps any key it does not know; `from_json` reads every v1 manifest written so far, naming the
first key that is missing or of the wrong type. `conservation_problems` is the one statement of
where examples and tokens go; the writer checks it before it publishes a pack, verify checks it
again from the manifest alone and against the rows on disk.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, fields
from typing import Any

from packtool.schema.columns import MANIFEST, SCHEMA_VERSION


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
    pad: int

    def to_json(self) -> dict[str, int]:
        return {("in" if f.name == "in_" else f.name): getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, d: dict) -> Tokens:
        return cls(**{("in_" if k == "in" else k): v for k, v in d.items() if k in _TOKEN_KEYS})


_TOKEN_KEYS = ("in", "out", "cut", "loss_in", "loss_out", "loss_first_token", "loss_cut", "pad")
_TYPES = {
    int: "an integer",
    str: "a string",
    bool: "true or false",
    dict: "an object",
    list: "a list",
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
    extra: dict[str, Any] = field(
        default_factory=dict
    )  # keys a later writer added: kept as they are

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "extra":
                continue
            v = getattr(self, f.name)
            out[f.name] = (
                v.to_json()
                if isinstance(v, Tokens)
                else (vars(v).copy() if isinstance(v, Counts) else v)
            )
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
            if f.name == "extra":
                continue
            if f.name not in d:
                raise ManifestError(f"{where}: {f.name} is not recorded")
            kw[f.name] = d[f.name]
        for name, typ in (
            ("pack_len", int),
            ("counts", dict),
            ("tokens", dict),
            ("shards", list),
            ("skipped", list),
            ("dropped", list),
            ("truncated", list),
            ("split", list),
        ):
            if not isinstance(kw[name], typ) or (typ is int and isinstance(kw[name], bool)):
                raise ManifestError(f"{where}: {name} is not {_TYPES[typ]}")
        for name, keys in (("counts", [f.name for f in fields(Counts)]), ("tokens", _TOKEN_KEYS)):
            for k in keys:
                v = kw[name].get(k)
                if not isinstance(v, int) or isinstance(v, bool):
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


# the counts the conservation rules relate (documents and rows are checked against the rows themselves)
CONSERVED_COUNTS = (
    "examples_read",
    "skipped",
    "tokenized",
    "packed",
    "truncated",
    "split",
    "split_parts",
    "dropped",
)


def _int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def conservation_problems(
    counts: dict, tokens: dict, listed: dict[str, list] | None = None
) -> list[str]:
    """Where every example and token went, from a manifest's `counts` and `tokens` (dicts, as in the
    JSON: a damaged manifest may lack keys, which are then named) and, when given, its per-example
    lists {skipped, dropped, truncated, split}:

        examples_read = tokenized + skipped
        tokenized     = packed + truncated + split + dropped        (each example counted once)
        tokens.in     = tokens.out + tokens.cut                     (cut = dropped lengths + truncated cuts)
        loss_in       = loss_out + loss_first_token + loss_cut
        len(list)     = counts.<list>                               (each example listed once)
    """
    problems: list[str] = []
    v = {k: counts.get(k) for k in CONSERVED_COUNTS}
    missing = [k for k, x in v.items() if not _int(x)]
    if missing:
        problems.append(f"counts.{', counts.'.join(missing)} not recorded")
    else:
        if v["examples_read"] != v["tokenized"] + v["skipped"]:
            problems.append(
                f"examples_read {v['examples_read']} != tokenized {v['tokenized']} + skipped {v['skipped']}"
            )
        if v["tokenized"] != v["packed"] + v["truncated"] + v["split"] + v["dropped"]:
            problems.append(
                f"tokenized {v['tokenized']} != packed {v['packed']} + truncated {v['truncated']} + "
                f"split {v['split']} + dropped {v['dropped']}"
            )
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
    loss = [tokens.get(k) for k in ("loss_in", "loss_out", "loss_first_token", "loss_cut")]
    if all(_int(x) for x in loss) and loss[0] != loss[1] + loss[2] + loss[3]:
        problems.append(
            f"loss tokens in {loss[0]} != out {loss[1]} + first-token {loss[2]} + cut {loss[3]}"
            " (num_loss_tokens disagrees with labels?)"
        )
    return problems
