"""verify: integrity of every row, and isolation through a real attention kernel.

    integrity.py   numpy over every row of every shard + the manifest (no model)
    isolation.py   tiny random-weight decoders: packed == alone, swap, causal probe, agreement with
                   the fp32 reference; the negative control must fail; measure_tolerances
    backends.py    which attention kernel runs, the varlen functions transformers calls, the
                   counted calls (what really ran), auto's capability check and trial call
    run.py         VerifyConfig -> VerifyResult (the one entry point the CLI calls)
    selftest.py    builds its own pack in a temporary folder and verifies it

Every layer reports `Check`s: a name, pass/fail/skip, the evidence and one message. Nothing here
imports torch or transformers at module level, and verifying a pack (or the self-test) needs only
numpy, pyarrow, numba, torch and transformers: no datasets, tokenizer backends or flash-attn.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Check:
    """One verified property. `skipped` checks are neither passed nor failed (shown, never hidden)."""

    name: str
    passed: bool
    message: str = ""
    evidence: dict[str, Any] = field(default_factory=dict)
    skipped: bool = False

    @property
    def status(self) -> str:
        return "skip" if self.skipped else ("pass" if self.passed else "fail")

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "passed": self.passed,
            "message": self.message,
            "evidence": self.evidence,
        }
