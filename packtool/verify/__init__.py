"""verify: integrity of every row, and isolation through a real attention kernel.

    run.py           VerifyConfig (packtool.config) -> VerifyResult: the one entry point the CLI calls
    integrity.py     the integrity layer's walk: shards, batches, one list of Checks (no model)
      audit.py         the files against the contract: manifest, shard list, sha256, Arrow schema
      scan.py          the vectorized row scan of a batch, the text naming a failing slot, and
                       the integrity checks' names in report order
      accounting.py    where every example and token went: the manifest's arithmetic and the rows
    sampling.py      the rows isolation runs on: chosen during the scan, or built from single documents;
                     on CPU each cut to a prefix that keeps its first two documents whole (crop)
    isolation.py     the isolation layer: per (preset model of arch.tiny, backend) the runs
      forwards.py      the runs of both isolation checks (packed / alone / swapped / last-token /
                       control; --model's input sets and per-module probe) and their differences
      tolerances.py    what counts as equal per dtype, for both checks: the one table (constants)
      messages.py      every Check the isolation checks, the FlashAttention check and --model report
    model_check.py   --model: a tiny copy of the user's architecture (arch) fed PackedCollator's batch
      model_bound.py   that check in a spawned child, bounded in time, memory and threads
    backends.py      which attention kernel runs, the varlen functions transformers calls, the
                     counted calls (what really ran), auto's capability check and trial call
    selftest.py      builds its own pack in a temporary folder and verifies it
    sources/         verify --sources: tokenize the sources again and compare every document
      names.py         the sources checks' names, in report order; Stop
      options.py       the recorded options → a TokenizeConfig
      load.py          the recorded files, tokenizer and template still match; tokenize again
      pieces.py        the documents the packer cut from each record (pack.overflow's own cut)
      match.py         each shard's documents matched to the expected pieces
      compare.py       token-by-token comparison and the text naming a mismatch
      accounting.py    every expected piece found once

The layout of a row and the rules checked are the pack contract (packtool.schema;
docs/ARCHITECTURE.md, "Schema" and "Verify").

Every layer reports `Check`s: a name, pass/fail/skip, the evidence and one message. Nothing here
imports torch or transformers at module level, and verifying a pack (or the self-test) needs only
numpy, pyarrow, numba, torch and transformers: no datasets, tokenizer backends or flash-attn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Check:
    """One verified property. `skipped` checks are neither passed nor failed (shown, never hidden);
    `unchecked` ones could not be run on what was asked (an architecture verify --model cannot
    build, a layer kind its tiny copy lacks): never a pass, not a failure either (exit code 3)."""

    name: str
    passed: bool
    message: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    skipped: bool = False
    unchecked: bool = False

    @property
    def status(self) -> str:
        if self.unchecked:
            return "not_checked"
        return "skip" if self.skipped else ("pass" if self.passed else "fail")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "passed": self.passed,
            "message": self.message,
            "evidence": self.evidence,
        }
