"""verify --sources: tokenize the pack's sources again and compare every document with the shards.

Integrity proves a pack is self-consistent; it cannot see damage that is consistent but wrong (a
prompt token turned into a trained label, a token id changed, every count and checksum re-signed).
This layer recomputes what the shards must hold from the data itself (docs/ARCHITECTURE.md,
"Verify", layer 3):

    manifest  sources [path, size, sha256]  tokenizer {files_hash, chat_template_hash}  options
              inputs (a mixture): each input's data, read options, weight, files; seed
        │ TokenizeConfig rebuilt from the recorded options, cache off    load.py           OPTIONS
        │ sha256 of each source file; the tokenizer's files hash         load.py           FILES, TOKENIZER
        ▼ (a poisoned tokenization cache cannot hide damage)
    pipeline.load_tokenized ──▶ per record: input_ids, labels, source_index  (the path pack used)
        │ chat template hash against the manifest                       load.py           TEMPLATE
        ▼ pack.overflow.apply_overflow: the packer's own cut            pieces.py
    pieces  record, start, length; every piece's first label IGNORE_INDEX (pack.gather.copy_rows)
    shard rows, batch by batch: each document matched to the piece of its source_index (a split
    record's parts by a hash of their ids), one vector compare; a difference names the record
    (file:line), the shard, the row, the position, got vs expected ids and labels   match.py  TOKENS
    the manifest's counts and lists against the records tokenized again pieces.py         ACCOUNT

A mixture (manifest `inputs`) is rebuilt input by input: each input's files checked against its
recorded files, each tokenized with its recorded read options, then weighted with the pack's seed
(tokenization.mixture, the path pack took), so the global source indices are the packer's; a
difference names the input, record and copy ("input 2 (alpaca.json) record 17, copy 1: ...").

check_sources below runs the stages in this order; a Stop (load.py) is a failure that leaves
nothing to compare: the later checks are reported as not run.
"""

from __future__ import annotations

import os
import time

import numpy as np

from packtool.verify import Check
from packtool.verify.audit import list_shards, load_manifest
from packtool.verify.sources import load
from packtool.verify.sources.match import Compare, missing_pieces, scan_shard, settle_deferred
from packtool.verify.sources.pieces import account_check, expected_pieces


