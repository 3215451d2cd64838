"""Terminal tables, plots and the HTML report.

`ceiling.report(...)` calls `ceiling.api.report.report`; the package's modules
(`ceiling.report.html`, ...) stay importable.
"""

from ceiling.api.callable_package import make_callable

make_callable(__name__, "ceiling.api.report:report")
