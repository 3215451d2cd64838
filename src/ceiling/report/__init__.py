"""The report page: its sections, each laying out the result of one `ceiling.*` call, the
verdict, the HTML page and the terminal summary. Above the API; the figures and tables it
shows are drawn by `ceiling.render`.

`ceiling.report(...)` calls `ceiling.report.call.report`; the package's modules
(`ceiling.report.html`, ...) stay importable.
"""

from ceiling.callable_package import make_callable

make_callable(__name__, "ceiling.report.call:report")
