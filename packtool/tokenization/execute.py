"""The local executor: a RunPlan's step over the batches, in `num_proc` worker processes, in order.

    workers(plan, --num-proc, input bytes) -> processes
    run_local(plan, batches, num_proc, check) ──▶ (batch, StepResult), ...   in input order

With a FastCheck, each batch that `check.take`s gives a probe (its head) that the fast step and
the reference step both encode, in a worker while the others encode (in this process with one).
The workers fork as soon as the fast backend is built; while it builds on its thread, this process
runs packtool.idle's work (the pack stage's warm-up, transformers' renderer imported for the
reference: inherited by the workers instead of paid in each). Every probe is concluded before any
refused record is reported and at the end, so a difference (UseReference) is raised before the
cache entry is committed.

Memory: at most IN_FLIGHT_PER_WORKER batches per worker are in flight; the parent holds one
batch's result at a time. The executor decides nothing: the plan and the check are made elsewhere.
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import deque

from packtool import idle
from packtool.forking import forking_workers, ignore_sigint
from packtool.tokenization.encode import EncodeStep, StepResult
from packtool.tokenization.fast_check import FastCheck, compare
from packtool.tokenization.run_plan import RunPlan

SMALL_BYTES = 4 << 20  # below this much input one process is faster than starting workers
IN_FLIGHT_PER_WORKER = 2

# the steps of this worker process (set once, at its start): the run's, and the reference for probes
_WORKER_STEP: EncodeStep | None = None
_WORKER_REFERENCE: EncodeStep | None = None


def _worker_init(step: EncodeStep, reference: EncodeStep | None) -> None:
    global _WORKER_STEP, _WORKER_REFERENCE
    ignore_sigint()  # Ctrl-C is the parent's to handle (blocked by _start_pool around the fork)
    _WORKER_STEP, _WORKER_REFERENCE = step, reference


def _worker_run(batch) -> StepResult:
    return _WORKER_STEP(batch)


def _worker_check(probe) -> tuple[StepResult, StepResult]:
    return _WORKER_STEP(probe), _WORKER_REFERENCE(probe)


def _start_pool(step: EncodeStep, reference: EncodeStep | None, num_proc: int):
    """The worker pool, forked in forking_workers: a Ctrl-C (sent to the whole process group) waits
    until every worker ignores it, then reaches the parent alone, which terminates them."""
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    with forking_workers():
        return mp.get_context(method).Pool(
            num_proc, initializer=_worker_init, initargs=(step, reference)
        )


def workers(plan: RunPlan, num_proc: int | None, total_bytes: int) -> int:
    """Processes for the run: one for pre-tokenized input (vectorized validation outruns reading:
    workers would only add copies) and for small input; else --num-proc, or every core."""
    if plan.kind == "pretokenized" or (num_proc is None and total_bytes < SMALL_BYTES):
        return 1
    return num_proc or os.cpu_count() or 1


def _probe(check: FastCheck | None, b):
    n = check.take(b.file, b.fmt, len(b)) if check is not None else 0
    return b.head(n) if n else None


def run_local(plan: RunPlan, batches, num_proc: int, check: FastCheck | None = None):
    """Yields (batch, result) in input order; at most IN_FLIGHT_PER_WORKER batches per worker are
    read ahead, so memory does not grow with the input."""
    step, reference = plan.step, plan.reference
    if num_proc <= 1:
        for b in batches:
            probe = _probe(check, b)
            if probe is not None:  # the reference first: it builds while the fast backend does
                ref = reference(probe)
                if plan.building():
                    idle.run()
                check.conclude(len(probe), compare(step(probe), ref, probe))
            yield b, step(b)
        return
    if plan.building():
        idle.run()  # what the caller needs later (packtool.idle), while the fast backend builds
    plan.wait()  # built before forking: workers inherit it (and what the idle work imported)
    pool = _start_pool(step, reference, num_proc)
    try:
        checking: deque = deque()  # (probe, its async pair of results), in submission order

        def settled(result: StepResult | None) -> None:
            # every probe before a refusal is reported, and at the end; the ready ones as they come
            while checking and (result is None or result.rejects or checking[0][1].ready()):
                probe, res = checking.popleft()
                check.conclude(len(probe), compare(*res.get(), probe))

        pending: deque = deque()
        for b in batches:
            probe = _probe(check, b)
            if probe is not None:
                checking.append((probe, pool.apply_async(_worker_check, (probe,))))
            pending.append((b, pool.apply_async(_worker_run, (b,))))
            if len(pending) >= num_proc * IN_FLIGHT_PER_WORKER:
                done, res = pending.popleft()
                result = res.get()
                settled(result)
                yield done, result
        while pending:
            done, res = pending.popleft()
            result = res.get()
            settled(result)
            yield done, result
        settled(None)
        pool.close()
    finally:
        pool.terminate()
        pool.join()
