"""The pack's files against the contract: the manifest, the shard list, each shard's Arrow schema.

    OUT/
      manifest.json                   load_manifest, manifest_check: readable, schema v1, pack_len, pad_id
      data/train-00000-of-0000N.parquet
        Arrow schema                  shard_schema: schema.shard_schema_problems; attention_mask named apart
        rows, sha256                  shards_check: every listed shard on disk, nothing extra, same bytes

A damaged manifest is still read as a dict, not as `schema.Manifest` (which stops at the first bad
key): each of its problems is reported in the check it concerns. Every failure is a failed Check,
never a traceback (`guarded`: a manifest value of the wrong type; `open_shard`: a file that is not
Parquet; integrity's `_sha256`: a shard that cannot be read at all, a folder or no permission).
"""

from __future__ import annotations

import json
import os

from packtool import schema
from packtool.verify import Check
from packtool.verify.scan import MANIFEST_CHECK, SHARDS


def is_int(v) -> bool:
    """An int that is not a bool (JSON true is no count)."""
    return isinstance(v, int) and not isinstance(v, bool)


def load_manifest(path: str) -> tuple[dict | None, str | None]:
    """(manifest, None), or (None, why) when the pack has no readable JSON object as its manifest."""
    mpath = os.path.join(path, schema.MANIFEST)
    if not os.path.isfile(mpath):
        return (
            None,
            f"{mpath} is missing; a finished pack always has one (was the pack interrupted?)",
        )
    try:
        with open(mpath) as f:
            m = json.load(f)
    except (OSError, ValueError) as e:
        return None, f"{mpath} is not valid JSON: {e}"
    if not isinstance(m, dict):
        return None, f"{mpath} is not a JSON object"
    return m, None


def value(m: dict | None, dotted: str):
    """m["a"]["b"] for "a.b"; None where a key is absent or a level is not an object."""
    cur = m
    for k in dotted.split("."):
        if not isinstance(cur, dict) or k not in cur:
            return None
        cur = cur[k]
    return cur


def section(m: dict | None, key: str) -> dict:
    """The manifest's object `key` ({} where it is absent or not an object)."""
    v = (m or {}).get(key)
    return v if isinstance(v, dict) else {}


def listed(m: dict | None, key: str) -> list[dict]:
    """The objects of the manifest's list `key` (none where it is no list)."""
    v = (m or {}).get(key)
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def manifest_pack_len(m: dict | None) -> int | None:
    """The manifest's pack_len when it is a positive integer (else the shards say)."""
    v = value(m, "pack_len")
    return v if is_int(v) and v >= 1 else None


def _raw_pad_id(m: dict | None):
    return m.get("pad_id", value(m, "tokenizer.pad_id")) if m else None


def manifest_pad_id(m: dict | None) -> int | None:
    """The pad id the pad tail must hold, when the manifest records it as an integer."""
    v = _raw_pad_id(m)
    return v if is_int(v) else None


def manifest_check(path: str, m: dict | None, why: str | None) -> Check:
    """The manifest itself: readable, schema v1, a usable pack_len and pad_id, the main keys."""
    if why:
        return Check(MANIFEST_CHECK, False, why)
    problems = []
    if m.get("schema_version") != schema.SCHEMA_VERSION:
        problems.append(f"schema_version {m.get('schema_version')!r} != {schema.SCHEMA_VERSION}")
    pack_len = value(m, "pack_len")
    if manifest_pack_len(m) is None:
        problems.append(f"pack_len {pack_len!r} is not a positive integer")
    pad_id = _raw_pad_id(m)
    if "pad_id" not in m:  # schema.Manifest requires it: export refuses such a pack
        problems.append(
            "pad_id is missing: the pad tail's id is not recorded"
            + ("" if is_int(pad_id) else ", the pad checks cannot run")
            + "; write the pack again with `packtool pack`"
        )
    elif manifest_pad_id(m) is None:
        problems.append(f"pad_id {pad_id!r} is not an integer")
    for key in ("counts", "tokens", "shards"):
        if key not in m:
            problems.append(f"key {key!r} is missing")
    problems += layout_problems(m)
    msg = "; ".join(problems) or f"readable, schema v{schema.SCHEMA_VERSION}"
    ev = {"path": os.path.join(path, schema.MANIFEST), "pack_len": pack_len}
    return Check(MANIFEST_CHECK, not problems, msg, ev)


def layout_problems(m: dict) -> list[str]:
    """The recorded layout (pad_to_multiple, fixed_docs) is one the writer can have written."""
    problems = []
    n, fixed, k = m.get("pad_to_multiple", 1), m.get("fixed_docs", False), m.get("max_docs", 0)
    if not is_int(n) or n < 1:
        problems.append(f"pad_to_multiple {n!r} is not an integer >= 1")
    elif is_int(m.get("pack_len")) and m["pack_len"] % n:
        problems.append(f"pack_len {m['pack_len']} is not a multiple of pad_to_multiple {n}")
    if not isinstance(fixed, bool):
        problems.append(f"fixed_docs {fixed!r} is not true or false")
    elif fixed and (not is_int(k) or k < 1):
        problems.append(f"fixed_docs is true but max_docs is {k!r} (needs K >= 1)")
    return problems


