"""The events of one rank's trace, as read from a Kineto/Chrome JSON file.

Times are seconds (the file's microseconds converted once at reading). Only complete events
("ph": "X") are kept; flows, counters and metadata are dropped, since the `External id`
and `correlation` arguments carry the same links.
"""

from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass, field
from functools import cached_property

# Kineto event categories
CPU_OP = "cpu_op"
ANNOTATION = "user_annotation"
GPU_ANNOTATION = "gpu_user_annotation"
KERNEL = "kernel"
MEMCPY = "gpu_memcpy"
MEMSET = "gpu_memset"
RUNTIME = ("cuda_runtime", "cuda_driver", "hip_runtime", "privateuse1_runtime")
DEVICE_CATEGORIES = (KERNEL, MEMCPY, MEMSET)
# categories read at all; the rest (python_function, fwdbwd, ac2g, Trace, ...) is skipped
KEPT_CATEGORIES = frozenset((CPU_OP, ANNOTATION, GPU_ANNOTATION, *DEVICE_CATEGORIES, *RUNTIME))
# the names older Kineto releases (PyTorch 1.8-1.9) wrote, mapped to today's
OLD_CATEGORIES = {
    "Operator": CPU_OP,
    "Kernel": KERNEL,
    "Memcpy": MEMCPY,
    "Memset": MEMSET,
    "Runtime": "cuda_runtime",
    "cuda_runtime": "cuda_runtime",
}
CATEGORY = {**{c: c for c in KEPT_CATEGORIES}, **OLD_CATEGORIES}

# Runtime calls after which the host waited for the device.
SYNC_CALLS = re.compile(
    r"(cuda|hip)(DeviceSynchronize|StreamSynchronize|EventSynchronize|StreamWaitEvent|"
    r"Memcpy(2D|3D)?$|MemcpyToSymbol$|MemcpyFromSymbol$)"
)
DATA_LOADER = re.compile(r"DataLoader|_DataLoaderIter|data_loader|dataloader", re.IGNORECASE)
STEP = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(slots=True)
class Event:
    name: str
    cat: str
    start_s: float
    dur_s: float
    pid: int | str
    tid: int | str
    args: dict

    @property
    def end_s(self) -> float:
        return self.start_s + self.dur_s

    def arg(self, key: str, default=None):
        return self.args.get(key, default)


class Timeline:
    """Events sorted by start, for the events overlapping a window."""

    def __init__(self, events: list[Event]) -> None:
        self.events = sorted(events, key=lambda e: e.start_s)
        self.starts = [e.start_s for e in self.events]
        self.longest = max((e.dur_s for e in self.events), default=0.0)

    def overlapping(self, window) -> list[Event]:
        lo = bisect_left(self.starts, window[0] - self.longest)
        hi = bisect_left(self.starts, window[1])
        return [e for e in self.events[lo:hi] if e.end_s > window[0]]


def collective_op(name: str) -> str | None:
    """'ncclDevKernel_AllReduce_Sum_f32_RING_LL', 'gloo:all_reduce', 'allreduce' ->
    'all_reduce'; None when the name is not a collective."""
    low = name.lower().replace("_", "")
    for key, op in (
        ("allreduce", "all_reduce"),
        ("allgather", "all_gather"),
        ("reducescatter", "reduce_scatter"),
        ("alltoall", "all_to_all"),
        ("broadcast", "broadcast"),
        ("sendrecv", "send_recv"),
        ("send", "send_recv"),
        ("recv", "send_recv"),
        ("reduce", "reduce"),
        ("barrier", "barrier"),
    ):
        if key in low:
            return op
    return None


def is_comm_kernel(name: str) -> bool:
    low = name.lower()
    return low.startswith(("nccl", "rccl")) or "nccldevkernel" in low or "ncclkernel" in low


def is_host_collective(e: Event) -> bool:
    """A CPU-side collective that does the transfer itself (gloo), not a launch."""
    return e.name.startswith("gloo:")


@dataclass
class RankTrace:
    """One trace file: its events and what the header says about the run."""

    path: str
    events: list[Event]
    rank: int | None = None
    world_size: int | None = None
    backend: str | None = None
    device_names: list[str] = field(default_factory=list)
    devices: list[dict] = field(default_factory=list)  # the header's deviceProperties
    host_name: str | None = None
    record_shapes: bool | None = None

    def of(self, *cats: str) -> list[Event]:
        return [e for e in self.events if e.cat in cats]

    @cached_property
    def device_events(self) -> list[Event]:
        return self.of(*DEVICE_CATEGORIES)

    @cached_property
    def cpu_ops(self) -> list[Event]:
        return self.of(CPU_OP)

    @cached_property
    def annotations(self) -> list[Event]:
        return self.of(ANNOTATION)

    @cached_property
    def runtime(self) -> list[Event]:
        return self.of(*RUNTIME)

    @cached_property
    def steps(self) -> list[Event]:
        """ProfilerStep#N spans in time order (the host thread that ran them)."""
        # older PyTorch records them as cpu_op
        spans = (e for e in self.events if e.cat in (ANNOTATION, CPU_OP) and STEP.match(e.name))
        return sorted(spans, key=lambda e: e.start_s)

    @property
    def on_gpu(self) -> bool:
        return bool(self.device_events)
