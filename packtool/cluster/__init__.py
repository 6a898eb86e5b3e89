"""The Ray engine (`--engine ray`): the same pack, byte for byte, with the work spread over a Ray
cluster. Ray is an optional extra (`pip install -e '.[ray]'` in packtool's checkout, or
`pip install 'ray>=2.40,<3'`: Ray Core's tasks); nothing here is
imported unless `--engine ray` is given.

    driver                                    Ray tasks (Session.run: <= workers at a time)
    ──────                                    ─────────
    a local cluster starts on a thread; the driver is one of its workers (the same task
    functions, called in the driver: while it starts, and in every run with 2+ workers; session.py)
    locate the files (io.readers)
    per file ─────────────────────────────▶  size, sha256, FileDecision, parts   tokenize.py
    RunPlan = tokenization.pipeline.plan_run(cfg, decisions)   (the local run's own)
    per part ─────────────────────────────▶  read a part, plan.step (a worker keeps its tokenizer)
                                              tokens ──▶ SCRATCH/part-k.ids, .labels   tokenize.py
    ◀── (index, length, loss) per example + one meta per part (records, lines, rejects, ...)
    FastCheck.probes ─────────────────────▶  fast vs reference on each file's head (with the
                                              parts, before them)
    FastCheck.conclude; a difference: the parts again on plan.on_difference
    global source indices, skipped records, warnings, the TokenizedData (no tokens)
    overflow + plan (pack/, the numba planner), row order, shard of every piece
    per shard: its pieces (part, offset) ─▶  pread them from the part files (pack.gather's
                                              FileGather), pack.write.write_shards  write.py
    ◀── each shard's entry and totals
    manifest.json (pack/run.py), atomic rename; SCRATCH removed

Only lengths, counts and small per-part and per-shard records go through Ray; the tokens are
written once to the part files (cluster.parts) and read once by the shard writers. SCRATCH is a
folder beside the pack (`packtool pack`: a filesystem every worker must reach anyway) or in the
temporary folder (the Python API on a local cluster); `profile` keeps none (Session.keep_tokens).
A task holds one batch while tokenizing, and one row group's staging buffers while writing.

The Ray engine decides nothing of its own: the input's kind and each file's format
(tokenization.source), the plan and the fast path's verdict (tokenization.pipeline), the retry on
the reference path, the Stats and the run's meta (tokenization.pipeline) are the local engine's objects
on the same records; source indices, skipped records with file and line, --on-error and --limit are
counted from what the parts report, and the writer is pack.write.write_shards on
each shard: the shards and the manifest are the local engine's (tests/cluster).
"""

from __future__ import annotations

INSTALL_HINT = "pip install 'ray>=2.40,<3' (or pip install -e '.[ray]' in packtool's checkout)"


def ray_missing() -> str | None:
    """Why the Ray engine cannot run here (None when it can)."""
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        return f"--engine ray needs Ray, which is not installed: {INSTALL_HINT}"
    return None