def list_shards(path: str) -> list[str]:
    """Relative paths `data/*.parquet`, sorted."""
    d = os.path.join(path, schema.DATA_DIR)
    if not os.path.isdir(d):
        return []
    return sorted(f"{schema.DATA_DIR}/{f}" for f in os.listdir(d) if f.endswith(".parquet"))


def open_shard(path: str):
    """(ParquetFile, None), or (None, why) when the file is not readable Parquet (random bytes,
    truncated footer): a failed check names it, verify does not crash."""
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        pf.schema_arrow  # noqa: B018 - converting the schema can fail on its own
    except Exception as e:
        return None, f"not a readable Parquet file ({type(e).__name__}: {e})"
    return pf, None


def shard_schema(
    pf, shard: str, pack_len: int | None, padded: bool = False, pairs: bool = False
) -> tuple[str | None, str | None, bool]:
    """(schema problem, attention_mask problem, scannable) of one opened shard. The forbidden
    column is its own check (no attention_mask), so the schema problem leaves it out;
    `scannable`: every column is there (seq_lengths_unpadded too when the manifest says `padded`)
    and input_ids holds rows of `pack_len`."""
    sch = pf.schema_arrow
    forbidden = [c for c in schema.FORBIDDEN_COLUMNS if c in sch.names]
    mask = None
    if forbidden:
        mask = (
            f"{shard} has an attention_mask column (rows 0..{pf.metadata.num_rows - 1}): an all-ones "
            f"mask beside packed position_ids makes sdpa/eager attend across documents; drop the column"
        )
    problem = "pack_len unknown"
    if pack_len:  # shard_schema_problems names the forbidden columns first: they are reported above
        problems = schema.shard_schema_problems(sch, pack_len, padded, pairs)[len(forbidden) :]
        problem = "; ".join(problems) or None
    columns = [*schema.COLUMNS, *[schema.UNPADDED_COLUMN] * padded, *[schema.SIDE_COLUMN] * pairs]
    scannable = all(sch.get_field_index(c) >= 0 for c in columns)
    return problem, mask, scannable and schema.pack_len_of(sch) == pack_len


def guarded(name: str, fn, *args) -> Check:
    """fn(*args), or a failed check when a manifest value has a type the check cannot use (a string
    where a number belongs): reported like any other failure, never a traceback."""
    try:
        return fn(*args)
    except (TypeError, ValueError, AttributeError, KeyError) as e:
        why = f"cannot check: a manifest value has the wrong type ({type(e).__name__}: {e})"
        return Check(name, False, why)


def shards_check(
    manifest: dict | None,
    shards: list[str],
    shard_rows: dict[str, int],
    hashes: dict[str, str],
    unreadable: dict[str, str] | None = None,
) -> Check:
    """Every shard the manifest lists is on disk with its rows and sha256, and nothing else is;
    `unreadable`: the files that could not be read at all, with the OS's reason (no sha256)."""
    problems: list[str] = []
    unreadable = unreadable or {}
    for f in sorted(unreadable):
        problems.append(
            f"{f} cannot be read ({unreadable[f]}): its bytes are not checked; make it the shard "
            f"file `packtool pack` wrote (or remove it) and verify again"
        )
    if not isinstance((manifest or {}).get("shards"), list):
        problems.append("the manifest lists no shards: rows and sha256 cannot be checked")
    entries = [s for s in listed(manifest, "shards") if "file" in s]
    by_file = {str(s["file"]).replace(os.sep, "/"): s for s in entries}
    for f in sorted(set(by_file) - set(shards)):
        rows = by_file[f].get("rows")
        problems.append(f"{f} is listed in the manifest ({rows} rows) but missing on disk")
    for f in sorted(set(shards) - set(by_file)):
        rows = f"rows 0..{shard_rows[f] - 1}" if f in shard_rows else "rows unknown: not readable"
        problems.append(f"{f} is on disk but not in the manifest ({rows} unaccounted)")
    for f in shards:
        s = by_file.get(f)
        if s is None:
            continue
        want, have = s.get("rows"), shard_rows.get(f)
        if have is None:
            problems.append(
                f"{f} could not be read: the manifest's {want!r} rows are not on disk in a readable shard"
            )
        elif want != have:
            if is_int(want) and have < want:
                problems.append(
                    f"{f} has {have} rows, the manifest says {want}: rows {have}..{want - 1} are missing"
                )
            else:
                problems.append(f"{f} has {have} rows, the manifest says {want!r}")
        if f in unreadable:
            continue
        if s.get("sha256") is None:
            problems.append(f"the manifest records no sha256 for {f}; re-run packtool pack")
        elif s.get("sha256") != hashes[f]:
            problems.append(
                f"{f} sha256 is {hashes[f][:12]}…, the manifest says {str(s.get('sha256'))[:12]}…: "
                f"the shard's bytes changed after packing"
            )
    ev = {"shards": len(shards), "rows": sum(shard_rows.values())}
    ev["sha256_checked"] = len(set(shards) & set(by_file) - set(unreadable))
    msg = "; ".join(problems) or "every shard present; rows and sha256 match the manifest"
    return Check(SHARDS, not problems, msg, ev)
