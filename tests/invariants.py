"""Check every invariant of docs/ARCHITECTURE.md ("Schema", "Semantics") over a written pack folder (reusable by any test).

    from invariants import check_pack
    manifest = check_pack(out_dir)                 # structure, schema, every row, manifest, hashes
    manifest = check_pack(out_dir, source=data)    # + each document's tokens/labels vs the input

Row checks are vectorized over a whole shard: the expected position_ids / document_id are rebuilt
from seq_lengths (one segment per document plus the pad tail) and compared slot by slot.
Layouts (manifest pad_to_multiple N, fixed_docs with max_docs K): every row lists exactly K entries,
empty ones (0, source_index -1) last, which are then set aside; seq_lengths are ceil(u/N)*N of the
real lengths u in seq_lengths_unpadded, the slots past u hold the pad id with label -100, and
num_tokens, tokens.out count real tokens (tokens.doc_pad the padding inside documents).
`find_problems` returns the list of violations instead of raising.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import numpy as np

IGNORE = -100  # written out, not imported: the oracle does not trust packtool.schema


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def _fixed(table, name, pack_len) -> np.ndarray:
    col = table.column(name).combine_chunks()
    return col.values.to_numpy()[
        col.offset * pack_len : (col.offset + len(col)) * pack_len
    ].reshape(len(col), pack_len)


def _lists(table, name):
    col = table.column(name).combine_chunks()
    offsets = col.offsets.to_numpy().astype(np.int64)
    return col.values.to_numpy()[offsets[0] : offsets[-1]], offsets - offsets[0]


def _check_rows(
    table,
    pack_len: int,
    pad_id: int,
    labels_equal_ids: bool,
    where: str,
    problems: list[str],
    docs_out: list,
    multiple: int = 1,
    fixed: int = 0,
) -> dict:
    k = table.num_rows
    before = len(problems)
    ids = _fixed(table, "input_ids", pack_len)
    labels = _fixed(table, "labels", pack_len)
    pos = _fixed(table, "position_ids", pack_len)
    doc = _fixed(table, "document_id", pack_len)
    seq, seq_off = _lists(table, "seq_lengths")
    srcv, src_off = _lists(table, "source_index")
    num_tokens = table.column("num_tokens").to_numpy().astype(np.int64)
    num_loss = table.column("num_loss_tokens").to_numpy().astype(np.int64)
    if multiple > 1:
        real, real_off = _lists(table, "seq_lengths_unpadded")
        if not np.array_equal(real_off, seq_off):
            problems.append(f"{where}: seq_lengths_unpadded and seq_lengths differ in length")
            return {}
    else:
        real = seq

    def bad(mask_rows, what):
        rows = np.flatnonzero(mask_rows)
        if rows.size:
            problems.append(
                f"{where}: {what} (rows {rows[:5].tolist()}{'…' if rows.size > 5 else ''})"
            )

    if fixed:  # exactly K entries, empty ones last with source_index -1; then set them aside
        bad(np.diff(seq_off) != fixed, f"seq_lengths not exactly {fixed} entries (fixed docs)")
        bad(np.diff(src_off) != fixed, f"source_index not exactly {fixed} entries (fixed docs)")
        if len(problems) > before:
            return {}
        grid, sgrid = seq.reshape(k, fixed), srcv.reshape(k, fixed)
        empty = grid == 0
        bad((empty[:, :-1] & ~empty[:, 1:]).any(1), "an empty entry before a document")
        bad((empty & (sgrid != -1)).any(1), "an empty entry's source_index is not -1")
        keep = ~empty.reshape(-1)
        seq_off = np.concatenate(([0], np.cumsum((~empty).sum(1))))
        seq, srcv, real, src_off = seq[keep], srcv[keep], real[keep], seq_off
    if multiple > 1:
        if seq.size and (
            real.min() < 1 or not np.array_equal(seq, -(-real // multiple) * multiple)
        ):
            problems.append(
                f"{where}: seq_lengths are not ceil(unpadded / {multiple}) * {multiple}"
            )
            return {}

    ndocs = np.diff(seq_off)
    bad(ndocs < 1, "row without documents")
    bad(np.diff(src_off) != ndocs, "source_index and seq_lengths differ in length")
    if seq.size and seq.min() < 1:
        problems.append(f"{where}: a document has length < 1")
    row_sum = (
        np.add.reduceat(seq.astype(np.int64), seq_off[:-1]) if seq.size else np.zeros(k, np.int64)
    )
    row_sum = np.where(ndocs > 0, row_sum, 0)
    real_sum = (
        np.add.reduceat(real.astype(np.int64), seq_off[:-1]) if real.size else np.zeros(k, np.int64)
    )
    real_sum = np.where(ndocs > 0, real_sum, 0)
    bad(real_sum != num_tokens, "num_tokens != sum(real lengths)")
    bad(row_sum > pack_len, "documents exceed pack_len")
    if len(problems) > before:  # the segment layout below needs consistent seq_lengths
        return {}
    # segments per row: the documents, then the pad tail (possibly empty)
    pad = pack_len - row_sum
    seg_len = np.empty(seq.size + k, dtype=np.int64)
    seg_doc = np.empty(seq.size + k, dtype=np.int64)
    seg_is_pad = np.zeros(seq.size + k, dtype=bool)
    ins = seq_off[1:] + np.arange(k)  # where each row's pad segment goes
    is_doc = np.ones(seq.size + k, dtype=bool)
    is_doc[ins] = False
    seg_len[is_doc] = seq
    seg_len[~is_doc] = pad
    seg_is_pad[~is_doc] = True
    seg_doc[is_doc] = np.arange(seq.size) - np.repeat(seq_off[:-1], ndocs)
    seg_doc[~is_doc] = -1
    seg_start = np.cumsum(seg_len) - seg_len
    slot = np.arange(k * pack_len, dtype=np.int64)
    exp_pos = (slot - np.repeat(seg_start, seg_len)).reshape(k, pack_len)
    exp_doc = np.repeat(seg_doc, seg_len).reshape(k, pack_len)
    pad_slot = np.repeat(seg_is_pad, seg_len).reshape(k, pack_len)
    seg_real = seg_len.copy()
    seg_real[is_doc] = real
    seg_real[~is_doc] = 0
    doc_pad = (exp_pos >= np.repeat(seg_real, seg_len).reshape(k, pack_len)) & ~pad_slot
    bad(((labels != IGNORE) & doc_pad).any(1), "a document's padding carries a label")
    bad(((ids != pad_id) & doc_pad).any(1), f"a document's padding is not the pad id {pad_id}")
    bad(
        (pos != exp_pos).any(1),
        "position_ids do not restart at 0 for every document / the pad tail",
    )
    bad((doc != exp_doc).any(1), "document_id is not 0..k-1 per document and -1 on padding")
    starts = (exp_pos == 0) & ~pad_slot
    bad(
        ((labels != IGNORE) & starts).any(1),
        "a document's first token carries a label (must be -100)",
    )
    bad(((labels != IGNORE) & pad_slot).any(1), "padding carries a label")
    bad(((ids != pad_id) & pad_slot).any(1), f"padding is not the pad id {pad_id}")
    if labels_equal_ids:
        bad(
            ((labels != IGNORE) & (labels != ids)).any(1),
            "a label is neither -100 nor the token id (unshifted)",
        )
    bad((labels != IGNORE).sum(1) != num_loss, "num_loss_tokens != count(labels != -100)")
    if ids.size and ids.min() < 0:
        problems.append(f"{where}: negative token id")
    docs_out.append((ids, labels, seq, seq_off, srcv, real))
    return {
        "rows": k,
        "tokens": int(real_sum.sum()),
        "doc_pad": int(doc_pad.sum()),
        "loss": int(num_loss.sum()),
        "docs": ndocs,
    }


def _check_source(docs_out, source, pack_len: int, manifest: dict, problems: list[str]) -> None:
    """Each document's tokens equal a slice of its source example; labels too, bar the first."""
    ds = source.dataset
    # a cache entry may store a loss_mask instead of labels: then labels through data.labels
    all_labels = None if "labels" in ds.column_names else source.labels()
    by_src = {int(s): i for i, s in enumerate(np.asarray(source.source_index).tolist())}
    seen: dict[int, list[int]] = {}
    taken: dict[int, set[int]] = {}
    for ids, labels, seq, seq_off, srcv, real in docs_out:
        for r in range(ids.shape[0]):
            col = 0
            for q in range(seq_off[r], seq_off[r + 1]):
                n, s = int(real[q]), int(srcv[q])  # real tokens; the slots place the next one
                c0, col = col, col + int(seq[q])
                if s not in by_src:
                    problems.append(f"source_index {s} is not in the input")
                    continue
                ex = ds[by_src[s]]
                tok = np.asarray(ex["input_ids"], dtype=np.int64)
                lab = ex["labels"] if all_labels is None else all_labels[by_src[s]].as_py()
                lab = np.asarray(lab, dtype=np.int64)
                got, got_lab = ids[r, c0 : c0 + n], labels[r, c0 : c0 + n]
                # offsets where this document could come from (split parts may repeat content)
                used = taken.setdefault(s, set())
                cands = [
                    o
                    for o in range(0, max(1, len(tok)), pack_len)
                    if o not in used and np.array_equal(tok[o : o + n], got)
                ]
                if not cands:
                    problems.append(f"document from example {s} does not match its tokens")
                else:
                    ok = [
                        o
                        for o in cands
                        if got_lab[0] == IGNORE and np.array_equal(got_lab[1:], lab[o + 1 : o + n])
                    ]
                    if not ok:
                        problems.append(
                            f"document from example {s}: labels differ from the input's "
                            "(or the first label is not -100)"
                        )
                    used.add((ok or cands)[0])
                    seen.setdefault(s, []).append(n)
    dropped = {d["source_index"] for d in manifest.get("dropped", [])}
    truncated = {d["source_index"] for d in manifest.get("truncated", [])}
    for s, i in by_src.items():
        length = int(source.lengths[i])
        got = seen.get(s, [])
        if s in dropped:
            if got:
                problems.append(f"example {s} is listed as dropped but was packed")
        elif s in truncated:
            if got != [pack_len]:
                problems.append(f"example {s} was truncated but packed as {got}")
        elif sum(got) != length:
            problems.append(f"example {s}: {length} tokens in, {sum(got)} packed (parts {got})")


