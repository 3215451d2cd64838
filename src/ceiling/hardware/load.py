"""Whether other work shared the machine while something was measured.

A measurement taken beside other work reads low and varies from run to run, so every
measurement window records the machine's load and the CPU time its own process got, and is
called busy when
- the 1-minute load average as it started was above the machine's logical CPUs (other work
  was already queued for every core), or
- other processes took more than OTHERS_SHARE of all the CPUs' time while it ran (the
  machine's busy CPU time less this process's and its children's), or
- this process got less than OWN_SHARE of the wall time on any CPU (it mostly waited to run).

`between(start, end, cpus)` judges two `Clocks` readings and is pure; `read_clocks()` takes
one reading; `LoadWatch` brackets a window with two, and takes its reader as an argument so
tests pass a fake machine.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from ceiling.units import format_percent

OTHERS_SHARE = 0.25  # of cpus × wall time taken by other processes
OWN_SHARE = 0.5  # of the wall time this process ran on some CPU
MIN_WALL_S = 0.5  # a shorter window's CPU times are too coarse to judge (clock ticks)


@dataclass(frozen=True)
class Clocks:
    """One reading: wall clock, this process's CPU time (its children's included), the busy
    time of all the machine's CPUs together (None where unreadable) and the load average."""

    wall_s: float
    process_cpu_s: float
    machine_cpu_s: float | None
    load_1min: float | None


@dataclass(frozen=True)
class LoadRecord:
    """The load over one measurement window, in seconds; `cpus`: the machine's logical CPUs."""

    cpus: int
    wall_s: float
    process_cpu_s: float
    others_cpu_s: float | None
    load_1min_start: float | None
    load_1min_end: float | None

    def reasons(self) -> list[str]:
        """Why the window counts as busy, one phrase each (empty when it does not)."""
        out = []
        if self.load_1min_start is not None and self.load_1min_start > self.cpus:
            out.append(
                f"the load average was {self.load_1min_start:.1f} on {self.cpus} logical CPUs"
            )
        if self.wall_s < MIN_WALL_S:
            return out
        share = self.others_share
        if share is not None and share > OTHERS_SHARE:
            out.append(
                f"other processes took {format_percent(share)} of the {self.cpus} CPUs' "
                f"time over {self.wall_s:.1f} s"
            )
        if self.process_cpu_s < OWN_SHARE * self.wall_s:
            out.append(
                f"this process ran {self.process_cpu_s:.1f} s of CPU time in {self.wall_s:.1f} s"
            )
        return out

    @property
    def others_share(self) -> float | None:
        """Other processes' share of all the CPUs' time over the window."""
        if self.others_cpu_s is None or self.wall_s <= 0:
            return None
        return self.others_cpu_s / (self.cpus * self.wall_s)

    @property
    def busy(self) -> bool:
        return bool(self.reasons())

    def evidence(self) -> tuple[str, float] | None:
        """(record key, value) of the figure the first busy reason quotes; None if idle."""
        reasons = self.reasons()
        if not reasons:
            return None
        if reasons[0].startswith("the load average"):
            return "load_1min_start", float(self.load_1min_start or 0.0)
        if reasons[0].startswith("other processes"):
            return "others_share", float(self.others_share or 0.0)
        return "process_cpu_s", self.process_cpu_s

    def to_json(self) -> dict[str, Any]:
        return {
            **asdict(self),
            "others_share": self.others_share,
            "busy": self.busy,
            "busy_reasons": self.reasons(),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LoadRecord:
        return cls(**{f.name: data.get(f.name) for f in fields(cls)})


def between(start: Clocks, end: Clocks, cpus: int) -> LoadRecord:
    """The record of the window from `start` to `end` on a machine of `cpus` logical CPUs."""
    own = max(end.process_cpu_s - start.process_cpu_s, 0.0)
    others = None
    if start.machine_cpu_s is not None and end.machine_cpu_s is not None:
        others = max(end.machine_cpu_s - start.machine_cpu_s - own, 0.0)
    return LoadRecord(
        cpus=max(int(cpus), 1),
        wall_s=max(end.wall_s - start.wall_s, 0.0),
        process_cpu_s=own,
        others_cpu_s=others,
        load_1min_start=start.load_1min,
        load_1min_end=end.load_1min,
    )


def record_busy(data: dict[str, Any] | None) -> list[str]:
    """The busy reasons of a record as `LoadRecord.to_json` wrote it ([] for none)."""
    if not isinstance(data, dict):
        return []
    try:
        return LoadRecord.from_json(data).reasons()
    except (TypeError, ValueError):
        return []


def read_clocks() -> Clocks:
    """This machine's clocks now (psutil for the CPUs' busy time)."""
    t = os.times()
    machine = None
    try:
        import psutil

        c = psutil.cpu_times()
        machine = sum(getattr(c, k, 0.0) for k in _BUSY_FIELDS)
    except (ImportError, OSError, NotImplementedError):
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return Clocks(
        wall_s=time.perf_counter(),
        process_cpu_s=t.user + t.system + t.children_user + t.children_system,
        machine_cpu_s=machine,
        load_1min=load,
    )


# psutil.cpu_times() fields that are CPU time spent running something (guest time is
# already inside user time on Linux); idle and iowait are not
_BUSY_FIELDS = ("user", "nice", "system", "irq", "softirq", "steal")


class LoadWatch:
    """`with LoadWatch() as w: ...` then `w.record`: the load over the block. `read` and
    `cpus` stand in for the machine in tests."""

    def __init__(self, read: Callable[[], Clocks] = read_clocks, cpus: int | None = None):
        self._read = read
        self._cpus = cpus if cpus is not None else (os.cpu_count() or 1)
        self._start: Clocks | None = None
        self.record: LoadRecord | None = None

    def __enter__(self) -> LoadWatch:
        self._start = self._read()
        return self

    def so_far(self) -> LoadRecord:
        assert self._start is not None, "LoadWatch used outside its with-block"
        return between(self._start, self._read(), self._cpus)

    def __exit__(self, *exc: object) -> None:
        self.record = self.so_far()
