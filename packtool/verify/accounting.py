"""Where every example and token went: the manifest's own arithmetic, and the manifest against the rows.

    manifest.json                              the rows on disk (scan.Totals)
      counts.rows, counts.documents     ==       rows scanned, documents in their seq_lengths
      tokens.out, loss_out, pad         ==       document slots, labels not IGNORE_INDEX, the rest
      examples_read = tokenized + skipped, ...   (schema.conservation_problems: the one statement)
      packed + truncated + split_parts  ==       documents in the rows
      packed + truncated + split        ==       distinct source_index in the rows
      split: [{source_index, parts}]    ==       that source_index appears `parts` times, any other once
      dropped: [{source_index, ...}]    ∉        the rows
      inputs[k] (a mixture): packed + truncated + split  ==  distinct source_index in its block

The manifest-only rules are the contract's (docs/ARCHITECTURE.md, "Semantics"); verify adds the
rows: documents counted, a source_index found twice or in no row located (shard, row, document).
"""

from __future__ import annotations

import numpy as np

from packtool import schema
from packtool.schema.manifest import CONSERVED_COUNTS
from packtool.verify import Check
from packtool.verify.audit import is_int, listed, section, value
from packtool.verify.scan import CONSERVE, COUNTS, SRC, Failures, Totals

LISTS = ("skipped", "dropped", "truncated", "split")


# --------------------------------------------------------------------------------------------
# source_index: each document once (split parts `parts` times), nothing dropped packed


def source_check(manifest: dict | None, fail: Failures, tot: Totals, each: int = 1) -> Check:
    """No source_index twice, except the parts of a document the manifest lists under `split`
    (exactly `parts` times); nothing listed as dropped appears in the rows. `fail`: rows whose
    source_index entries do not match their documents (the scan's per-row check). `each`: the
    documents one example makes (a preference pack's pair: 2, one a side)."""
    if fail.count:
        return fail.check(SRC, "", {})
    src = tot.all_sources()
    stray = _out_of_range(manifest, tot, src)
    if stray:
        return Check(SRC, False, stray, {"documents": int(src.size)})
    uniq, counts = np.unique(src, return_counts=True)
    split = {
        int(x.get("source_index", -1)): int(x.get("parts", 0)) for x in listed(manifest, "split")
    }
    ev = {"documents": int(src.size), "unique": int(uniq.size), "split_documents": len(split)}
    want = np.full(uniq.size, each, np.int64)
    if split:
        keys = np.fromiter(split.keys(), np.int64, len(split))
        ok = np.isin(keys, uniq)
        if not ok.all():
            k = int(keys[~ok][0])
            msg = f"source_index {k} is listed under split in the manifest but no part of it is in the rows"
            return Check(SRC, False, msg, ev)
        want[np.searchsorted(uniq, keys)] = np.fromiter(split.values(), np.int64, len(split))
    bad = np.flatnonzero(counts != want)
    if bad.size:
        v = int(uniq[bad[0]])
        hits = _locate_source(tot, v)
        why = " (a document packed twice; only parts of split documents may repeat)"
        if v in split:
            why = " (its split parts)"
        elif each == 2:
            why = " (a pair's two sides, one each: a side lost or packed twice)"
        msg = (
            f"source_index {v} appears {int(counts[bad[0]])} times ({_where_text(hits)}), "
            f"expected {int(want[bad[0]])}{why}{_duplicate_rows(tot, hits)}"
            + (f"; {bad.size} indices in all" if bad.size > 1 else "")
        )
        first = [dict(zip(("shard", "row", "document"), h, strict=True)) for h in hits]
        return Check(SRC, False, msg, {**ev, "first": first})
    drop_idx = np.array(
        [d.get("source_index", -1) for d in listed(manifest, "dropped")], dtype=np.int64
    )
    both = np.intersect1d(drop_idx, uniq)
    if both.size:
        at = _where_text(_locate_source(tot, int(both[0])))
        msg = f"source_index {int(both[0])} is listed as dropped in the manifest but packed ({at})"
        return Check(SRC, False, msg, ev)
    msg = (
        "every pair's source_index on its two sides only"
        if each == 2
        else "no document packed twice"
    )
    return Check(SRC, True, msg + (f" ({len(split)} split into parts)" if split else ""), ev)


