"""A refused value of one argument, told in the words of whoever gave it.

Called from Python, the message names the function's argument (`gpus must be between 1
and ...`); run from the command line, the same check names the flag that set it (`--gpus
must be ...`): the command line renames it (`ceiling.cli.argument_names`), nothing is
checked twice.
"""

from __future__ import annotations

from ceiling.errors import InvalidInput
from ceiling.text import printable


class BadArgument(InvalidInput):
    """`argument` (a Python parameter name) is refused; `problem` is the rest of the
    sentence, which follows the name."""

    def __init__(self, argument: str, problem: str) -> None:
        self.argument, self.problem = argument, problem
        super().__init__(f"{argument} {problem}")

    def named(self, name: str) -> str:
        """The message with the argument called `name` (a flag, on the command line)."""
        return printable(f"{name} {self.problem}")
