"""The Ray engine (`--engine ray`): the same pack, byte for byte, with the work spread over a Ray
cluster. Ray is an optional extra (`pip install -e '.[ray]'` in packtool's checkout, or
`pip install 'ray[data]>=2.40,<3'`); nothing here is imported unless `--engine ray` is given.

    driver                                    Ray workers
    ──────                                    ───────────
    locate the files (io.readers)
    per file ─────────────────────────────▶  size, sha256, FileDecision, parts   files.py (tasks)
    RunPlan = tokenization.run_plan.plan_run(cfg, decisions)   (the local pipeline's own)
    parts ── ray.data.from_items ─────────▶  read a part, plan.step    map_batches  tokenize.py
                                              (tasks; a worker keeps its tokenizer) ──▶ object store
    ◀── (part, index, length, loss) + one meta row per part (records, lines, rejects, ...)
    FastCheck.probes ─────────────────────▶  fast vs reference on each file's head (tasks)
    FastCheck.conclude; a difference: the parts again on plan.on_difference
    global source indices, skipped records, warnings, the TokenizedData (no tokens)
    overflow + plan (pack/, the numba planner), row order, shard of every piece
    assignment per part, sub-plan per shard ─▶ map_batches: (shard, index, tokens) rows    write.py
                                               groupby(shard).map_groups: write one shard
    ◀── each shard's entry and totals
    manifest.json (pack/run.py), atomic rename

Only lengths, counts and small per-part and per-shard records reach the driver; tokens stay in
the object store (spilled to disk when it fills) between tokenizing and writing. A worker holds
one part's batches while tokenizing and one shard's documents while writing.

The Ray engine decides nothing of its own: the input's kind and each file's format
(tokenization.decide), the plan (tokenization.run_plan), the fast path's verdict
(tokenization.fast_check) and the run's meta (tokenization.run_meta) are the local pipeline's objects
on the same records; source indices, skipped records with file and line, --on-error and --limit are
counted from what the parts report, and the writer is pack.write.write_shards on
each shard: the shards and the manifest are the local engine's (tests/cluster).
"""

from __future__ import annotations

INSTALL_HINT = (
    "pip install 'ray[data]>=2.40,<3' (or pip install -e '.[ray]' in packtool's checkout)"
)


def ray_missing() -> str | None:
    """Why the Ray engine cannot run here (None when it can)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("ray.data") is None:
        return f"--engine ray needs Ray Data, which is not installed: {INSTALL_HINT}"
    return None