def check_sources(
    pack: str,
    data: str | None = None,
    sample: int | None = None,
    seed: int = 0,
    progress: bool = False,
) -> list[Check]:
    """The `verify --sources` checks of the pack folder `pack`: sources re-read from `data` (None:
    where the manifest says), tokenized again with the recorded tokenizer, template and options,
    and every document (or `sample` records, picked with `seed`) compared with the shards."""
    checks: list[Check] = []
    manifest, merr = load_manifest(pack)
    try:
        if merr:
            raise load.Stop(load.FILES, merr)
        opt_check, cfg = load.options_check(manifest)
        read = cfg.read
        checks.append(opt_check)
        if "pack_len" not in manifest:
            raise load.Stop(load.FILES, "the manifest records no pack_len")
        if manifest.get("inputs") and data is not None and not os.path.isdir(data):
            raise load.Stop(
                load.FILES,
                f"{pack} is a mixture of {len(manifest['inputs'])} inputs: each is read where the "
                "manifest records it (inputs[].data, relative to where pack ran); DATA may only be "
                "that folder: packtool verify PACK --sources FOLDER",
            )
        # a mixture's relative inputs: from DATA (the folder pack ran in), else from here or beside PACK
        specs = load.input_specs_from(manifest, pack, data)
        if specs:
            checks.append(load.inputs_files_check(specs, manifest))
        else:
            data = data if data is not None else load.recorded_data(manifest, pack, read.split)
            checks.append(load.files_check(data, manifest, read.split)[0])
        checks.append(load.tokenizer_check(cfg, manifest))
        t_tok = time.perf_counter()
        pack_seed = manifest.get("seed") if isinstance(manifest.get("seed"), int) else 0
        tokenized = load.tokenize_again(specs or data, cfg, progress=progress, seed=pack_seed)
        t_tok = time.perf_counter() - t_tok
        checks.append(load.template_check(cfg, manifest, tokenized))
        exp = expected_pieces(tokenized, manifest)
        where = load.Provenance(data, read)
        if specs:
            where = load.MixtureProvenance(specs, tokenized.inputs)
        if manifest.get("task") == "preference":  # documents keyed 2 * source_index + side
            where = load.SideProvenance(where)
        cmp = Compare(exp, where, seen=np.zeros(exp.piece_row.size, np.int64))
        # the packed records by their source_index; a preference pair's two sides are one record
        candidates = np.flatnonzero(exp.num_pieces > 0)  # tokenized records (a pair: its sides)
        of_candidate = exp.source_index(exp.src[candidates])
        packed = np.unique(of_candidate)
        wanted_records = sampled = None
        if sample is not None and sample < packed.size:
            rng = np.random.default_rng(seed)
            sampled = np.sort(rng.choice(packed, size=sample, replace=False))
            wanted_records = candidates[np.isin(of_candidate, sampled)]  # a pair: both sides
        wanted = None if wanted_records is None else exp.src[wanted_records]
        t_cmp = time.perf_counter()
        for shard in list_shards(pack):
            try:
                scan_shard(cmp, pack, shard, wanted)
            except Exception as e:  # unreadable shard: the integrity layer says why
                cmp.strays(1, [f"{shard}: not compared ({type(e).__name__}: {e})"])
        settle_deferred(cmp)
        missing_pieces(cmp, wanted_records)
        t_cmp = time.perf_counter() - t_cmp
        compared = cmp if wanted_records is None else None  # None: first-token loss not known
        checks.append(account_check(manifest, tokenized, exp, compared, where))
        checks.append(_tokens_check(cmp, packed, sampled, sample, seed, t_tok, t_cmp))
    except load.Stop as stop:
        checks.append(stop.check)
        done, why = {c.name for c in checks}, f"not run: {stop.check.name} failed"
        checks += [Check(n, False, why, skipped=True) for n in load.ORDER if n not in done]
    order = {n: i for i, n in enumerate(load.ORDER)}
    checks.sort(key=lambda c: order.get(c.name, len(load.ORDER)))
    return checks


def _tokens_check(cmp: Compare, packed, sampled, sample, seed, t_tok, t_cmp) -> Check:
    """Check TOKENS from what the comparison found: its first difference (+ how many more), or
    how much was compared. `packed`: the packed records' source indices (a preference pair is one
    record), `sampled`: those --sample picked, else None."""
    n_rec = int(packed.size if sampled is None else sampled.size)
    scope = (
        f"every one of the {n_rec} packed records"
        if sampled is None
        else f"{n_rec} of {packed.size} packed records (--sample {sample}, --seed {seed})"
    )
    ev = {
        "records_compared": n_rec,
        "records_packed": int(packed.size),
        "documents": cmp.docs_compared,
        "tokens_compared": cmp.tokens_compared,
        "documents_failed": cmp.failed.count + cmp.stray.count,
        "first": cmp.failed.examples + cmp.stray.examples,
        "seconds_tokenize": round(t_tok, 3),
        "seconds_compare": round(t_cmp, 3),
        "sample": sample,
        "seed": seed,
    }
    if sampled is not None:
        ev["sampled_source_index"] = sampled.tolist()
    if ev["first"]:
        n_bad = ev["documents_failed"]
        more = f" (+{n_bad - 1} more)" if n_bad > 1 else ""
        return Check(load.TOKENS, False, ev["first"][0]["message"] + more, ev)
    return Check(
        load.TOKENS,
        True,
        f"{scope}: {cmp.docs_compared} documents, {cmp.tokens_compared:,} tokens "
        f"of input_ids and labels equal the sources tokenized again ({t_tok:.1f} s tokenize, "
        f"{t_cmp:.2f} s compare)",
        ev,
    )
