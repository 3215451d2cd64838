"""ceiling: measure a machine's ceilings, explain how far below them work runs, plan more."""

__version__ = "0.1.0"


def __getattr__(name: str):
    # `ceiling.trace(path)` without importing torch until it is called
    if name == "trace":
        import importlib

        return importlib.import_module("ceiling.trace")
    raise AttributeError(f"module 'ceiling' has no attribute {name!r}")
