"""The flag that sets a Python argument, for an API error raised under a command.

The public functions refuse a value by its argument's name (`ceiling.api.arguments`); on the
command line the same message names the command's option instead. The option is found on the
command that ran: the one whose parameter has the argument's name, or that name without the
plural or the "_s" (seconds) the function's argument carries (`--shape` sets `shapes`,
`--stall-timeout` sets `stall_timeout_s`). The machine profile, `machine_profile=` in Python
(beside the workload profiler, `ceiling.profile`), keeps its short flag `--profile`.
"""

from __future__ import annotations

from typing import Any

from ceiling.inputs import flag_of


def _invoked(command: Any, argv: list[str]) -> Any:
    """The (sub)command the words of argv name, below the root group `command`."""
    for word in argv:
        sub = getattr(command, "commands", {}).get(word)
        if sub is None:
            if not word.startswith("-"):
                break
            continue
        command = sub
    return command


def flag_for(command: Any, argv: list[str], argument: str) -> str | None:
    """The option (`--gpus`) of the invoked command that sets `argument`, if it has one."""
    names = (
        argument,
        argument.removesuffix("_s"),
        argument.removesuffix("s"),
        flag_of(argument) or argument,
    )
    params = getattr(_invoked(command, argv), "params", [])
    for name in names:
        for param in params:
            flags = [o for o in getattr(param, "opts", []) if o.startswith("--")]
            if param.name == name and flags:
                typed = [f for f in flags if f in argv or any(a.startswith(f + "=") for a in argv)]
                return (typed or flags)[0]  # the alias the user typed, where one was
    return None


def said_on_the_command_line(exc: Exception, command: Any, argv: list[str]) -> str:
    """The error's text, naming flags where the API named arguments."""
    from ceiling.errors import CeilingError

    if not isinstance(exc, CeilingError):
        return str(exc)
    return exc.said(lambda argument: flag_for(command, argv, argument))
