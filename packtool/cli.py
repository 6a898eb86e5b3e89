"""The command line: thin typer commands and the one error boundary.

Each command (packtool.commands) builds a frozen config, calls `packtool.api` and hands the result
to its output object (commands.output); errors are one line on stderr (`guard`). Nothing heavy is
imported at module level.
"""

from __future__ import annotations

import atexit
import errno
import functools
import gc
import os
import re
import signal
import sys
import threading

import typer
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from packtool.errors import Interrupt, PacktoolError


class _Flag(TyperOption):
    """A boolean flag: shown in --help as `--force`, without the `<bool>` value placeholder that this
    typer's rich help gives every option (its plain help leaves flags without one too)."""

    def display_type_rich(self, ctx) -> None:
        return None


class _Help:
    """--help of packtool and its commands: flags as flags, required arguments as `DATA` (not
    `{DATA}`) in the usage line."""

    def get_params(self, ctx):
        params = super().get_params(ctx)
        for p in params:
            if type(p) is TyperOption and p.is_flag:
                p.__class__ = _Flag  # the same option; only its help rendering differs
        return params

    def collect_usage_pieces(self, ctx) -> list[str]:
        pieces = [self.options_metavar] if self.options_metavar else []
        for p in self.get_params(ctx):
            if isinstance(p, TyperArgument) and p.required:
                pieces.append(p.display_name_raw + ("..." if p.nargs != 1 else ""))
            else:
                pieces.extend(p.get_usage_pieces(ctx))
        return pieces


class Command(_Help, TyperCommand):
    pass


class Group(_Help, TyperGroup):
    def collect_usage_pieces(self, ctx) -> list[str]:
        return [*super().collect_usage_pieces(ctx), self.subcommand_metavar]


# the environment variables packtool reads, one line each (README.md, "Environment", has the details)
EPILOG = """Environment:
  PACKTOOL_CACHE=DIR         cache folder; default $XDG_CACHE_HOME/packtool
  XDG_CACHE_HOME=DIR         parent of the default cache (default: ~/.cache)
  PACKTOOL_DEBUG=1           Python tracebacks instead of one-line errors
  PACKTOOL_ALLOW_DOWNLOAD=1  fetch uncached hub tokenizers (--allow-download)
  PACKTOOL_MIN_FREE_MIB=N    pack: MiB free --out needs (0: no check)
  PACKTOOL_MAX_RECORD_MIB=N  largest JSON Lines record read, MiB (default 256)
  HF_HUB_OFFLINE=1           never fetch, even with --allow-download

Each command's options: packtool COMMAND --help, and README.md."""

