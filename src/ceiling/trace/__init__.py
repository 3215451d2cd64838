"""Reading torch.profiler / Kineto traces of real runs and explaining them.

`ceiling.trace(path, spec=..., machine_profile=..., dtype=...)` returns a `TraceResult`; the
package itself is callable so that the API reads like the command (`ceiling trace PATH`)
while its modules (`ceiling.trace.reader`, ...) stay importable.
"""

from __future__ import annotations

import sys
import types


class _CallableModule(types.ModuleType):
    def __call__(
        self,
        path,
        spec=None,
        machine_profile=None,
        dtype=None,
        workers=None,
        dask=None,
        progress=None,
    ):
        from ceiling.trace.analyze import analyze

        return analyze(path, spec, machine_profile, dtype, workers, dask, progress)


sys.modules[__name__].__class__ = _CallableModule
