"""verify: integrity of every row, and isolation through a real attention kernel.

    run.py           VerifyConfig (packtool.config) -> VerifyResult: the one entry point the CLI calls
    integrity.py     every row, no model: audit.py (the files against the contract), scan.py (the
                     row scan and the checks' names), accounting.py (where every example went),
                     and the pair rules of a preference pack
    sampling.py      the rows isolation runs on
    isolation.py     per (tiny preset model, backend): forwards.py (the runs and their differences),
                     tolerances.py (what counts as equal), backends.py (which kernel runs, counted)
    model_check.py   --model: a tiny copy of the user's architecture (in a bounded
                     child; messages.py: its words)
    selftest.py      builds its own pack in a temporary folder and verifies it
    sources/         verify --sources: tokenize the sources again and compare every document

The layout of a row and the rules checked are the pack contract (packtool.schema;
docs/ARCHITECTURE.md, "Schema" and "Verify"). Every layer reports `Check`s; nothing here imports
torch or transformers at module level.
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
