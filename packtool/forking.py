"""Forked worker processes: the parent handles Ctrl-C, the workers ignore it; the workers'
garbage collector leaves what they inherit alone.

    parent   with forking_workers():         SIGINT held back in this thread, so
                 fork the workers             a Ctrl-C sent to the whole process group while they
             (leaving: a held-back Ctrl-C     fork waits ...and reaches the parent alone, as
              raises KeyboardInterrupt here)  KeyboardInterrupt, once every worker ignores it;
                                              the parent's objects frozen meanwhile (gc.freeze)
    worker   ignore_sigint()                 its first step (a pool's initializer): SIGINT
                                              ignored, then unblocked (it inherited the mask)

    ordered_map(fn, items, num_proc)  the local executor: (item, its pending fn(item)) in input
                                      order, here (one process) or in forked workers that
                                      inherit fn; it knows nothing of what fn does

Where the platform has no pthread_sigmask, nothing is blocked and a worker only ignores SIGINT.
"""

from __future__ import annotations

import gc
import multiprocessing as mp
import signal
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

_MASK = hasattr(signal, "pthread_sigmask")


@contextmanager
def forking_workers() -> Iterator[None]:
    """Around forking worker processes: SIGINT blocked in this thread (the workers inherit the
    mask), and this process's objects frozen (gc.freeze), so that the workers' collections neither
    walk nor copy-on-write the heap they inherit (transformers, numba)."""
    gc.freeze()
    if _MASK:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        gc.unfreeze()  # (first: the unblock may raise a held-back KeyboardInterrupt)
        if _MASK:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def ignore_sigint() -> None:
    """A forked worker's first step: ignore SIGINT (Ctrl-C is the parent's), then unblock it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _MASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


IN_FLIGHT_PER_WORKER = 2

_WORKER_FN: Callable | None = None  # a worker process's fn (set once, at its start)


def _worker_init(fn: Callable) -> None:
    global _WORKER_FN
    ignore_sigint()
    _WORKER_FN = fn


def _worker_call(item):
    return _WORKER_FN(item)


def start_pool(fn: Callable, num_proc: int):
    """A pool of `num_proc` workers that inherit `fn` (forked where the platform can)."""
    method = "fork" if "fork" in mp.get_all_start_methods() else "spawn"
    with forking_workers():
        return mp.get_context(method).Pool(num_proc, initializer=_worker_init, initargs=(fn,))


class _Done:
    """fn(item) computed here: the AsyncResult interface (get, ready) of a pool's result."""

    def __init__(self, value):
        self.value = value

    def get(self):
        return self.value

    def ready(self) -> bool:
        return True


def ordered_map(fn: Callable, items: Iterable, num_proc: int) -> Iterator[tuple]:
    """(item, result) for every item, in input order; result.get() is fn(item). `items` is read
    lazily, IN_FLIGHT_PER_WORKER items a worker ahead of the one yielded: memory does not grow with
    the input."""
    if num_proc <= 1:
        for item in items:
            yield item, _Done(fn(item))
        return
    pool = start_pool(fn, num_proc)
    try:
        pending: deque = deque()
        for item in items:
            pending.append((item, pool.apply_async(_worker_call, (item,))))
            if len(pending) >= num_proc * IN_FLIGHT_PER_WORKER:
                yield pending.popleft()
        while pending:
            yield pending.popleft()
        pool.close()
        pool.join()  # every task done: the results a caller kept are ready before the pool ends
    finally:
        pool.terminate()
        pool.join()
