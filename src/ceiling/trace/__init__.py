"""Reading torch.profiler / Kineto traces of real runs and explaining them.

`ceiling.trace(path, spec=..., machine_profile=..., dtype=...)` returns a `TraceResult`
(`api/trace.py`); the package itself is callable so that the API reads like the command
(`ceiling trace PATH`) while its modules (`ceiling.trace.reader`, ...) stay importable.
"""

from ceiling.callable_package import make_callable

make_callable(__name__, "ceiling.api.trace:trace")
