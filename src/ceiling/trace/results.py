"""What `ceiling trace` finds, as data: per step, per rank, across ranks. JSON-ready."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from ceiling.views.notebook import NotebookViews

# bumped whenever what is counted or how time is split changes, so old results stay comparable
METHOD_VERSION = 2


@dataclass
class TraceDevice:
    """The roofline the trace is placed on; None fields when no device is known."""

    name: str | None
    source: str
    kind: str | None = None
    peak_key: str | None = None
    peak_flops_per_s: float | None = None
    bandwidth_bytes_per_s: float | None = None
    link_bandwidth_bytes_per_s: float | None = None
    # dense datasheet peaks per dtype (MFU's); a profile's measured rates (the roof ops are
    # placed under, "achievable") beside them
    peaks_flops_per_s: dict[str, float] = field(default_factory=dict)
    measured_peaks_flops_per_s: dict[str, float] = field(default_factory=dict)


# what a critical path's time is spent on
PATH_COMPUTE, PATH_COMM, PATH_HOST, PATH_WAIT = "compute", "communication", "host", "idle waits"
PATH_CATEGORIES = (PATH_COMPUTE, PATH_COMM, PATH_HOST, PATH_WAIT)


@dataclass
class WhatIfAnswer:
    """A what-if question answered on the step's dependency graph."""

    question: str  # as asked: "gemm=2x", "comm=overlap", "launch=3us", "link=400GB/s", "all"
    step_s: float  # the step re-timed: the longest path on the new durations
    saving_s: float  # the critical path's length less step_s


@dataclass
class CriticalPath:
    """The longest chain of dependent work through a step: its length, its seconds by
    category (compute, communication, host, idle waits), what lies longest on it and the
    what-if answers. On the recorded times its length is the step's window."""

    length_s: float
    seconds: dict[str, float]  # category -> seconds on the path (sum = length_s)
    # (category, the kernel, host op or kind of wait, seconds), the longest first
    top: list[tuple[str, str, float]]
    what_if: list[WhatIfAnswer] = field(default_factory=list)
    # (index into the rank's collectives, seconds on the path): to tell the wait for other
    # ranks from the transfer once the ranks are compared
    collectives: list[tuple[int, float]] = field(default_factory=list)
    peer_wait_s: float = 0.0  # of the idle waits: in collectives, for a later rank

    @classmethod
    def mean(cls, paths: list[CriticalPath]) -> CriticalPath | None:
        """The mean over steps: lengths, categories, what lies on the path, what-if answers."""
        if not paths:
            return None
        n = len(paths)
        seconds: dict[str, float] = {}
        items: dict[tuple[str, str], float] = {}
        for p in paths:
            for k, v in p.seconds.items():
                seconds[k] = seconds.get(k, 0.0) + v / n
            for cat, name, v in p.top:
                items[(cat, name)] = items.get((cat, name), 0.0) + v / n
        answers = [
            WhatIfAnswer(
                a.question,
                sum(p.what_if[i].step_s for p in paths) / n,
                sum(p.what_if[i].saving_s for p in paths) / n,
            )
            for i, a in enumerate(paths[0].what_if)
        ]
        top = sorted(((c, name, v) for (c, name), v in items.items()), key=lambda x: -x[2])
        length = sum(p.length_s for p in paths) / n
        peer = sum(p.peer_wait_s for p in paths) / n
        return cls(length, seconds, top[: len(paths[0].top)], answers, peer_wait_s=peer)


@dataclass
class StepResult:
    name: str
    start_s: float  # on the trace's own clock
    wall_s: float
    seconds: dict[str, float]  # breakdown category -> seconds (sum = wall_s)
    comm_s: float
    comm_overlapped_s: float
    idle_reasons: dict[str, float]
    host_seconds: dict[str, float]  # the host thread's own time line
    model_flops: float | None  # None: FLOPs unknown (no shapes recorded), never zero
    hardware_flops: float | None
    other_flops: float | None
    mfu: float | None  # None without a device peak or without FLOPs
    hfu: float | None
    # model FLOPs by the dtype the matmuls ran in (TF32 when fp32 GEMMs ran on tensor cores)
    model_flops_by_dtype: dict[str, float] = field(default_factory=dict)
    critical_path: CriticalPath | None = None  # when asked for (`critical_path=True`)
    # busy intervals per category, for the figure; left out of the JSON
    timeline: dict[str, list[tuple[float, float]]] = field(default_factory=dict, repr=False)


@dataclass
class OpRow:
    """One op (name and input shapes) summed over the analysed steps."""

    name: str
    shapes: str
    dtype: str | None
    category: str
    calls: int
    time_s: float
    flops: float | None
    bytes: float | None
    flops_exact: bool
    intensity: float | None = None
    achieved_flops_per_s: float | None = None
    attainable_flops_per_s: float | None = None
    roof_time_s: float | None = None
    lost_s: float | None = None  # time above the roofline time
    bound: str | None = None


@dataclass
class KernelRow:
    """One kernel name summed over the analysed windows."""

    name: str
    category: str  # GEMM, convolution, attention, NCCL <op>, memcpy HtoD, elementwise, ...
    dtype: str | None  # the precision a GEMM/convolution kernel's name shows
    calls: int
    time_s: float
    share: float  # of all device-event time in the windows
    op: str | None  # the op that launched it most often
    flops: float | None  # where the shapes tell (the kernel is its op call's only one)
    bytes: float | None
    achieved_flops_per_s: float | None = None
    achieved_bytes_per_s: float | None = None


