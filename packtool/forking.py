"""Forked worker processes and Ctrl-C: the parent handles it, the workers ignore it.

    parent   with sigint_blocked():          SIGINT held back in this thread, so a Ctrl-C sent
                 fork the workers             to the whole process group while they fork waits
             (leaving: a held-back Ctrl-C     ...and reaches the parent alone, as
              raises KeyboardInterrupt here)  KeyboardInterrupt, once every worker ignores it
    worker   ignore_sigint()                 its first step (a pool's initializer): SIGINT
                                              ignored, then unblocked (it inherited the mask)

Where the platform has no pthread_sigmask, nothing is blocked and a worker only ignores SIGINT.
"""

from __future__ import annotations

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


def ignore_sigint() -> None:
    """A forked worker's first step: ignore SIGINT (Ctrl-C is the parent's), then unblock it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if _MASK:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