def find_problems(folder, source=None, labels_equal_ids: bool = True) -> list[str]:
    import pyarrow.parquet as pq

    from packtool import schema

    folder = Path(folder)
    problems: list[str] = []
    mpath = folder / schema.MANIFEST
    if not mpath.is_file():
        return [f"{folder}: no {schema.MANIFEST}"]
    manifest = json.loads(mpath.read_text())
    L = int(manifest["pack_len"])
    pad_id = int(manifest["pad_id"])
    if manifest.get("schema_version") != schema.SCHEMA_VERSION:
        problems.append(
            f"schema_version {manifest.get('schema_version')} != {schema.SCHEMA_VERSION}"
        )
    entries = manifest["shards"]
    expected_files = [
        f"{schema.DATA_DIR}/{schema.shard_name(i, len(entries))}" for i in range(len(entries))
    ]
    if [e["file"] for e in entries] != expected_files:
        problems.append(f"shard names {[e['file'] for e in entries]} != {expected_files}")
    on_disk = (
        sorted(str(p.relative_to(folder)) for p in (folder / schema.DATA_DIR).glob("*"))
        if (folder / schema.DATA_DIR).is_dir()
        else []
    )
    if on_disk != sorted(expected_files):
        problems.append(f"files in data/ {on_disk} != manifest {expected_files}")
    extra = sorted(
        p.name for p in folder.iterdir() if p.name not in (schema.MANIFEST, schema.DATA_DIR)
    )
    if extra:
        problems.append(f"unexpected files in the pack folder: {extra}")
    if problems:
        return problems
    multiple, fixed = int(manifest.get("pad_to_multiple", 1)), manifest.get("fixed_docs", False)
    fixed = int(manifest["max_docs"]) if fixed else 0
    want = schema.arrow_schema(L, multiple > 1)
    rows = tokens = loss = doc_pad = 0
    docs_hist: list[np.ndarray] = []
    docs_out: list = []
    for e in entries:
        path = folder / e["file"]
        if _sha256(path) != e["sha256"]:
            problems.append(f"{e['file']}: sha256 differs from the manifest")
        pf = pq.ParquetFile(path)
        got = pf.schema_arrow
        if (
            not got.equals(want, check_metadata=False)
            or (got.metadata or {}).get(b"packtool_schema_version")
            != str(schema.SCHEMA_VERSION).encode()
        ):
            problems.append(f"{e['file']}: schema {got} != schema v1 for pack_len {L}")
            continue
        if any(c in got.names for c in schema.FORBIDDEN_COLUMNS):
            problems.append(f"{e['file']}: has a forbidden column")
        table = pf.read()
        if table.num_rows != e["rows"]:
            problems.append(f"{e['file']}: {table.num_rows} rows, manifest says {e['rows']}")
        stats = _check_rows(
            table, L, pad_id, labels_equal_ids, e["file"], problems, docs_out, multiple, fixed
        )
        if stats:
            rows += stats["rows"]
            tokens += stats["tokens"]
            doc_pad += stats["doc_pad"]
            loss += stats["loss"]
            docs_hist.append(stats["docs"])
    if problems:
        return problems

    c, t = manifest["counts"], manifest["tokens"]
    docs = np.concatenate(docs_hist) if docs_hist else np.zeros(0, np.int64)

    def eq(what, a, b):
        if a != b:
            problems.append(f"manifest: {what}: {a} != {b}")

    eq("counts.rows vs rows in shards", c["rows"], rows)
    eq("counts.documents vs documents in shards", c["documents"], int(docs.sum()))
    eq("tokens.out vs num_tokens in shards", t["out"], tokens)
    eq("tokens.loss_out vs num_loss_tokens in shards", t["loss_out"], loss)
    eq("tokens.pad", t["pad"], rows * L - tokens)
    eq("tokens.doc_pad", t.get("doc_pad", 0), doc_pad)
    if multiple == 1:
        eq("no tokens.doc_pad without --pad-to-multiple", "doc_pad" in t, False)
    eq("examples_read = tokenized + skipped", c["examples_read"], c["tokenized"] + c["skipped"])
    eq(
        "tokenized = packed + truncated + split + dropped",
        c["tokenized"],
        c["packed"] + c["truncated"] + c["split"] + c["dropped"],
    )
    eq(
        "documents = packed + truncated + split_parts",
        c["documents"],
        c["packed"] + c["truncated"] + c["split_parts"],
    )
    eq("tokens.in = out + cut", t["in"], t["out"] + t["cut"])
    eq(
        "loss_in = loss_out + loss_first_token + loss_cut",
        t["loss_in"],
        t["loss_out"] + t["loss_first_token"] + t["loss_cut"],
    )
    eq("len(skipped)", len(manifest["skipped"]), c["skipped"])
    eq("len(dropped)", len(manifest["dropped"]), c["dropped"])
    eq("len(truncated)", len(manifest["truncated"]), c["truncated"])
    eq("len(split)", len(manifest["split"]), c["split"])
    eq("split_parts", sum(s["parts"] for s in manifest["split"]), c["split_parts"])
    eq(
        "truncated cut",
        sum(x["cut"] for x in manifest["truncated"])
        + sum(x["length"] for x in manifest["dropped"]),
        t["cut"],
    )
    eq("lower_bound_rows", manifest["lower_bound_rows"], math.ceil((tokens + doc_pad) / L))
    if rows:
        eq("fill", manifest["fill"], round(tokens / (rows * L), 6))
        dpr = manifest["docs_per_row"]
        eq("docs_per_row.min/max", (dpr["min"], dpr["max"]), (int(docs.min()), int(docs.max())))
        hist = {str(k): int(v) for k, v in enumerate(np.bincount(docs)) if v}
        eq("docs_per_row.histogram", dpr["histogram"], hist)
    if manifest["max_docs"]:
        if docs.size and docs.max() > manifest["max_docs"]:
            problems.append(
                f"a row holds {int(docs.max())} documents > max_docs {manifest['max_docs']}"
            )
    if source is not None:
        eq("tokenized vs source", c["tokenized"], len(source.lengths))
        eq("tokens.in vs source", t["in"], int(np.asarray(source.lengths, dtype=np.int64).sum()))
        _check_source(docs_out, source, L, manifest, problems)
    return problems


def check_pack(folder, source=None, labels_equal_ids: bool = True) -> dict:
    """Assert every invariant; return the manifest."""
    problems = find_problems(folder, source=source, labels_equal_ids=labels_equal_ids)
    assert not problems, "pack invariants violated:\n  " + "\n  ".join(problems[:30])
    return json.loads((Path(folder) / "manifest.json").read_text())
