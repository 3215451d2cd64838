"""PyTorch workload analysis: per-op FLOPs, bytes and time, MFU, the step breakdown.

`ceiling.profile(model, batch, ...)` calls `ceiling.api.profile.profile`; the package's
modules (`ceiling.profile.run`, ...) stay importable.
"""

from ceiling.callable_package import make_callable

make_callable(__name__, "ceiling.api.profile:profile")
