"""The one output object of every command: human output, --json, quiet, progress.

    out = Output(json_out, quiet=quiet)
    td = api.load_tokenized(data, cfg, progress=out)      # the library reports stages into it
    with out.stage("profiling", spinner=True) as stage:   # or a stage of the command's own
        result = api.profile(td, cfg, on_stage=stage.step)
    out.report(to_json(result), lambda console: render(result, console))

Human output and progress go to stderr, so `--json -` keeps stdout for the JSON alone (and shows
no human report and no progress); `--json PATH` writes the report there and the human output still
shows; quiet: no progress. rich is imported when something is printed, never at import.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from packtool.progress import SILENT, Stage, Terminal


class Output:
    """Where a command's report, its human output and its progress go (see the module docstring)."""

    def __init__(
        self, json_out: str | None = None, *, quiet: bool = False, tty: bool | None = None
    ):
        self.json_out = json_out
        self.quiet = quiet
        self._tty = tty  # None: stderr.isatty() when a stage starts
        self._console = None

    @property
    def json_to_stdout(self) -> bool:
        return self.json_out == "-"

    @property
    def human(self) -> bool:
        """Whether the human report is shown (not under `--json -`)."""
        return not self.json_to_stdout

    @property
    def console(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=True, highlight=False)
        return self._console

    # ----------------------------------------------------------------------- what is said

    def note(self, text: str) -> None:
        """A dim line that is said even under `--json -` (on stderr), e.g. `wrote profile.png`."""
        self.console.print(f"[dim]{text}[/]")

    def report(self, doc: dict | Callable[[], dict], render: Callable[[Any], None]) -> None:
        """The command's result: the JSON (`doc`, or a function making it only when --json asks)
        to --json's PATH or, for `-`, to stdout, then `render(console)` unless `--json -`."""
        if self.json_out:
            import json

            text = json.dumps(doc() if callable(doc) else doc, indent=2, default=str) + "\n"
            if self.json_to_stdout:
                sys.stdout.write(text)
                sys.stdout.flush()
            else:
                os.makedirs(os.path.dirname(os.path.abspath(self.json_out)), exist_ok=True)
                with open(self.json_out, "w") as f:
                    f.write(text)
        if self.human:
            render(self.console)

    # ----------------------------------------------------------------------- progress

    def stage(self, what: str, **options) -> AbstractContextManager[Stage]:
        """packtool.progress.Reporter: the library's stages and the command's own."""
        shown = Terminal(self.console, tty=self._tty) if self.human and not self.quiet else SILENT
        return shown.stage(what, **options)