@dataclass
class Collective:
    op: str
    start_s: float
    dur_s: float
    bytes: float | None
    step: int  # index into the rank's steps; -1 outside every step


@dataclass
class RankResult:
    rank: int
    path: str
    device_name: str | None
    on_gpu: bool
    steps: list[StepResult]
    ops: list[OpRow]
    collectives: list[Collective]
    shapes_recorded: bool
    kernels: list[KernelRow] = field(default_factory=list)
    world_size: int | None = None  # the job's ranks, as the header says (a folder may hold some)
    gpu_lag_s: float | None = None  # median launch -> kernel start: the GPU behind the host
    notes: list[str] = field(default_factory=list)
    hta: dict[str, float] | None = None  # HTA's figures on the same windows (kernel_rows)

    @property
    def step_s(self) -> float:
        return sum(s.wall_s for s in self.steps) / len(self.steps) if self.steps else 0.0

    def mean(self, key: str) -> float:
        return sum(s.seconds.get(key, 0.0) for s in self.steps) / max(len(self.steps), 1)

    @property
    def model_flops_per_step(self) -> float | None:
        vals = [s.model_flops for s in self.steps]
        return None if not vals or None in vals else sum(vals) / len(vals)

    def _time_weighted(self, key: str) -> float | None:
        """Over all steps: total FLOPs / total time / peak, not a mean of ratios."""
        vals = [getattr(s, key) for s in self.steps]
        wall = sum(s.wall_s for s in self.steps)
        if not vals or None in vals or wall <= 0:
            return None
        return sum(v * s.wall_s for v, s in zip(vals, self.steps, strict=True)) / wall

    @property
    def mfu(self) -> float | None:
        return self._time_weighted("mfu")

    @property
    def critical_path(self) -> CriticalPath | None:
        """The mean critical path over the rank's steps (None when not asked for)."""
        return CriticalPath.mean([s.critical_path for s in self.steps if s.critical_path])

    @property
    def hfu(self) -> float | None:
        return self._time_weighted("hfu")


@dataclass
class CollectiveRow:
    op: str
    bytes: float | None
    calls: int
    transfer_s: float  # per call, on the rank that waited least (closest to the transfer)
    busbw_bytes_per_s: float | None
    of_link: float | None  # busbw / the link's one-way bandwidth


@dataclass
class CrossRank:
    step_s: dict[int, float]
    slowest_rank: int  # the straggler where collectives tell one, else the longest step's
    slowest_over_fastest: float  # step time, longest / shortest - 1
    busy_s: dict[int, float]  # step time less the wait for others, per step
    imbalance: float  # max(busy) / mean(busy) - 1
    straggler: int | None
    straggler_delay_s: float | None  # per step (median), how much later it reached collectives
    straggler_cost_s: float | None  # per step, mean time the ranks waited for the last one
    collectives: list[CollectiveRow] = field(default_factory=list)


# the per-rank lists of rows `TraceAnalysis.table()` gives, across ranks, the default first
RANK_TABLES = ("ops", "steps", "kernels", "collectives")


@dataclass
class TraceAnalysis(NotebookViews):
    path: str
    device: TraceDevice
    ranks: list[RankResult]
    cross: CrossRank | None
    notes: list[str]
    flop_convention: str = "multiply-add = 2 FLOPs; model FLOPs = matmul + attention"
    method_version: int = METHOD_VERSION

    def to_json(self) -> dict:
        out = asdict(self)
        for raw in out["ranks"]:
            for step in raw["steps"]:
                step.pop("timeline", None)
        for r, raw in zip(self.ranks, out["ranks"], strict=True):
            raw.update(
                step_s=r.step_s,
                model_flops_per_step=r.model_flops_per_step,
                mfu=r.mfu,
                hfu=r.hfu,
                critical_path=None if r.critical_path is None else asdict(r.critical_path),
            )
        return out

    def record(self) -> dict:
        return self.to_json()

    def heading(self) -> str:
        return f"Trace {self.path} ({len(self.ranks)} ranks)"

    def _row_lists(self, record: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
        """Each rank's ops, steps, kernels and collectives in one table each (a `rank` column
        says whose), then the ranks and the rows across ranks."""
        ranks = record["ranks"]
        tables = {
            name: [{"rank": raw["rank"], **row} for raw in ranks for row in raw[name]]
            for name in RANK_TABLES
        }
        single = [{k: v for k, v in raw.items() if k not in RANK_TABLES} for raw in ranks]
        across = {k: v for k, v in super()._row_lists(record).items() if k != "ranks"}
        return {**{k: v for k, v in tables.items() if v}, "ranks": single, **across}

    @property
    def critical_path(self) -> dict[int, CriticalPath]:
        """Each rank's mean critical path over its steps (`ceiling.trace(path,
        critical_path=True)`; empty when not asked for)."""
        return {r.rank: p for r in self.ranks if (p := r.critical_path) is not None}

    def calibration(self):
        """The efficiencies this run achieved, for the planner (`plan(..., calibrate=)`)."""
        from ceiling.trace.calibration import calibration

        return calibration(self)
