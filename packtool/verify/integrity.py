"""Integrity layer: every row of every shard, plus the manifest, with numpy only (no model).

    check_integrity(OUT)
      manifest.json ───────────────────────────── audit.manifest_check
      data/*.parquet, for each shard:
        open, Arrow schema ────────────────────── audit.shard_schema        -> schema, no attention_mask
                                                  (the layout: schema.Layout.from_manifest)
        batches of ~4M token slots:
          scan.batch_columns -> scan.scan_rows ── row checks (seq_lengths ... num_loss_tokens)
          scan.Totals.add                         what the manifest is compared with
          sampling.Sampler.offer                  rows for the isolation layer (same pass)
      sha256 of every shard (a thread, overlapping the decoding; a file that cannot be read, a
      folder named like a shard, is a failed "shards on disk" naming it and the OS's reason)
      ─────────────────────────────────────────── audit.shards_check, accounting.source_check,
                                                  accounting.counts_check, accounting.conservation_check

Each failure names the check, the shard, the row and the position; the first few per check are kept
as evidence, the rest are counted (docs/ARCHITECTURE.md, "Verify").
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np

from packtool import schema
from packtool.io.files import sha256_file
from packtool.schema.rows import flat_list
from packtool.verify import Check, accounting, audit, scan
from packtool.verify.sampling import Sampler

BATCH_TOKENS = 1 << 22  # rows per decoded batch ~ 4M tokens: 4 int32 columns = 64 MB
SCANNED = (*scan.ROW_CHECKS, *scan.LAYOUT_CHECKS, scan.SRC, *scan.PAIR_CHECKS)


@dataclass
class _Walk:
    """How the shards are scanned (pack_len, pad id, layout, pairs?, the two samplers), and what
    was found: per-check failures, totals, rows per readable shard, and the schema,
    attention_mask and unreadable-shard problems."""

    pack_len: int | None
    pad_id: int | None
    vocab_size: int | None
    layout: schema.Layout
    paired: bool
    samplers: tuple[Sampler, Sampler]
    fails: dict[str, scan.Failures] = field(
        default_factory=lambda: {n: scan.Failures() for n in SCANNED}
    )
    tot: scan.Totals = field(default_factory=scan.Totals)
    shard_rows: dict[str, int] = field(default_factory=dict)
    schema_bad: list[str] = field(default_factory=list)
    mask_bad: list[str] = field(default_factory=list)
    read_bad: list[str] = field(default_factory=list)
    pairs_not_run: list[str] = field(default_factory=list)  # rows the pair rules could not read


def _sha256(path: str) -> tuple[str | None, str | None]:
    """(sha256, None), or (None, the OS's reason) when the file cannot be read (a folder named
    like a shard, no permission): a failed check, never a traceback."""
    try:
        return sha256_file(path), None
    except OSError as e:
        return None, f"{type(e).__name__}: {e.strerror or e}"


def check_integrity(path: str, sample_rows: int = 0, seed: int = 0) -> tuple[list[Check], dict]:
    """(checks, summary) of the pack folder `path`: the summary carries pack_len, rows, documents
    and `samples`, up to `sample_rows` rows with >= 2 documents chosen with `seed` during the scan
    (and `singles`, rows with one document, in case no row holds two)."""
    manifest, why = audit.load_manifest(path)
    shards = audit.list_shards(path)
    pool = ThreadPoolExecutor(max_workers=1)  # hashing overlaps decoding (hashlib drops the GIL)
    hashes = {s: pool.submit(_sha256, os.path.join(path, s)) for s in shards}
    # only an int from the manifest is used; else the first shard that opens says (the manifest
    # check fails either way)
    pack_len, opened = audit.manifest_pack_len(manifest), {}
    for shard in shards if pack_len is None else ():
        opened[shard] = audit.open_shard(os.path.join(path, shard))
        if opened[shard][0] is not None:
            pack_len = schema.pack_len_of(opened[shard][0].schema_arrow)
            break
    pad_id, vocab_size = audit.manifest_pad_id(manifest), schema.vocab_size_of(manifest)
    layout = schema.Layout.from_manifest(manifest)
    paired = isinstance(manifest, dict) and manifest.get("task") == "preference"
    checks = [audit.manifest_check(path, manifest, why)]
    if not shards:
        where = f"{os.path.join(path, schema.DATA_DIR)}/*.parquet"
        checks.append(Check(scan.SHARDS, False, f"no shards under {where}"))
        pool.shutdown()
        return checks, {"pack_len": pack_len, "rows": 0}

    samplers = Sampler(sample_rows, seed), Sampler(2 * sample_rows, seed + 7)
    walk = _Walk(pack_len, pad_id, vocab_size, layout, paired, samplers)
    for shard in shards:
        pf, bad = opened.pop(shard, None) or audit.open_shard(os.path.join(path, shard))
        if pf is None:
            walk.read_bad.append(f"{shard}: {bad}")
            continue
        walk.shard_rows[shard] = pf.metadata.num_rows
        problem, mask, scannable = audit.shard_schema(pf, shard, pack_len, layout.padded, paired)
        walk.mask_bad += [mask] if mask else []
        walk.schema_bad += [f"{shard}: {problem}"] if problem else []
        if not scannable:
            walk.read_bad.append(
                f"{shard}: rows not scanned (columns missing or input_ids not of pack_len {pack_len})"
            )
            continue
        try:
            _scan_shard(pf, shard, walk)
        except Exception as e:  # a corrupt file: name it, do not crash the whole report
            walk.read_bad.append(f"{shard}: could not decode rows ({type(e).__name__}: {e})")

    bad = walk.schema_bad + walk.read_bad
    msg = "; ".join(bad) or f"v{schema.SCHEMA_VERSION}, pack_len {pack_len}, {len(shards)} shard(s)"
    checks.append(Check(scan.SCHEMA, not bad, msg, {"pack_len": pack_len, "shards": len(shards)}))
    mask = "; ".join(walk.mask_bad) or "no attention_mask column"
    checks.append(Check(scan.NO_MASK, not walk.mask_bad, mask))
    rows_ev = {"rows_scanned": walk.tot.rows, "tokens_scanned": walk.tot.rows * (pack_len or 0)}
    # rows never scanned (see schema): no row check passes for them
    unscanned = _not_scanned(walk.read_bad, "the row checks")
    for name in scan.row_checks(layout.padded, bool(layout.fixed_docs)):
        passed = scan.passed_text(name, pad_id, vocab_size)
        not_run = scan.not_run_text(name, pad_id, vocab_size) or unscanned
        checks.append(walk.fails[name].check(name, passed, rows_ev, not_run=not_run))
    pairs_not_run = unscanned or _not_scanned(walk.pairs_not_run, "the pair rules")
    for name in scan.PAIR_CHECKS if paired else ():
        ev = {"rows_scanned": walk.tot.rows}
        ev |= {"rows_not_checked": len(walk.pairs_not_run)} if walk.pairs_not_run else {}
        checks.append(walk.fails[name].check(name, scan.PASSED[name], ev, "failed", pairs_not_run))
    done = {s: h.result() for s, h in hashes.items()}
    pool.shutdown()
    hashes_done = {s: h for s, (h, _) in done.items() if h is not None}
    unreadable = {s: why for s, (_, why) in done.items() if why is not None}
    tot, src_fails = walk.tot, walk.fails[scan.SRC]
    todo = [
        (
            scan.SHARDS,
            audit.shards_check,
            manifest,
            shards,
            walk.shard_rows,
            hashes_done,
            unreadable,
        )
    ]
    todo += [(scan.SRC, accounting.source_check, manifest, src_fails, tot, 1 + paired)]
    if manifest is not None:
        todo += [(scan.COUNTS, accounting.counts_check, manifest, tot, pack_len, layout)]
        todo += [(scan.CONSERVE, accounting.conservation_check, manifest, tot)]
    checks += [audit.guarded(*t) for t in todo]
    summary = {"pack_len": pack_len, "rows": tot.rows, "documents": tot.documents}
    return checks, summary | {"samples": samplers[0].rows(), "singles": samplers[1].rows()}


def _not_scanned(where: list[str], what: str) -> str | None:
    """The message of a check that no scanned row failed but that did not run on every row."""
    if not where:
        return None
    more = f" (+{len(where) - 1} more)" if len(where) > 1 else ""
    return f"{what} did not run on every row, no row they read fails; not run: {where[0]}{more}"


def _scan_shard(pf, shard: str, walk: _Walk) -> None:
    """Scan every row of one shard, batch by batch, into `walk`; rows are offered to the samplers.
    A preference pack's rows are checked against the pair rules too (scan.pair_checks)."""
    row0, pack_len, layout, samplers = 0, walk.pack_len, walk.layout, walk.samplers
    columns = [*schema.COLUMNS, *([schema.UNPADDED_COLUMN] if layout.padded else [])]
    columns += [schema.SIDE_COLUMN] if walk.paired else []
    for batch in pf.iter_batches(
        batch_size=max(1, BATCH_TOKENS // pack_len), columns=columns, use_threads=True
    ):
        R = batch.num_rows
        if R == 0:
            continue
        cols = scan.batch_columns(batch, pack_len, row0)
        res = scan.scan_rows(cols, walk.pad_id, layout, walk.vocab_size)
        t = res.pop("_totals")
        gidx = np.arange(walk.tot.rows, walk.tot.rows + R, dtype=np.uint64)
        samplers[0].offer(t["valid"] & (t["ndocs"] >= 2), gidx, cols, shard, row0)
        samplers[1].offer(t["valid"] & (t["ndocs"] == 1), gidx, cols, shard, row0)
        walk.tot.add(t, cols, shard, row0)
        for name, r in res.items():
            walk.fails[name].add(int(r["rows"].size), scan.examples(name, r, cols, shard, row0))
        if walk.paired:
            _pair_rules(cols, flat_list(batch.column(schema.SIDE_COLUMN)), shard, row0, walk)
        row0 += R


def _pair_rules(cols: dict, side: tuple, shard: str, row0: int, walk: _Walk) -> None:
    """The pair rules (scan.pair_checks) over the batch's rows whose side and source_index lists
    have one entry per seq_lengths entry; every other row is a failure of pair sides / pair
    source naming it, and left out of the rules (they pair the lists entry by entry)."""
    side_off, side_val = side
    n_seq = np.diff(cols["seq_off"])
    n_side, n_src = np.diff(side_off), np.diff(cols["src_off"])
    ok = (n_side == n_seq) & (n_src == n_seq)
    for name, n, what, why in (
        (scan.PAIR_SIDES, n_side, "sides", "the side column was edited"),
        (scan.PAIR_SOURCE, n_src, "source_index entries", "see the source_index check"),
    ):
        bad = np.flatnonzero(n != n_seq)
        shown = [
            (int(r), -1, f"lists {int(n[r])} {what} for {int(n_seq[r])} documents ({why}); "
             "its pairs are not checked")
            for r in bad[: scan.MAX_EXAMPLES]
        ]  # fmt: skip
        walk.fails[name].add(int(bad.size), _pair_examples(shown, shard, row0))
    keep = np.flatnonzero(ok)
    walk.pairs_not_run += [f"{shard} row {row0 + int(r)}" for r in np.flatnonzero(~ok)]
    if not keep.size:
        return
    ids, labels, seq_off = cols["input_ids"], cols["labels"], cols["seq_off"]
    seq_val, src_val = cols["seq_val"], cols["src_val"]
    if keep.size < ok.size:  # the rows that pair up only (a sound pack: the batch as it is)

        def rows_of(off, val):  # the kept rows' entries of a list column, and their offsets
            n = np.diff(off)
            return np.asarray(val)[np.repeat(ok, n)], np.concatenate(([0], np.cumsum(n[keep])))

        seq_val, seq_off = rows_of(seq_off, seq_val)
        src_val, _ = rows_of(cols["src_off"], src_val)
        side_val, _ = rows_of(side_off, side_val)
        ids, labels = ids[keep], labels[keep]
    found = scan.pair_checks(ids, labels, seq_val, seq_off, src_val, side_val)
    for name, (count, shown) in found.items():
        shown = [(int(keep[r]), pos, text) for r, pos, text in shown]
        walk.fails[name].add(count, _pair_examples(shown, shard, row0))


def _pair_examples(shown: list[tuple[int, int, str]], shard: str, row0: int) -> list[dict]:
    """scan.pair_checks' failures as the scan's evidence entries."""
    return [
        {"shard": shard, "row": row0 + r, "position": None if pos < 0 else pos}
        | {"message": f"{shard} row {row0 + r}: {text}"}
        for r, pos, text in shown
    ]
