"""A refused value of one argument, told in the words of whoever gave it.

Called from Python, the message names the function's argument (`gpus must be between 1
and ...`); run from the command line, the same check names the flag that set it (`--gpus
must be ...`): the command line renames it (`ceiling.cli.argument_names`), nothing is
checked twice.
"""

from __future__ import annotations

import functools
import inspect
import numbers
import os
import types
import typing
from collections import abc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from ceiling.errors import CeilingError, InvalidInput, argument
from ceiling.text import shortened


class BadArgument(InvalidInput):
    """`argument` (a Python parameter name) is refused; `problem` is the rest of the
    sentence, which follows the name (and may name other arguments with `argument()`)."""

    def __init__(self, name: str, problem: str) -> None:
        self.argument, self.problem = name, problem
        super().__init__(f"{argument(name)} {problem}")


@contextmanager
def argument_named(name: str) -> Iterator[None]:
    """A shared check (the dtype vocabulary's) that names what it refuses `name`: its
    error keeps its type and is renamed on the command line as a BadArgument is."""
    try:
        yield
    except CeilingError as exc:
        text = str(exc.args[0]) if exc.args else ""
        if text.startswith(f"{name} "):
            exc.args = (f"{argument(name)}{text[len(name) :]}", *exc.args[1:])
        raise


class WrongType(BadArgument, TypeError):
    """An argument of a type its annotation does not allow (still a user's mistake: exit 2,
    and a TypeError to code that catches one)."""


P = ParamSpec("P")
R = TypeVar("R")


def checked(function: Callable[P, R]) -> Callable[P, R]:
    """Refuse, before any work, a call the signature does not take or an argument whose type
    its annotation does not allow, naming the argument; the docstring gains the shared
    inputs' meanings (`ceiling.inputs`), in the words the command line's help uses. Typed
    so that type checkers and editors see the function's own signature."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def call(*args: P.args, **kwargs: P.kwargs) -> R:
        hints = _hints(function)
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise WrongCall(f"{getattr(function, '__name__', 'function')}(): {exc}") from None
        for name, value in bound.arguments.items():
            hint = hints.get(name)
            if hint is not None and not fits(value, hint):
                raise WrongType(name, f"must be {said_type(hint)}, got {shortened(value)}")
        return function(*args, **kwargs)

    call.__doc__ = with_shared_inputs(function.__doc__, signature)
    return call


def with_shared_inputs(doc: str | None, signature: inspect.Signature) -> str | None:
    """`doc` followed by one line per parameter that is a shared input: its meaning and the
    flag that sets it on the command line."""
    from ceiling.inputs import BY_NAME

    shared = [BY_NAME[name] for name in signature.parameters if name in BY_NAME]
    if not shared:
        return doc
    import textwrap

    lines = [
        textwrap.fill(
            f"{i.name}: {i.help} On the command line: {i.said}.",
            88,
            initial_indent="    ",
            subsequent_indent="        ",
            break_on_hyphens=False,
        )
        for i in shared
    ]
    return (doc or "").rstrip() + "\n\n    Shared inputs:\n" + "\n".join(lines) + "\n"


class WrongCall(InvalidInput, TypeError):
    """A call the function's signature does not take (a missing or unknown argument)."""


@functools.cache
def _hints(function: Callable) -> dict[str, Any]:
    """Each parameter's annotation, evaluated; one that cannot be is not checked."""
    out: dict[str, Any] = {}
    namespace = {**vars(typing), **function.__globals__, "Path": Path}
    for name, text in function.__annotations__.items():
        if name == "return":
            continue
        try:
            out[name] = eval(text, namespace) if isinstance(text, str) else text
        except Exception:  # a name only imported for type checkers
            continue
    return out


_SINGULAR = {
    int: "an integer",
    float: "a number",
    str: "a string",
    bool: "True or False",
    Path: "a path",
    type(None): "None",
}
_PLURAL = {int: "integers", float: "numbers", str: "strings", Path: "paths", bool: "booleans"}


def said_type(hint: Any, plural: bool = False) -> str:
    """An annotation in words: `int | None` -> 'an integer or None'."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(dict.fromkeys(said_type(a, plural) for a in args))
    if hint is None:
        return "None"
    if origin is not None and args and origin not in (abc.Callable,):
        element = args[0]
        return f"a {_container(origin)} of {said_type(element, plural=True)}"
    if origin is not None:
        return f"a {_container(origin)}"
    if plural and hint in _PLURAL:
        return _PLURAL[hint]
    return _SINGULAR.get(hint, f"a {getattr(hint, '__name__', hint)}")


def _container(origin: Any) -> str:
    if origin in (dict, abc.Mapping):
        return "dict"
    if origin is abc.Callable:
        return "callable"
    if origin is tuple:
        return "tuple"
    return "list"


def fits(value: Any, hint: Any) -> bool:
    """Whether `value` is of the annotated type (numbers of any kind where a number is
    asked, never a bool for one; a list's elements checked when it is a list or tuple)."""
    if hint is Any or (hint is None and value is None):
        return True
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return any(fits(value, a) for a in args)
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool) or type(value).__name__ == "bool_"
    if hint in (int, float) and isinstance(value, bool):
        return False
    if hint is int:
        return isinstance(value, numbers.Integral)
    if hint is float:
        return isinstance(value, numbers.Real)
    if hint is Path:
        return isinstance(value, str | os.PathLike)
    if origin is not None:
        return _fits_container(value, origin, args)
    try:
        return isinstance(value, hint)
    except TypeError:  # a typing form this check does not read: let the function judge
        return True


def _fits_container(value: Any, origin: Any, args: tuple) -> bool:
    if origin is abc.Callable:
        return callable(value)
    if origin in (dict, abc.Mapping):
        return isinstance(value, abc.Mapping)
    if isinstance(value, str | bytes | abc.Mapping) or not isinstance(value, abc.Iterable):
        return False  # a dict iterates its keys: never the list of values meant
    if origin in (list, tuple) and not isinstance(value, list | tuple):
        return False
    if isinstance(value, list | tuple) and args:
        element = typing.Union[args] if origin is tuple else args[0]  # noqa: UP007
        return all(fits(v, element) for v in value)
    return True
