"""A package that can also be called: `ceiling.profile(model, batch)` while
`ceiling.profile.run` stays importable (as `ceiling.trace(path)` beside `ceiling.trace.reader`).

The function is imported on the first call (or the first look at its signature or
documentation), so importing the package stays cheap. `help(ceiling.profile)` and
`inspect.signature(ceiling.profile)` show the function's own signature and docstring, then
the package's.
"""

from __future__ import annotations

import importlib
import inspect
import sys
import types


def make_callable(package: str, target: str) -> None:
    """Calling `package` calls `target` ("module:function") with the same arguments."""
    module_name, _, function = target.partition(":")
    module = sys.modules[package]
    package_doc = module.__doc__ or ""

    def resolve():
        return getattr(importlib.import_module(module_name), function)

    class CallablePackage(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return resolve()(*args, **kwargs)

        @property
        def __signature__(self) -> inspect.Signature:
            return inspect.signature(resolve())

        @property
        def __wrapped__(self):
            return resolve()

        @property
        def __doc__(self) -> str:  # type: ignore[override]
            func = resolve()
            own = inspect.getdoc(func) or ""
            head = f"{package.rsplit('.', 1)[-1]}{inspect.signature(func)}"
            return f"{head}\n\n{own}\n\n{package_doc}".rstrip() + "\n"

    CallablePackage.__call__.__doc__ = f"The same as {module_name}.{function}."
    module.__class__ = CallablePackage
