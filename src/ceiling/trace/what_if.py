"""What-if questions on a step's dependency graph: a kernel class k× faster, communication
fully overlapped, a host launch call of x µs, an interconnect of y GB/s bus bandwidth.

Each question gives every work edge of the graph a new duration; dependencies keep the
latency they showed. The step re-timed is the longest path on the new durations (work that
was hidden under other work stays hidden; work on the path shortens it only until another
chain becomes the longest). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.errors import InvalidInput
from ceiling.model.collectives import bus_factor
from ceiling.trace import kernels
from ceiling.trace.path_graph import COLLECTIVE, DEPENDENCY, LAUNCH
from ceiling.trace.ranks import BUS_OPS
from ceiling.units import parse_bandwidth, parse_time

# the names a question may give a class of kernels, and the kernel categories they cover
KERNEL_CLASSES = {
    "gemm": (kernels.GEMM,),
    "conv": (kernels.CONV,),
    "attention": (kernels.ATTENTION,),
    "elementwise": (kernels.ELEMENTWISE,),
    "norm": (kernels.NORM,),
    "reduction": (kernels.REDUCTION,),
    "optimizer": (kernels.OPTIMIZER,),
    "memory": kernels.MEMORY_CATEGORIES,
    "compute": kernels.COMPUTE_CATEGORIES,
}
_HELP = (
    "what-if questions are KEY=VALUE separated by commas: CLASS=2x (CLASS one of "
    f"{', '.join(KERNEL_CLASSES)}, comm), comm=overlap, launch=3us, link=400GB/s"
)


@dataclass(frozen=True)
class WhatIf:
    """One change: `speedup` of a kernel class (or 'comm'), communication hidden, each
    launch call taking `launch_s`, or collectives at `link_bytes_per_s` bus bandwidth."""

    text: str
    kernel_class: str | None = None
    speedup: float | None = None
    overlap_comm: bool = False
    launch_s: float | None = None
    link_bytes_per_s: float | None = None

    def duration(self, edge: dict, w: float) -> float:
        """The new duration of an edge (its attributes) that lasts `w` so far."""
        kind = edge["kind"]
        if kind == DEPENDENCY:  # a latency, not work: it keeps what it showed
            if self.launch_s is not None and "call_s" in edge:
                # from a launch call's start to its kernel's: the call's change moves it
                return max(w + self.launch_s - edge["call_s"], 0.0)
            return w
        if kind == COLLECTIVE:
            if self.overlap_comm:
                return 0.0
            if self.kernel_class == "comm":
                return w / self.speedup
            if self.link_bytes_per_s is not None and edge.get("bytes") and edge["w"] > 0:
                # as long as the message takes at that bus bandwidth, scaled as the duration
                # has been changed so far (an overlapped collective stays hidden)
                at_link = edge["bytes"] * _bus_share(edge) / self.link_bytes_per_s
                return w * at_link / edge["w"]
            return w
        if kind == LAUNCH and self.launch_s is not None:
            return self.launch_s
        if self.speedup is not None and kind in KERNEL_CLASSES.get(self.kernel_class, ()):
            return w / self.speedup
        return w


def _bus_share(edge: dict) -> float:
    """The share of the message each link carries (nccl-tests' bus factor); 1 where the
    collective or the number of ranks is not known."""
    op, ranks = edge.get("op"), edge.get("ranks")
    if op in BUS_OPS and isinstance(ranks, int) and ranks >= 1:
        return bus_factor(op, ranks)
    return 1.0


def parse(text: str) -> list[WhatIf]:
    """'gemm=2x,comm=overlap,launch=3us,link=400GB/s' -> one WhatIf per question."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"{_HELP}; got {text!r}")
    return [_one(part.strip()) for part in text.split(",") if part.strip()]


def _one(part: str) -> WhatIf:
    key, eq, value = (x.strip() for x in part.partition("="))
    key = key.lower()
    if not eq or not value:
        raise InvalidInput(f"what-if {part!r}: {_HELP}")
    if key == "comm" and value.lower() == "overlap":
        return WhatIf(part, overlap_comm=True)
    if key == "launch":
        return WhatIf(part, launch_s=parse_time(value))
    if key == "link":
        bw = parse_bandwidth(value)
        if bw <= 0:
            raise InvalidInput(f"what-if {part!r}: the link's bandwidth must be above 0")
        return WhatIf(part, link_bytes_per_s=bw)
    if key in KERNEL_CLASSES or key == "comm":
        if not value.lower().endswith("x"):
            raise InvalidInput(f"what-if {part!r}: a speed-up is written like 2x")
        try:
            k = float(value[:-1])
        except ValueError:
            raise InvalidInput(f"what-if {part!r}: a speed-up is written like 2x") from None
        if not k > 0 or k == float("inf"):
            raise InvalidInput(f"what-if {part!r}: the speed-up must be a number above 0")
        return WhatIf(part, kernel_class=key, speedup=k)
    raise InvalidInput(f"what-if {part!r}: unknown question {key!r}; {_HELP}")
