"""`packtool verify --self-test`: build a small pack in a temporary folder, then verify it.

The pack is made of synthetic chat-like documents (a masked prompt, then a completion that carries
loss) by the production packer and writer; the helpers below only rewrite one shard of a copy, to
build the broken packs verify must catch (the tests use them the same way).

    "self-test pack"                the pack was written and reads back whole (manifest, rows, documents)
    every check of `verify`         on that pack
    "self-test: --pad-to-multiple 8 --fixed-docs --max-docs 6"   (_layout_check, integrity only) a
                                    pack of that layout passes, and a copy with a label on a
                                    document's padding fails document padding
    "self-test: broken copy caught" a copy with positions not reset in row 0 fails position_ids

    doc  = [p p p p c c c]           labels = [-100 -100 -100 -100 c c c]
    row  = doc0 doc1 ... pad         first label of each document forced to -100
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from packtool import schema
from packtool.io import shards
from packtool.io.files import sha256_file
from packtool.verify import Check, audit, scan
from packtool.verify import integrity as integ
from packtool.verify.run import verify
from packtool.verify.sampling import packed

SELF_TEST_PAD_ID = 0
SELF_TEST_VOCAB = 5000  # the synthetic tokenizer's vocab_size: ids 1..4999, the pad id 0
SELF_TEST_DOCS = 160  # documents of 8..pack_len // 3 tokens: all packed whole, several per row


def make_documents(
    n: int, *, seed: int = 0, min_len: int = 8, max_len: int = 200, vocab: int = SELF_TEST_VOCAB
):
    """n documents as (input_ids, labels) int32 arrays; ids avoid the pad id 0."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        length = int(rng.integers(min_len, max_len + 1))
        ids = rng.integers(1, vocab, size=length, dtype=np.int64).astype(np.int32)
        labels = ids.copy()
        prompt = int(rng.integers(1, max(2, length // 2)))
        labels[:prompt] = schema.IGNORE_INDEX
        docs.append((ids, labels))
    return docs


def write_documents(out: str, docs, pack_len: int, *, shard_rows: int = 16, **options) -> None:
    """Pack (input_ids, labels) documents into `out` with the production packer and writer;
    `options`: PackConfig's (max_docs, seed, pad_to_multiple, fixed_docs)."""
    from packtool.data.tokenized import TokenizedData
    from packtool.pack import PackConfig, pack_tokenized

    td = TokenizedData.from_lists(
        [d[0].tolist() for d in docs],
        [d[1].tolist() for d in docs],
        tokenizer={"name": "synthetic", "pad_id": SELF_TEST_PAD_ID, "vocab_size": SELF_TEST_VOCAB},
        format="synthetic",
    )
    pack_tokenized(td, PackConfig(pack_len=pack_len, shard_rows=shard_rows, **options), out)


def build_self_test_pack(
    out: str, *, pack_len: int = 1024, n_docs: int = SELF_TEST_DOCS, seed: int = 0
) -> str:
    """Write a pack of synthetic documents into `out`; returns which writer made it."""
    write_documents(
        out, make_documents(n_docs, seed=seed, max_len=pack_len // 3), pack_len, seed=seed
    )
    return "packtool.pack (bfd)"


def sample_rows(pack_len: int, rows: int, *, seed: int = 0, max_len: int | None = None):
    """`rows` isolation Samples laid out as the packer lays rows out (documents back to back,
    IGNORE_INDEX on each first label, positions by schema.position_ids), without writing a
    pack: what benchmarks/gpu_check.sh measures the tolerances on. Documents are 8..max_len tokens
    (default pack_len // 3), so every row holds >= 2 of them."""
    max_len = max_len or max(8, pack_len // 3)
    docs = iter(make_documents(rows * (pack_len // 8 + 2), seed=seed, min_len=8, max_len=max_len))
    out, doc = [], next(docs)
    for r in range(rows):
        row, used = [], 0
        while used + len(doc[0]) <= pack_len:
            row.append(doc)
            used += len(doc[0])
            doc = next(docs)
        out.append(packed(f"synthetic (seed {seed})", r, row, pack_len))
    return out


def read_shard(pack: str, index: int = 0):
    """(relative path, table) of the index-th shard of `pack`."""
    import pyarrow.parquet as pq

    rel = f"{schema.DATA_DIR}/{sorted(os.listdir(os.path.join(pack, schema.DATA_DIR)))[index]}"
    return rel, pq.read_table(os.path.join(pack, rel))


def token_column(table, name: str) -> np.ndarray:
    """A copy of a fixed-size-list column as an (R, L) int32 array."""
    L = table.schema.field(name).type.list_size
    return table.column(name).combine_chunks().flatten().to_numpy().reshape(-1, L).copy()


def replace_columns(table, **cols):
    """`table` with token columns replaced by (R, L) arrays and list columns by lists of arrays."""
    import pyarrow as pa

    for name, value in cols.items():
        i = table.schema.get_field_index(name)
        f = table.schema.field(name)
        if name in (*schema.LIST_COLUMNS, schema.UNPADDED_COLUMN):
            arr = pa.array([list(map(int, x)) for x in value], type=f.type)
        elif name in schema.SCALAR_COLUMNS:
            arr = pa.array(np.asarray(value), type=f.type)
        else:
            L = f.type.list_size
            arr = pa.FixedSizeListArray.from_arrays(
                pa.array(np.asarray(value, np.int32).reshape(-1), pa.int32()), L
            )
        table = table.set_column(i, f, arr)
    return table


def write_shard(pack: str, rel: str, table, *, fix_manifest: bool = True) -> None:
    """Overwrite shard `rel` with `table`; with fix_manifest, record its new rows and sha256 so that
    only the deliberate change is left for verify to find."""
    import pyarrow.parquet as pq

    path = os.path.join(pack, rel)
    pq.write_table(table, path, **shards.writer_options())
    if fix_manifest:
        mpath = os.path.join(pack, schema.MANIFEST)
        with open(mpath) as f:
            m = json.load(f)
        for s in m["shards"]:
            if s["file"] == rel:
                s["sha256"] = sha256_file(path)
                s["rows"] = table.num_rows
        shards.write_manifest(Path(pack), m)


def _break_positions(src: str, dst: str) -> None:
    """Copy the pack at `src` to `dst` with row 0 of the first shard's positions counting on
    across documents (the classic packing bug)."""
    shutil.copytree(src, dst)
    rel, table = read_shard(dst, 0)
    pos = token_column(table, "position_ids")
    pos[0] = np.arange(pos.shape[1])
    write_shard(dst, rel, replace_columns(table, position_ids=pos))


def _pack_check(out: str, writer: str, seconds: float, n_docs: int) -> Check:
    """The self-test pack reads back whole: a manifest that counts every document, shards whose
    rows and documents are what it says (else verify would pass on an empty or partial pack)."""
    import pyarrow.parquet as pq

    ev: dict = {"writer": writer, "documents_written": n_docs}

    def failed(why: str) -> Check:
        return Check("self-test pack", False, f"built with {writer}, but {why}", ev)

    m = schema.read_pack_manifest(out)
    if m is None:
        return failed(f"{out} has no readable packtool manifest")
    counts = audit.section(m, "counts")
    rows = docs = 0
    try:
        for entry in m.get("shards") or []:
            path = os.path.join(out, entry["file"])
            col = pq.read_table(path, columns=["seq_lengths"]).column("seq_lengths")
            rows += len(col)
            docs += sum(len(chunk.flatten()) for chunk in col.chunks)
    except Exception as e:  # any failure to read back is the check failing
        return failed(f"its shards do not read back ({type(e).__name__}: {e})")
    ev.update(rows=rows, documents=docs)
    problems = []
    if counts.get("examples_read") != n_docs or counts.get("documents") != n_docs:
        problems.append(
            f"the manifest counts {counts.get('examples_read')!r} examples read and "
            f"{counts.get('documents')!r} documents, {n_docs} were written"
        )
    if rows == 0 or rows != counts.get("rows"):
        problems.append(f"the shards hold {rows} rows, the manifest says {counts.get('rows')!r}")
    if docs != n_docs:
        problems.append(f"the rows hold {docs} documents, {n_docs} were written")
    if problems:
        return failed("; ".join(problems))
    msg = f"built with {writer} in {seconds:.2f} s: {n_docs} documents in {rows} rows, read back"
    return Check("self-test pack", True, msg, ev)


LAYOUT_MULTIPLE, LAYOUT_DOCS = 8, 6  # the self-test's padded + fixed-docs case


def _layout_check(tmp: str, seed: int) -> Check:
    """One more case, integrity only (cheap): documents padded to multiples of 8 in rows of exactly
    6 entries pass every check, and a copy with a label on a document's padding is caught."""
    out, broken = os.path.join(tmp, "layout"), os.path.join(tmp, "layout-broken")
    docs = make_documents(40, seed=seed + 1, min_len=3, max_len=60)
    layout = dict(max_docs=LAYOUT_DOCS, pad_to_multiple=LAYOUT_MULTIPLE, fixed_docs=True)
    write_documents(out, docs, 256, shard_rows=8, seed=seed, **layout)
    name = f"self-test: --pad-to-multiple {LAYOUT_MULTIPLE} --fixed-docs --max-docs {LAYOUT_DOCS}"
    failed = [c for c in integ.check_integrity(out)[0] if not c.passed and not c.skipped]
    if failed:
        return Check(name, False, f"the layout's pack fails {failed[0].name}: {failed[0].message}")
    shutil.copytree(out, broken)
    rel, table = read_shard(broken, 0)
    seq = table.column("seq_lengths").to_pylist()
    real = table.column(schema.UNPADDED_COLUMN).to_pylist()
    padded = [(r, d) for r, s in enumerate(seq) for d in range(len(s)) if s[d] > real[r][d]]
    if not padded:
        return Check(name, False, "the layout's pack has no padded document to damage")
    r, d = padded[0]
    hit = r, sum(seq[r][:d]) + real[r][d]  # the first pad slot of the first padded document
    lab = token_column(table, "labels")
    ids = token_column(table, "input_ids")
    lab[hit[0], hit[1]] = ids[hit[0], hit[1]]
    write_shard(broken, rel, replace_columns(table, labels=lab))
    bad = next(c for c in integ.check_integrity(broken)[0] if c.name == scan.DOC_PAD)
    caught = not bad.passed and f" row {hit[0]} position {hit[1]} " in bad.message
    msg = "a label on a document's padding PASSED the document padding check"
    if caught:
        msg = "passes integrity; a label on a document's padding is caught → " + bad.message
    return Check(name, caught, msg, {"check": scan.DOC_PAD})


def run_self_test(cfg):
    """Build a pack in a temporary folder, check that it reads back whole, verify it with `cfg`
    (path ignored), and check that the integrity layer catches a deliberately broken copy.
    Returns the VerifyResult."""
    with tempfile.TemporaryDirectory(prefix="packtool-selftest-") as tmp:
        out = os.path.join(tmp, "pack")
        t0 = time.perf_counter()
        writer = build_self_test_pack(out, n_docs=SELF_TEST_DOCS, seed=cfg.seed)
        built = _pack_check(out, writer, time.perf_counter() - t0, SELF_TEST_DOCS)
        result = verify(dataclasses.replace(cfg, path=out))
        broken = os.path.join(tmp, "broken")
        _break_positions(out, broken)
        checks, _ = integ.check_integrity(broken)
        pos = next(c for c in checks if c.name == scan.POS)
        caught = not pos.passed and " row 0 " in pos.message
        result.checks.append(_layout_check(tmp, cfg.seed))
        result.checks.insert(0, built)
        msg = f"positions not reset in row 0 → {pos.message}"
        if not caught:
            msg = "a copy with positions not reset in row 0 PASSED the position check: integrity has no power"
        result.checks.append(
            Check("self-test: broken copy caught", caught, msg, {"check": scan.POS})
        )
    result.self_test = True
    result.path = "(self-test)"
    return result
