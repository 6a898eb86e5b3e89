"""The error types the CLI turns into one-line messages and exit codes.

The message names the value, the limit and the fix, e.g.
"example 1832 has 9120 tokens > --len 4096; use --overflow truncate|split or raise --len".
"""


class PacktoolError(Exception):
    """Bad input or a failed check: exit code 1."""

    exit_code = 1


class UsageError(PacktoolError):
    """Bad options or option values: exit code 2."""

    exit_code = 2


class NotChecked(PacktoolError):
    """A check that could not be run on what was asked (verify --model on an architecture it
    cannot build or bound): exit code 3, "not checked: ..." (not a pass, not a finding)."""

    exit_code = 3


class Interrupt:
    """Whether Ctrl-C was pressed in this command, even if a library swallowed the KeyboardInterrupt
    (numba's callbacks do): set by the CLI's SIGINT handler, read before publishing an output."""

    requested = False

    @classmethod
    def check(cls) -> None:
        if cls.requested:
            raise KeyboardInterrupt