app = typer.Typer(
    name="packtool",
    cls=Group,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Profile SFT datasets, pack them into static-length Parquet shards, verify the shards.",
    epilog=EPILOG,
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
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Profile SFT datasets, pack them into static-length Parquet shards, verify the shards."""


def _one_line_warning(message, category, filename, lineno, file=None, line=None):
    sys.stderr.write(f"warning: {message}\n")


_WRITABLE = "choose a writable --out (or PACKTOOL_CACHE for the tokenization cache)"
_FIXES = {  # errno → what to do about it
    errno.ENOSPC: "free space, or choose another --out (or PACKTOOL_CACHE for the tokenization cache)",
    errno.EDQUOT: "free space under your quota, or choose another --out (or PACKTOOL_CACHE)",
    errno.EACCES: _WRITABLE,
    errno.EPERM: _WRITABLE,
    errno.EROFS: _WRITABLE,
    errno.ENOENT: "check the path",
    errno.ENOTDIR: "check the path: a part of it is a file",
    errno.EISDIR: "check the path: it is a folder",
}


def os_error_line(e: OSError) -> str:
    """`<path>: <what> — <fix>` for an OSError; the path is left out when the error names none
    (pyarrow's IO errors carry the errno only in their text)."""
    code = e.errno
    if code is None and (m := re.search(r"\[errno (\d+)\]", str(e), re.IGNORECASE)):
        code = int(m.group(1))
    what = e.strerror or (
        os.strerror(code) if code else str(e).splitlines()[0] if str(e) else type(e).__name__
    )
    where = f"{e.filename}: " if e.filename else ""
    return f"{where}{what} — {_FIXES.get(code, 'check the path and the disk')}"


_interrupted = False  # set by the SIGINT handler: a library may swallow the KeyboardInterrupt


def _on_sigint(signum, frame):
    global _interrupted
    _interrupted = Interrupt.requested = True
    raise KeyboardInterrupt


def interrupt_in_chain(e: BaseException) -> bool:
    """Whether `e` wraps a Ctrl-C: a KeyboardInterrupt raised while a numba-compiled function
    returns surfaces as `SystemError: CPUDispatcher(...) returned a result with an exception set`
    whose __context__ (or __cause__) is the KeyboardInterrupt."""
    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, KeyboardInterrupt):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def _unraisable(hook):
    """sys.unraisablehook that drops the KeyboardInterrupts a callback swallowed (no traceback:
    `_interrupted` remembers them) and passes everything else to `hook`."""

    def unraisable(u):
        if u.exc_value is None or not interrupt_in_chain(u.exc_value):
            hook(u)

    return unraisable


# the parameters of any command that name a file or folder: `~` and $VARS are expanded in them
PATH_PARAMS = frozenset(
    (
        "data",
        "out",
        "path",
        "plot",
        "json_out",
        "tokenizer",
        "chat_template",
        "model",
        "lengths_file",
    )
)


def expand_paths(kwargs: dict) -> dict:
    """`~/x` and `$HOME/x` in path arguments as the shell would have expanded them (a quoted or
    config-supplied path reaches us unexpanded); `-` (stdout) and plain names stay as they are."""
    out = dict(kwargs)
    for k, v in kwargs.items():
        if k in PATH_PARAMS and isinstance(v, str) and (v.startswith("~") or "$" in v):
            out[k] = os.path.expanduser(os.path.expandvars(v))
    return out


def guard(fn):
    """The one error boundary of every command; a traceback only with PACKTOOL_DEBUG=1.

    - PacktoolError → `error: <message>`, exit 1 (UsageError, a bad option value: exit 2).
    - OSError (no space, read-only, permission, missing file, ...) → `error: <path>: <what> — <fix>`,
      exit 1: the environment failed mid-run (options found unusable up front, such as an --out
      that cannot be written, are UsageErrors raised by the checks themselves).
    - BrokenPipeError on stdout (`packtool ... | head`) → quiet, exit 0: the reader had enough.
    - Ctrl-C at any stage → `interrupted`, exit 130 (also when a library wrapped the
      KeyboardInterrupt in another exception, `interrupt_in_chain`), after the with-blocks and finally clauses on the
      way up removed temporary folders and terminated worker processes. A Ctrl-C that a library
      swallowed (numba's compile callbacks) still exits 130 when the command returns.
    Warnings that packtool raises (a damaged cache entry, ...) print as one line too.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        import warnings

        global _interrupted
        warnings.showwarning = _one_line_warning
        debug = os.environ.get("PACKTOOL_DEBUG") == "1"
        # not from a thread (signal.signal refuses) nor where SIGINT is ignored (nohup, `cmd &`)
        catch = (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is not signal.SIG_IGN
        )
        previous = signal.signal(signal.SIGINT, _on_sigint) if catch else None
        hook, sys.unraisablehook = sys.unraisablehook, _unraisable(sys.unraisablehook)
        _interrupted = Interrupt.requested = False
        code = None
        try:
            result = fn(*args, **expand_paths(kwargs))
        except PacktoolError as e:
            if debug:
                raise
            sys.stderr.write(f"error: {e}\n")
            code = e.exit_code
        except KeyboardInterrupt:
            _interrupted = True
        except BrokenPipeError:
            _quiet_stdout()
            code = 0
        except OSError as e:
            if debug:
                raise
            sys.stderr.write(f"error: {os_error_line(e)}\n")
            code = 1
        except Exception as e:
            if not interrupt_in_chain(e):
                raise
            _interrupted = True  # e.g. numba's SystemError around a Ctrl-C: still an interrupt
        finally:
            sys.unraisablehook = hook
            Interrupt.requested = False  # this command's Ctrl-C: not the next library call's
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
        # raised here, not in the except blocks: the finished exception (its traceback holds the
        # suspended generators, e.g. the tokenizing pool) is freed first, so its cleanup runs now
        if _interrupted:
            gc.collect()
            sys.stderr.write("interrupted\n")
            raise typer.Exit(130)
        if code is not None:
            raise typer.Exit(code)
        return result

    return wrapper


def _quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush does not fail on the closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # CliRunner's stdout has no file descriptor
        pass


def _register() -> None:
    from packtool.commands import export, inspect, pack, profile, sample, verify

    for module in (inspect, profile, pack, verify, export, sample):  # each defines its command
        name = module.__name__.rpartition(".")[2]
        app.command(name, cls=Command)(guard(getattr(module, name)))


_register()


def _late_sigint(signum, frame):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os.write(2, b"interrupted\n")
    os._exit(130)


# the cyclic collector's young generation runs every GC_YOUNG net allocations, not Python's 700: a
# command builds large object graphs that live until it ends (transformers' and numba's imports, a
# tokenizer JSON's parse), and with the default every 25% of growth walks all of them again, freeing
# nothing
GC_YOUNG = 50_000


def main() -> None:
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])
    try:
        app()
    except SystemExit as e:  # every command ends here, its output written: exit without teardown
        _exit_now(e.code)
        raise
    finally:
        _arm_late_sigint()


def _arm_late_sigint() -> None:
    """The command is over: a Ctrl-C while the process ends exits 130 at once (unless ignored)."""
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        signal.signal(signal.SIGINT, _late_sigint)


def _exit_now(code) -> None:
    """End the process as the interpreter would, less the teardown of its modules and objects:
    after a chat run (transformers, jinja, two Rust tokenizers) it is time no one needs to wait for.
    What an exit must still do is done in the interpreter's order: threads joined (and
    concurrent.futures' exit hooks), atexit handlers (weakref finalizers, temp folders), both
    streams flushed. Returns (a normal exit follows) where this interpreter lacks the hook."""
    shutdown = getattr(threading, "_shutdown", None)
    if not callable(shutdown) or threading.current_thread() is not threading.main_thread():
        return
    if code is None:
        status = 0
    elif isinstance(code, int):
        status = code
    else:  # sys.exit("message"): printed, status 1
        print(code, file=sys.stderr)
        status = 1
    _arm_late_sigint()
    shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            status = status or 120  # what the interpreter exits with when its final flush fails
    os._exit(status)
