"""Progress of long steps, on stderr only: a live bar on a terminal, one summary line otherwise.

    with Progress("tokenizing", unit="examples", enabled=True) as p:
        p.advance(examples=1024, tokens=371_000)
    # terminal: tokenizing ━━━━━━  20,000 examples  7.3M tokens  2.1M tokens/s  0:00:03
    # log:      tokenizing: 20,000 examples, 7.3M tokens in 3.4 s (5,882 examples/s, 2.1M tokens/s)

`enabled=False` (e.g. under `--json -`) prints nothing at all.
"""

from __future__ import annotations

import sys
import time


def _num(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.1f}M"
    if x >= 1e4:
        return f"{x / 1e3:.0f}k"
    return f"{x:,.0f}"


class Progress:
    def __init__(self, what: str, unit: str = "examples", enabled: bool = True, total: int | None = None):
        self.what, self.unit, self.enabled, self.total = what, unit, enabled, total
        self.count = 0
        self.tokens = 0
        self._bar = None
        self._task = None
        self._t0 = time.perf_counter()

    def __enter__(self) -> Progress:
        self._t0 = time.perf_counter()
        if self.enabled and sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as Bar

            self._bar = Bar(TextColumn(f"[bold]{self.what}"), BarColumn(),
                            TextColumn("{task.fields[status]}"), TimeElapsedColumn(),
                            console=Console(stderr=True), transient=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.what, total=self.total, status="")
        return self

    def advance(self, count: int = 0, tokens: int = 0) -> None:
        self.count += count
        self.tokens += tokens
        if self._bar is not None:
            self._bar.update(self._task, completed=self.count, status=self._status(live=True))

    def update(self, done: int, total: int | None = None) -> None:
        """Absolute progress (callbacks that report `done of total`)."""
        self.count = done
        if self._bar is not None:
            if total is not None and total != self.total:
                self.total = total
                self._bar.update(self._task, total=total)
            self._bar.update(self._task, completed=done, status=self._status(live=True))

    def _status(self, live: bool = False) -> str:
        dt = max(time.perf_counter() - self._t0, 1e-9)
        parts = [f"{self.count:,} {self.unit}"]
        if self.tokens:
            parts.append(f"{_num(self.tokens)} tokens")
        rate = f"{_num(self.tokens / dt)} tokens/s" if self.tokens else f"{_num(self.count / dt)} {self.unit}/s"
        return "  ".join(parts + [rate]) if live else ", ".join(parts) + f" in {dt:.1f} s ({rate})"

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
        if self.enabled and exc_type is None and self.count:
            sys.stderr.write(f"{self.what}: {self._status()}\n")
