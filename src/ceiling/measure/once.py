"""Local figures a process measures once per device and thread count, then reuses.

A profile, a decode or a report section that finds no machine profile measures a few
local roofs (the first touch of a new buffer, elementwise functions' cost, the per-op
floor). They describe the machine, not the workload, so a second call in the same process
(several models profiled, a report's sections one after another) takes them from here.
The thread count is in the key: a parallel op's cost depends on it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

T = TypeVar("T")

_MEASURED: dict[tuple, object] = {}


def thread_count() -> int:
    """Threads torch runs an op on now."""
    import torch

    return torch.get_num_threads()


def measured_once(what: str, device: str, measure: Callable[[], T], *extra: Hashable) -> T:
    """`measure()` the first time `what` is asked for on this device and thread count
    (and `extra`, what else the figure depends on); the same figure afterwards."""
    key = (what, str(device), thread_count(), *extra)
    if key not in _MEASURED:
        _MEASURED[key] = measure()
    return _MEASURED[key]  # type: ignore[return-value]


def remember(what: str, device: str, figure: object, *extra: Hashable) -> None:
    """Keep a figure measured elsewhere (the bench suite) for later callers."""
    _MEASURED[(what, str(device), thread_count(), *extra)] = figure


def forget() -> None:
    """Drop every kept figure (the next call measures again)."""
    _MEASURED.clear()
