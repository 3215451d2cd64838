"""One exception hierarchy. The CLI turns any CeilingError into one line and exit code 2.

A message names the input it refuses in the words of whoever gave it: written with
`argument("top")`, it reads `top` when a Python function was called and `--top` when the
command line set it (`ceiling.cli.argument_names`). Any layer can write it; only the
command line knows its flags.
"""

import re
from collections.abc import Callable

from ceiling.text import printable

_ARGUMENT = re.compile("\u27e8([A-Za-z_][A-Za-z0-9_]*)\u27e9")


def argument(name: str) -> str:
    """`name` (a Python argument) marked inside a message, to be said as its flag where the
    command line gave it."""
    return f"\u27e8{name}\u27e9"


def said(text: str, name_of: Callable[[str], str | None] = lambda name: None) -> str:
    """`text` with each marked argument said as `name_of(argument)`, else its Python name."""
    return printable(_ARGUMENT.sub(lambda m: name_of(m.group(1)) or m.group(1), text))


class CeilingError(Exception):
    """A problem the user can fix: bad input, an unknown name, a device that cannot run it.

    Its text never carries control characters (they are shown as escapes), since it often
    quotes a user's string and goes to the terminal."""

    def __str__(self) -> str:
        return said(super().__str__())

    def said(self, name_of: Callable[[str], str | None]) -> str:
        """The message with each marked argument said as `name_of` tells."""
        return said(str(self.args[0]) if self.args else "", name_of)


class CeilingWarning(UserWarning):
    """Something the user should know that does not stop the command (a saved profile that
    may not describe this process); the command line prints it as one `warning:` line."""


class InvalidInput(CeilingError, ValueError):
    """A value outside its domain (a fraction above 1, a non-positive worker count)."""


class UnknownName(CeilingError, KeyError):
    """A name that is not in a catalog (device, model, workload)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return said(str(self.args[0])) if self.args else ""


class UnsupportedOnDevice(CeilingError):
    """The device cannot run what was asked (a dtype, a GPU-only benchmark on a CPU)."""


class DoesNotFit(CeilingError):
    """A model, batch or plan needs more memory than the device has."""


class MalformedFile(CeilingError):
    """A profile, measurement or config file that cannot be read."""


class NotSaved(CeilingError):
    """A result that could not be written (a full disk, a folder gone); the message says what
    was kept and where."""


class WorkerFailed(CeilingError):
    """A worker process of a multi-worker run died or timed out."""


class WrongResult(CeilingError):
    """A benchmark produced a numerically wrong result; its timing is not a figure."""


class MissingDependency(CeilingError):
    """A library the command needs is not installed (torch, transformers)."""


class TimedOut(CeilingError):
    """Work that ran past its stated deadline (--timeout) and was stopped."""


class UserCodeFailed(CeilingError):
    """The user's own code (a MODULE:CALLABLE target) raised, exited or could not be called."""
