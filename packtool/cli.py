"""The command line: thin typer commands and the one error boundary.

Each command parses options, builds a frozen config, calls one `packtool.api` function and renders
the result. Errors become one line on stderr: exit 1 for bad input, 2 for bad usage; tracebacks
only with PACKTOOL_DEBUG=1. Nothing heavy (torch, transformers) is imported at module level.
"""

from __future__ import annotations

import functools
import os
import sys

import typer

from packtool.errors import PacktoolError

app = typer.Typer(
    name="packtool",
    help="Profile SFT datasets, pack them into static-length Parquet shards, verify the shards.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


def _version(value: bool) -> None:
    if value:
        from packtool import __version__

        typer.echo(f"packtool {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the version and exit."),
) -> None:
    """Profile SFT datasets, pack them into static-length Parquet shards, verify the shards."""


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(f"warning: {message}\n")


def guard(fn):
    """Turn PacktoolError (and Ctrl-C) into a one-line message and an exit code; warnings that
    packtool raises (a damaged cache entry, ...) print as one line too."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import warnings

        warnings.showwarning = _one_line_warning
        try:
            return fn(*args, **kwargs)
        except PacktoolError as e:
            if os.environ.get("PACKTOOL_DEBUG") == "1":
                raise
            sys.stderr.write(f"error: {e}\n")
            raise typer.Exit(e.exit_code) from None
        except KeyboardInterrupt:
            sys.stderr.write("interrupted\n")
            raise typer.Exit(130) from None

    return wrapper


def _register() -> None:
    from packtool.commands import inspect, pack, profile, sample, verify

    for name, module in (("inspect", inspect), ("profile", profile), ("pack", pack), ("verify", verify),
                         ("sample", sample)):
        app.command(name)(guard(getattr(module, name)))


_register()


def main() -> None:
    app()