def source_bound(m: dict | None) -> tuple[int, str] | None:
    """(n, what): every source_index lies in [0, n); n is counts.examples_read, or for a mixture the
    end of its last input's block (schema.input_problems: the blocks follow each other from 0). None
    where the manifest does not say."""
    inputs = (m or {}).get("inputs")
    if inputs:
        blocks = [e.get("block") if isinstance(e, dict) else None for e in inputs]
        blocks = [b for b in blocks if isinstance(b, dict)]
        keys = ("offset", "records", "copies")
        if len(blocks) != len(inputs) or not all(is_int(b.get(k)) for b in blocks for k in keys):
            return None
        last = blocks[-1]
        end = last["offset"] + last["copies"] * last["records"]
        return end, "the end of the mixture's last input block"
    n = section(m, "counts").get("examples_read")
    return (n, "counts.examples_read") if is_int(n) and n >= 0 else None


def _out_of_range(m: dict | None, tot: Totals, src: np.ndarray) -> str:
    """'source_index 99999 (data/x row 0 document 0) is outside [0, 200) ...' where a document's
    source_index names no record that was read, else ''."""
    bound = source_bound(m)
    if bound is None or not src.size:
        return ""
    n, what = bound
    bad = src[(src < 0) | (src >= n)]
    if not bad.size:
        return ""
    v = int(bad[0])
    more = f"; {bad.size} such documents in all" if bad.size > 1 else ""
    return (
        f"source_index {v} ({_where_text(_locate_source(tot, v, 1))}) is outside [0, {n}) "
        f"({what}): it names no record that was read{more}; the row was edited or the manifest "
        f"belongs to another pack: re-pack with packtool pack"
    )


def _locate_source(tot: Totals, value: int, limit: int = 3) -> list[tuple[str, int, int]]:
    """(shard, row, document) of the first `limit` documents with source index `value` (rare path)."""
    hits = []
    for vals, (shard, row0, off) in zip(tot.source_index, tot.source_rows, strict=True):
        for j in np.flatnonzero(vals == value)[: limit - len(hits)].tolist():
            r = int(np.searchsorted(off, j, side="right")) - 1
            hits.append((shard, row0 + r, j - int(off[r])))
        if len(hits) >= limit:
            break
    return hits


def _where_text(hits: list[tuple[str, int, int]]) -> str:
    return ", ".join(f"{shard} row {row} document {doc}" for shard, row, doc in hits)


def _duplicate_rows(tot: Totals, hits: list[tuple[str, int, int]]) -> str:
    """'; data/x row 7 holds the same documents as data/x row 3 ([4, 9]): a duplicated row', when
    two of the rows holding a repeated source index hold exactly the same source indices."""
    seen: dict[tuple, tuple[str, int]] = {}
    for shard, row in dict.fromkeys((shard, row) for shard, row, _ in hits):
        key = ()  # the row's source indices
        for vals, (s, row0, off) in zip(tot.source_index, tot.source_rows, strict=True):
            if s == shard and row0 <= row < row0 + off.size - 1:
                key = tuple(vals[off[row - row0] : off[row - row0 + 1]].tolist())
        if key in seen:
            s0, r0 = seen[key]
            return f"; {shard} row {row} holds the same documents as {s0} row {r0} ({list(key)}): a duplicated row"
        seen[key] = (shard, row)
    return ""


def _missing_sources(m: dict, tot: Totals, limit: int = 3) -> str:
    """Source indices in [0, examples_read) that are in no row and not listed as skipped or dropped,
    e.g. a document merged into its neighbour, a row overwritten by a copy of another, or a
    source_index edited to name no record."""
    n = section(m, "counts").get("examples_read")
    lists = isinstance(m.get("skipped"), list) and isinstance(m.get("dropped"), list)
    if not is_int(n) or n < 0 or not lists:
        return ""
    accounted = [x.get("source_index") for key in ("skipped", "dropped") for x in listed(m, key)]
    accounted = [i for i in accounted if is_int(i)]
    found = np.concatenate([tot.all_sources(), np.asarray(accounted, np.int64)])
    missing = np.setdiff1d(np.arange(n, dtype=np.int64), found)
    if not missing.size:
        return ""
    head = ", ".join(str(int(x)) for x in missing[:limit]) + (
        f" (+{missing.size - limit} more)" if missing.size > limit else ""
    )
    return (
        f": source_index {head} {'is' if missing.size == 1 else 'are'} in no row and not listed as skipped or "
        f"dropped (merged into another document, its row overwritten or its source_index edited); "
        f"`packtool verify PACK --sources` names the row"
    )


# --------------------------------------------------------------------------------------------
# the manifest's numbers


