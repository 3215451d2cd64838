"""A package that can also be called: `ceiling.profile(model, batch)` while
`ceiling.profile.run` stays importable (as `ceiling.trace(path)` beside `ceiling.trace.reader`).

The function is imported on the first call, so importing the package stays cheap.
"""

from __future__ import annotations

import importlib
import sys
import types


def make_callable(package: str, target: str) -> None:
    """Calling `package` calls `target` ("module:function") with the same arguments."""
    module_name, _, function = target.partition(":")

    class CallablePackage(types.ModuleType):
        def __call__(self, *args, **kwargs):
            return getattr(importlib.import_module(module_name), function)(*args, **kwargs)

    CallablePackage.__call__.__doc__ = f"The same as {module_name}.{function}."
    sys.modules[package].__class__ = CallablePackage
