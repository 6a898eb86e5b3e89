"""Forked worker processes: the parent handles Ctrl-C, the workers ignore it; the workers'
garbage collector leaves what they inherit alone.

    parent   with forking_workers():         SIGINT held back in this thread (sigint_blocked), so
                 fork the workers             a Ctrl-C sent to the whole process group while they
             (leaving: a held-back Ctrl-C     fork waits ...and reaches the parent alone, as
              raises KeyboardInterrupt here)  KeyboardInterrupt, once every worker ignores it;
                                              the parent's objects frozen meanwhile (gc.freeze)
    worker   ignore_sigint()                 its first step (a pool's initializer): SIGINT
                                              ignored, then unblocked (it inherited the mask)

Where the platform has no pthread_sigmask, nothing is blocked and a worker only ignores SIGINT.
"""

from __future__ import annotations

import gc
import signal
from collections.abc import Iterator
from contextlib import contextmanager

_MASK = hasattr(signal, "pthread_sigmask")


@contextmanager
def sigint_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread for the block (processes forked in it inherit the mask)."""
    if _MASK:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        if _MASK:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


@contextmanager
def forking_workers() -> Iterator[None]:
    """Around forking worker processes: SIGINT blocked (sigint_blocked), and this process's objects
    frozen (gc.freeze), so that the workers' collections neither walk nor copy-on-write the heap
    they inherit (transformers, numba: 0.3-0.4 s a tokenizing worker in a cold Llama 3 run). On
    leaving, this process's objects are collected as before."""
    gc.freeze()
    try:
        with sigint_blocked():
            yield
    finally:
        gc.unfreeze()


def ignore_sigint() -> None:
    """A forked worker's first step: ignore SIGINT (Ctrl-C is the parent's), then unblock it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _MASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
