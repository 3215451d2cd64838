"""ceiling: measure a machine's ceilings, explain how far below them work runs, plan more.

    import ceiling
    ceiling.amdahl(0.95)                              # Amdahl's law
    ceiling.plan("llama-3-8b", 64, spec="h100-sxm")   # data/tensor/pipeline split
    ceiling.profile(model, batch)                     # a live nn.Module, one step
    meter = ceiling.MfuMeter(model)                   # MFU inside your own loop

Every function returns a typed result: `.to_dict()` is the matching command's `--json`,
`.table()` / `.to_pandas()` its rows, a notebook shows it as tables with its figure,
`.figure()` (where the command draws one) is a matplotlib Figure. Bad arguments raise
`CeilingError` subclasses with a one-line message. Nothing heavy (torch, matplotlib, scipy)
is imported until a function that needs it is called.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from ceiling.errors import CeilingError

try:  # one version source: the installed distribution's metadata (pyproject.toml)
    __version__ = version("ceiling-perf")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"

# name -> (module, attribute; None: the module itself), imported on first use
_LAZY = {
    "profile": ("ceiling.profile", None),  # a callable package: ceiling.profile(model, batch)
    "MfuMeter": ("ceiling.api.meter", "MfuMeter"),
    "bench": ("ceiling.api.bench", None),
    "roofline": ("ceiling.api.roofline", "roofline"),
    "decode": ("ceiling.api.decode", "decode"),
    "plan": ("ceiling.api.plan", "plan"),
    "fit": ("ceiling.api.fit", "fit"),
    "info": ("ceiling.api.info", "info"),
    "specs": ("ceiling.api.specs", "specs"),
    "models": ("ceiling.api.models", "models"),
    "simulate": ("ceiling.api.simulate", None),  # ceiling.simulate.pipeline(), .straggler()
    "step": ("ceiling.api.step", "step"),
    "repeat": ("ceiling.api.repeat", "repeat"),
    "scale": ("ceiling.api.scale", "scale"),
    "serve": ("ceiling.api.serve", "serve"),
    "validate": ("ceiling.api.validate", "validate"),
    "amdahl": ("ceiling.api.laws", "amdahl"),
    "gustafson": ("ceiling.api.laws", "gustafson"),
    "report": ("ceiling.report", None),  # a callable package: ceiling.report(...)
    "trace": ("ceiling.trace", None),  # a callable package: ceiling.trace(path)
}

__all__ = [
    "CeilingError",
    "MfuMeter",
    "__version__",
    "amdahl",
    "bench",
    "decode",
    "fit",
    "gustafson",
    "info",
    "models",
    "plan",
    "profile",
    "repeat",
    "report",
    "roofline",
    "scale",
    "serve",
    "simulate",
    "specs",
    "step",
    "trace",
    "validate",
]

if TYPE_CHECKING:  # what type checkers and editors see; at run time each comes lazily
    from ceiling.api import bench as bench
    from ceiling.api import simulate as simulate
    from ceiling.api.decode import decode
    from ceiling.api.fit import fit
    from ceiling.api.info import info
    from ceiling.api.laws import amdahl, gustafson
    from ceiling.api.meter import MfuMeter
    from ceiling.api.models import models
    from ceiling.api.plan import plan
    from ceiling.api.profile import profile
    from ceiling.api.repeat import repeat
    from ceiling.api.roofline import roofline
    from ceiling.api.scale import scale
    from ceiling.api.serve import serve
    from ceiling.api.specs import specs
    from ceiling.api.step import step
    from ceiling.api.trace import trace
    from ceiling.api.validate import validate
    from ceiling.report.call import report


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'ceiling' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """The public names (what `from ceiling import *` gives), not this module's own imports."""
    return sorted(__all__)
