"""Progress of long steps: the library reports it, the caller decides how (and whether) to draw it.

A long step of the library (tokenizing, reading pre-tokenized input, writing shards) asks a
`Reporter` for a `Stage` and reports into it; it never draws anything itself:

    with reporter(progress).stage("tokenizing", unit="examples", detail="2 processes") as stage:
        stage.advance(count=1024, tokens=371_000)   # or stage.update(done, total)

`progress` is a Reporter (the CLI's commands.output.Output), True (`Terminal`: stderr, a live bar
on a terminal, one summary line per stage otherwise) or False/None (nothing at all).

    terminal: tokenizing (2 processes) ━━━━━━  20,000 examples  7.3M tokens  2.1M tokens/s  0:00:03
    log:      tokenizing (2 processes): 20,000 examples, 7.3M tokens in 3.4 s (5,882 examples/s, 2.1M tokens/s)

Pure: rich is imported only when a bar is drawn on a terminal.
"""

from __future__ import annotations

import sys
import time
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol, runtime_checkable


@runtime_checkable
class Reporter(Protocol):
    """Hands out the Stage of each long step."""

    def stage(
        self,
        what: str,
        *,
        unit: str = "examples",
        total: int | None = None,
        detail: str | None = None,
        spinner: bool = False,
    ) -> AbstractContextManager[Stage]:
        """`what`: the stage's name ("tokenizing"); `detail`: said once after it ("2 processes");
        `spinner`: a stage without a known count (a spinner on a terminal, not a bar)."""


class Silent:
    """Reports nothing (`progress=False`, `--json -`, quiet)."""

    @contextmanager
    def stage(self, what: str, **_options):
        yield Stage(what)


SILENT = Silent()


def _num(x: float) -> str:
    if x >= 1e6:
        return f"{x / 1e6:.1f}M"
    if x >= 1e4:
        return f"{x / 1e3:.0f}k"
    return f"{x:,.0f}"


class Stage:
    """One stage's progress, as the library reports it: its counts and clock; `line()` is its one
    summary line. This class draws nothing: Silent's, and Terminal's when stderr is not a terminal
    (one line when it ends)."""

    def __init__(self, what: str, unit: str = "examples", total: int | None = None):
        self.what, self.unit, self.total = what, unit, total
        self.count = 0
        self.tokens = 0
        self.t0 = time.perf_counter()

    def status(self, live: bool = False) -> str:
        dt = max(time.perf_counter() - self.t0, 1e-9)
        parts = [f"{self.count:,} {self.unit}"]
        if self.tokens:
            parts.append(f"{_num(self.tokens)} tokens")
        rate = (
            f"{_num(self.tokens / dt)} tokens/s"
            if self.tokens
            else f"{_num(self.count / dt)} {self.unit}/s"
        )
        return "  ".join(parts + [rate]) if live else ", ".join(parts) + f" in {dt:.1f} s ({rate})"

    def line(self) -> str:
        return f"{self.what}: {self.status()}"

    def advance(self, count: int = 0, tokens: int = 0) -> None:
        """`count` more items (and `tokens` more tokens) done."""
        self.count += count
        self.tokens += tokens

    def update(self, done: int, total: int | None = None) -> None:
        """Absolute progress: `done` of `total` items (callbacks that report `done of total`)."""
        self.count = done
        if total is not None:
            self.total = total

    def step(self, text: str) -> None:
        """What the stage does now (a spinner's text), for stages without a count."""


class _BarStage(Stage):
    """A terminal: a live rich bar (or a spinner), removed when the stage ends."""

    def __init__(self, console, what: str, unit: str, total: int | None, spinner: bool):
        super().__init__(what, unit, total)
        from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
        from rich.progress import Progress as Bar

        name = TextColumn("[bold]{task.description}")
        head = (SpinnerColumn("dots"), name) if spinner else (name, BarColumn())
        tail = (TextColumn("{task.fields[status]}"), TimeElapsedColumn())
        self.spinner = spinner
        self.bar = Bar(*head, *tail, console=console, transient=True)
        self.task = self.bar.add_task(what, total=total, status="")

    def _draw(self) -> None:
        self.bar.update(
            self.task, completed=self.count, total=self.total, status=self.status(live=True)
        )

    def advance(self, count: int = 0, tokens: int = 0) -> None:
        super().advance(count, tokens)
        if not self.spinner:
            self._draw()

    def update(self, done: int, total: int | None = None) -> None:
        super().update(done, total)
        self._draw()

    def step(self, text: str) -> None:
        self.bar.update(self.task, status=f"[dim]{text}[/]")


class Terminal:
    """Draws on stderr: a live bar (or spinner) on a terminal; otherwise one plain line per stage
    when it ends, and nothing for a stage that counted nothing or failed.

    `console`: the rich Console to draw on (the CLI's, so bars and its output share the terminal);
    None: a stderr Console of its own. `tty`: None = `sys.stderr.isatty()` when the stage starts."""

    def __init__(self, console=None, tty: bool | None = None):
        self.console, self.tty = console, tty

    def _on_terminal(self) -> bool:
        if self.tty is not None:
            return self.tty
        try:
            return sys.stderr.isatty()
        except (AttributeError, ValueError):
            return False

    @contextmanager
    def stage(
        self,
        what: str,
        *,
        unit: str = "examples",
        total: int | None = None,
        detail: str | None = None,
        spinner: bool = False,
    ):
        name = f"{what} ({detail})" if detail else what  # `tokenizing (2 processes)`
        if not self._on_terminal():
            stage = Stage(name, unit, total)
            yield stage
            if stage.count:  # only after a stage that ended well: an exception skips this line
                sys.stderr.write(stage.line() + "\n")
            return
        console = self.console
        if console is None:
            from rich.console import Console

            console = Console(stderr=True)
        bar = _BarStage(console, name, unit, total, spinner)
        with bar.bar:
            yield bar
        if bar.count:
            console.print(bar.line(), highlight=False, markup=False)


def reporter(progress: bool | Reporter | None) -> Reporter:
    """The Reporter a library function reports into: `progress` itself, `Terminal()` for True,
    `SILENT` for False/None."""
    if progress is None or progress is False:
        return SILENT
    if progress is True:
        return Terminal()
    return progress
