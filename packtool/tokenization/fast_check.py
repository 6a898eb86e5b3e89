"""The fast path's check: fastokens and the best renderer against tokenizers + jinja.

`--tokenizer-backend auto` runs the fast path only where it gives ids, labels and refusals identical
to the reference path's on the probes:

    probe of the run's first file      its first batch's first CHECK_EXAMPLES examples
    probe of each later file           its first batch's first CHECK_PER_FILE examples (of the first
                                       CHECK_FILES files; after them, only of a file whose format
                                       was not probed yet)

    FastCheck(backend)    FastCheck.of(plan): None when the plan does not try it; backend: the plan's
                          BackendReport (fastokens, its renderer, why the renderer is jinja)
        .take(file, fmt, n)   examples to compare from this file's first batch of n (0: none)
        .probes(files)        take of each (file, fmt, n) in reading order: [(file, fmt, examples)]
        .conclude(n, where)   after one probe of n examples compared: identical (`where` None), or
                              raises UseReference (the run continues on the reference path,
                              RunPlan.on_difference; --tokenizer-backend fastokens: PacktoolError)
        .report               the BackendReport after the probes concluded so far

    compare(fast result, reference result, probe batch) -> None | where they first differ

The local process pool takes its probes as its batches stream past, the Ray engine all at once from
its file decisions; both conclude them in reading order with this one object.
"""

from __future__ import annotations

import dataclasses

from packtool.errors import PacktoolError
from packtool.tokenization.encode import StepResult
from packtool.tokenization.run_plan import BackendReport, RunPlan

CHECK_EXAMPLES = 256  # examples encoded by both backends before fastokens is trusted
CHECK_PER_FILE = 32  # ...and of each later file's first batch (a folder's files differ in format)
CHECK_FILES = 64  # files probed in full; beyond them only a file of a format not probed yet


class UseReference(Exception):
    """The fast path differed from the reference path on a probe: start again with the reference."""


class FastCheck:
    def __init__(self, backend: BackendReport):
        self.backend = backend  # the plan's, before any probe: fastokens, its renderer, its note
        self.files: list[str] = []  # files with a probe, in reading order
        self.formats: set[str] = set()
        self.examples = 0  # examples compared so far
        self.report: BackendReport | None = None

    @classmethod
    def of(cls, plan: RunPlan) -> FastCheck | None:
        """The check of a plan that tries the fast path (None when it does not)."""
        return cls(plan.backend) if plan.reference is not None else None

    def take(self, file: str, fmt: str | None, n: int) -> int:
        if not n or file in self.files:
            return 0
        if len(self.files) >= CHECK_FILES and fmt in self.formats:
            return 0
        first = not self.files
        self.files.append(file)
        self.formats.add(fmt)
        return min(n, CHECK_EXAMPLES if first else CHECK_PER_FILE)

    def probes(self, files: list[tuple[str, str, int]]) -> list[tuple[str, str, int]]:
        return [(f, fmt, k) for f, fmt, n in files if (k := self.take(f, fmt, n))]

    def conclude(self, n: int, where: str | None) -> None:
        self.examples += n
        check = {"examples": self.examples, "identical": where is None}
        if len(self.files) > 1:  # (one file: the report as it always was)
            check["files"] = len(self.files)
        backend = self.backend
        if where is None:
            self.report = dataclasses.replace(backend, check=check)
            return
        why = (
            f"the fast path (fastokens, {backend.renderer} renderer) differs from tokenizers + "
            f"jinja on {where}"
        )
        if backend.reason:  # (why the renderer is jinja)
            why = f"{backend.reason}; {why}"
        if backend.requested == "fastokens":
            raise PacktoolError(f"--tokenizer-backend fastokens: {why}; use --tokenizer-backend hf")
        raise UseReference(why)


def compare(a: StepResult, b: StepResult, probe) -> str | None:
    """None when the fast path's result `a` of the probe is the reference's `b`, else where they
    first differ."""
    if a.rejects == b.rejects and a.table.equals(b.table):
        return None
    ra, rb = a.table.to_pydict(), b.table.to_pydict()
    for j, (x, y) in enumerate(zip(ra["input_ids"], rb["input_ids"], strict=False)):
        if x != y or ra["labels"][j] != rb["labels"][j]:
            return probe.where(int(ra["source_index"][j]) - probe.start)
    return "the first batch"
