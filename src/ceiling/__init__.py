"""ceiling: measure a machine's ceilings, explain how far below them work runs, plan more."""

from importlib.metadata import PackageNotFoundError, version

try:  # one version source: the installed distribution's metadata (pyproject.toml)
    __version__ = version("ceiling-perf")
except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
    __version__ = "0+unknown"


def __getattr__(name: str):
    # `ceiling.trace(path)` without importing torch until it is called
    if name == "trace":
        import importlib

        return importlib.import_module("ceiling.trace")
    raise AttributeError(f"module 'ceiling' has no attribute {name!r}")
