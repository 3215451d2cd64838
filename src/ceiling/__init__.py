"""ceiling: measure a machine's ceilings, explain how far below them work runs, plan more."""

__version__ = "0.1.0"
