"""A refused value of one argument, told in the words of whoever gave it.

Called from Python, the message names the function's argument (`gpus must be between 1
and ...`); run from the command line, the same check names the flag that set it (`--gpus
must be ...`): the command line renames it (`ceiling.cli.argument_names`), nothing is
checked twice.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ceiling.errors import CeilingError, InvalidInput
from ceiling.text import printable


class BadArgument(InvalidInput):
    """`argument` (a Python parameter name) is refused; `problem` is the rest of the
    sentence, which follows the name."""

    def __init__(self, argument: str, problem: str) -> None:
        self.argument, self.problem = argument, problem
        super().__init__(f"{argument} {problem}")


@contextmanager
def argument_named(argument: str) -> Iterator[None]:
    """A shared check (the dtype vocabulary's) that names what it refuses `argument`: its
    error keeps its type and is renamed on the command line as a BadArgument is."""
    try:
        yield
    except CeilingError as exc:
        text = str(exc)
        if text.startswith(f"{argument} ") and not hasattr(exc, "argument"):
            exc.argument, exc.problem = argument, text[len(argument) + 1 :]
        raise


def renamed(exc: BaseException, name: str) -> str | None:
    """The error's message with its argument called `name`; None when it names none."""
    problem = getattr(exc, "problem", None)
    if getattr(exc, "argument", None) is None or problem is None:
        return None
    return printable(f"{name} {problem}")
