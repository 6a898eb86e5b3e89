"""Work a run will need later, done while this process would otherwise wait.

    caller that knows what comes next      idle.later(fn), or    e.g. `pack`: its stage's first-use
                                           with idle.meanwhile(fn)   costs (pack.warm); a chat run:
                                                                 transformers' jinja renderer
                                                                 (pipeline.plan_run)
    a wait on work running elsewhere       idle.run()            each fn once, in order, then the wait
      (the fast backend building on its thread)

A fn that fails is dropped: the work it prepares runs later anyway and reports its own error there.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

_pending: list[Callable[[], object]] = []


def later(fn: Callable[[], object]) -> None:
    """Run `fn` at this process's next idle wait (or never, if the run has none)."""
    _pending.append(fn)


def pending() -> bool:
    return bool(_pending)


def run() -> None:
    """Run what is pending, first registered first; each fn runs at most once."""
    while _pending:
        fn = _pending.pop(0)
        try:
            fn()
        except Exception:  # noqa: BLE001 - its real run comes later and reports it
            pass


def clear() -> None:
    _pending.clear()


@contextmanager
def meanwhile(fn: Callable[[], object] | None) -> Iterator[None]:
    """`later(fn)` for the `with` block; at its end fn is dropped if no wait ran it."""
    if fn is not None:
        later(fn)
    try:
        yield
    finally:
        if fn is not None and fn in _pending:
            _pending.remove(fn)
