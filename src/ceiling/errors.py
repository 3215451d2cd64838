"""One exception hierarchy. The CLI turns any CeilingError into one line and exit code 2."""

from ceiling.text import printable


class CeilingError(Exception):
    """A problem the user can fix: bad input, an unknown name, a device that cannot run it.

    Its text never carries control characters (they are shown as escapes), since it often
    quotes a user's string and goes to the terminal."""

    def __str__(self) -> str:
        return printable(super().__str__())


class InvalidInput(CeilingError, ValueError):
    """A value outside its domain (a fraction above 1, a non-positive worker count)."""


class UnknownName(CeilingError, KeyError):
    """A name that is not in a catalog (device, model, workload)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return printable(str(self.args[0])) if self.args else ""


class UnsupportedOnDevice(CeilingError):
    """The device cannot run what was asked (a dtype, a GPU-only benchmark on a CPU)."""


class DoesNotFit(CeilingError):
    """A model, batch or plan needs more memory than the device has."""


class MalformedFile(CeilingError):
    """A profile, measurement or config file that cannot be read."""


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