def counts_check(
    m: dict, tot: Totals, pack_len: int | None, layout: schema.Layout | None = None
) -> Check:
    """The manifest's counts of rows, documents, tokens and loss tokens are what is on disk (and,
    in a padded pack, tokens.doc_pad the pad slots inside documents)."""
    problems = []
    want = {
        "counts.rows": tot.rows,
        "counts.documents": tot.documents,
        "tokens.out": tot.tokens,
        "tokens.loss_out": tot.loss_tokens,
        "tokens.pad": tot.rows * (pack_len or 0) - tot.tokens,
    }
    if (layout is not None and layout.padded) or value(m, "tokens.doc_pad") is not None:
        want["tokens.doc_pad"] = tot.doc_pad
    for key, have in want.items():
        v = value(m, key)
        if v is None:
            problems.append(f"{key} is not recorded")
        elif v != have:
            problems.append(f"{key} is {v} in the manifest, {have} on disk")
    if tot.num_tokens_sum != tot.tokens:
        problems.append(f"sum of num_tokens {tot.num_tokens_sum} != {tot.tokens} document tokens")
    ev = {"rows": tot.rows, "documents": tot.documents, "tokens_out": tot.tokens}
    ev["loss_tokens"] = tot.loss_tokens
    msg = "; ".join(problems) or "rows, documents, tokens and loss tokens match"
    return Check(COUNTS, not problems, msg, ev)


def conservation_check(m: dict, tot: Totals) -> Check:
    """Every example read is skipped, dropped or packed (whole, truncated or split), and tokens in =
    out + cut: the manifest's own arithmetic (schema.conservation_problems), then the rows against
    it (the table above; a preference pair is two documents)."""
    c, tokens = section(m, "counts"), section(m, "tokens")
    for k in ("in", "out", "cut", "loss_in", "loss_out", "loss_first_token", "loss_cut"):
        if tokens.get(k) is not None and not is_int(tokens[k]):
            raise TypeError(f"tokens.{k} is {tokens[k]!r}, not an integer")
    problems = schema.conservation_problems(
        c, tokens, {k: m[k] for k in LISTS if isinstance(m.get(k), list)}, inputs=m.get("inputs")
    )
    if m.get("inputs") and not problems:
        problems += input_rows_problems(m["inputs"], tot.all_sources())
    v = {k: c.get(k) for k in CONSERVED_COUNTS}
    if all(is_int(x) for x in v.values()):  # the rows against the counts
        docs = v["packed"] + v["truncated"] + v["split_parts"]
        if m.get("task") == "preference":  # an example is a pair: two documents
            docs *= 2
        whole = v["packed"] + v["truncated"] + v["split"]
        uniq = int(np.unique(tot.all_sources()).size)
        # a record in no row is named whatever the counts say; a mixture's weights leave gaps in
        # its blocks, so there only where the counts disagree (as before)
        differ = docs != tot.documents or uniq != whole
        missing = _missing_sources(m, tot) if differ or not m.get("inputs") else ""
        found = []
        if docs != tot.documents:
            found.append(
                f"packed + truncated + split_parts = {docs} documents expected, {tot.documents} in the "
                "rows"
            )
        if uniq != whole:
            found.append(
                f"{uniq} distinct source indices in the rows, but packed + truncated + split = {whole}"
            )
        if found:  # the records in no row, named after the first count they explain
            found[0] += missing
        elif missing:
            found.append(missing.removeprefix(": "))
        problems += found
    ev = {f"tokens_{k}": tokens.get(k) for k in ("in", "out", "cut")}
    msg = "; ".join(problems) or "tokens in = out + cut; every example accounted for"
    return Check(CONSERVE, not problems, msg, {**ev, **v})


def input_rows_problems(inputs: list, sources: np.ndarray) -> list[str]:
    """A mixture's rows against its `inputs`: every document's source_index falls in an input's
    block [offset, offset + copies * records), and each block holds packed + truncated + split of
    that input's distinct source indices (schema.input_problems has checked the blocks first)."""
    uniq = np.unique(np.asarray(sources, dtype=np.int64))
    covered = np.zeros(uniq.size, bool)
    problems = []
    for k, e in enumerate(inputs, 1):
        blk, c = e["block"], e["counts"]
        lo, hi = blk["offset"], blk["offset"] + blk["copies"] * blk["records"]
        inside = (uniq >= lo) & (uniq < hi)
        covered |= inside
        want = c["packed"] + c["truncated"] + c["split"]
        if int(inside.sum()) != want:
            problems.append(
                f"input {k} ({e.get('spec')}): {int(inside.sum())} distinct source indices in its "
                f"block [{lo}, {hi}) in the rows, but its packed + truncated + split = {want}"
            )
    if not covered.all():
        stray = uniq[~covered]
        problems.append(
            f"source_index {int(stray[0])} is in no input's block"
            + (f" ({stray.size} such indices)" if stray.size > 1 else "")
        )
    return problems
