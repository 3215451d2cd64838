"""The user's own code, named MODULE:CALLABLE or path/to/file.py:CALLABLE.

When it fails (it raises, has a syntax error, calls sys.exit, or takes other arguments than
ceiling passes) the error is the user's, and is shown as theirs: one line with their
message and the last frame of their own code (file:line, function), never as a crash of
ceiling. The same message travels from a worker process to the launcher unchanged.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
import sysconfig
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ceiling.errors import CeilingError, DoesNotFit, InvalidInput, UnknownName, UserCodeFailed

_CEILING_DIR = str(Path(__file__).resolve().parent)
_LIBRARY_DIRS = tuple(
    {str(Path(p).resolve()) for k, p in sysconfig.get_paths().items() if k.endswith("lib")}
)


def _shown(path: str) -> str:
    """A path relative to the working folder when it lies inside it."""
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


def _last_user_frame(tb) -> traceback.FrameSummary | None:
    """The innermost frame of the user's code: not ceiling's, not the import machinery's,
    and not a library's unless no other frame is left."""
    frames = [
        f
        for f in traceback.extract_tb(tb)
        if not str(Path(f.filename).resolve()).startswith(_CEILING_DIR)
        and not f.filename.startswith("<frozen")
    ]
    own = [f for f in frames if not str(Path(f.filename).resolve()).startswith(_LIBRARY_DIRS)]
    chosen = own or frames
    return chosen[-1] if chosen else None


def raised_in_user_code(exc: BaseException) -> bool:
    """Whether any frame of the exception's traceback is the user's own code."""
    return any(
        not str(Path(f.filename).resolve()).startswith((_CEILING_DIR, *_LIBRARY_DIRS))
        and not f.filename.startswith("<")
        for f in traceback.extract_tb(exc.__traceback__)
    )


def _where(exc: BaseException) -> str:
    if isinstance(exc, SyntaxError) and exc.filename:
        return f" ({_shown(exc.filename)}:{exc.lineno})"
    frame = _last_user_frame(exc.__traceback__)
    if frame is None:
        return ""
    return f" ({_shown(frame.filename)}:{frame.lineno}, in {frame.name})"


def _message(exc: BaseException) -> str:
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    if isinstance(exc, SyntaxError):
        return f"has a syntax error: {exc.msg}"
    text = " ".join(str(exc).split())
    return f"raised {type(exc).__name__}: {text}" if text else f"raised {type(exc).__name__}"


def failure(target: str, exc: BaseException, doing: str = "") -> CeilingError:
    """The user's exception as one line: what they named, what happened, and where.
    Running out of memory is DoesNotFit: the work is too large, not wrong."""
    line = f"your {target}{doing} {_message(exc)}{_where(exc)}"[:2000]
    if isinstance(exc, MemoryError) or "out of memory" in str(exc).lower():
        return DoesNotFit(line)
    return UserCodeFailed(line)


def load_callable(target: str) -> Callable[..., Any]:
    """The callable `target` names; a module that cannot be found or loaded is refused."""
    module_name, _, attr = target.rpartition(":")
    if not module_name or not attr:
        raise InvalidInput(f"expected MODULE:CALLABLE or FILE.py:CALLABLE, got {target!r}")
    try:
        module = _load_module(module_name, target)
    except CeilingError:
        raise
    except ModuleNotFoundError as exc:
        if exc.name and module_name.startswith(exc.name):
            raise UnknownName(f"cannot import {module_name!r}: no such module") from None
        raise failure(target, exc, " (importing it)") from None
    except (Exception, SystemExit) as exc:
        raise failure(target, exc, " (importing it)") from None
    fn = getattr(module, attr, None)
    if fn is None or not callable(fn):
        raise UnknownName(f"{module_name!r} has no callable {attr!r}")
    return fn


def _load_module(module_name: str, target: str):
    if module_name.endswith(".py"):
        path = Path(module_name)
        if not path.is_file():
            raise UnknownName(f"no file {module_name!r} for target {target!r}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    # The working folder, as `python -m` would have it (a console script does not).
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    return importlib.import_module(module_name)


def check_call(fn: Callable[..., Any], target: str, *args: Any, **kwargs: Any) -> None:
    """Refuse, before running anything, a callable that cannot take these arguments."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: let the call tell
        return
    try:
        sig.bind(*args, **kwargs)
    except TypeError as exc:
        given = ", ".join([*(type(a).__name__ for a in args), *(f"{k}=" for k in kwargs)])
        raise UserCodeFailed(
            f"your {target} takes {sig} but is called as {target.rpartition(':')[2]}({given}): "
            f"{exc}"
        ) from None


def call(fn: Callable[..., Any], target: str, *args: Any, **kwargs: Any) -> Any:
    """fn(*args, **kwargs); its failure (an exception or sys.exit) becomes UserCodeFailed.
    ceiling's own errors raised inside it (a CeilingError) pass through unchanged."""
    check_call(fn, target, *args, **kwargs)
    try:
        return fn(*args, **kwargs)
    except CeilingError:
        raise
    except (Exception, SystemExit) as exc:
        raise failure(target, exc) from None


def guarded(fn: Callable[..., Any], target: str) -> Callable[..., Any]:
    """fn wrapped by `call`, for code that calls it many times."""

    def run(*args: Any, **kwargs: Any) -> Any:
        return call(fn, target, *args, **kwargs)

    return run
