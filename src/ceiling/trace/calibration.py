"""The efficiencies a user's own run achieved, read from its trace, for the planner to use in
place of the catalog's defaults (`ceiling plan MODEL --calibrate TRACE`).

Each is achieved over attainable, time-weighted over the analysed steps of every rank: GEMMs'
model FLOPs over the time their kernels ran times the dense peak of the dtype they ran in;
the same for attention; memory-bound ops' bytes over their time times the memory bandwidth;
collectives' bus bandwidth (nccl-tests convention) over the link's one-way bandwidth, from
messages of at least 1 MB (smaller ones measure latency, not bandwidth). A figure the trace
cannot give (no shapes, no such ops, one rank) is None and the planner keeps its default. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ceiling.trace.results import TraceAnalysis

MIN_MESSAGE_BYTES = 1e6
_MEMORY_CATEGORIES = ("elementwise", "norm", "reduction", "memory")


@dataclass(frozen=True)
class Calibration:
    matmul_efficiency: float | None
    attention_efficiency: float | None
    memory_efficiency: float | None
    collective_efficiency: float | None
    world_size: int  # ranks of the traced job: whether its collectives left a node
    source: str
    basis: dict[str, str] = field(default_factory=dict)  # how each figure was measured
    # where the GEMM figure holds: the dtypes its GEMMs ran in, and their FLOPs per call
    # (the FLOP-weighted geometric mean)
    matmul_dtypes: tuple[str, ...] = ()
    matmul_flops_per_call: float | None = None

    @property
    def taken(self) -> list[str]:
        return [
            name
            for name in (
                "matmul_efficiency",
                "attention_efficiency",
                "memory_efficiency",
                "collective_efficiency",
            )
            if getattr(self, name) is not None
        ]


def _compute_share(result: TraceAnalysis, category: str) -> tuple[float | None, str]:
    peaks = result.device.peaks_flops_per_s
    flops = ideal = time = 0.0
    for rank in result.ranks:
        for row in rank.ops:
            peak = peaks.get(row.dtype or "")
            if row.category != category or not row.flops or row.time_s <= 0 or not peak:
                continue
            flops += row.flops
            ideal += row.time_s * peak
            time += row.time_s
    if ideal <= 0:
        return None, ""
    return min(flops / ideal, 1.0), f"{category} ops, {time * 1e3:.3g} ms of kernels"


def _gemm_scope(result: TraceAnalysis) -> tuple[tuple[str, ...], float | None]:
    """The dtypes the traced GEMMs ran in, and their FLOPs per call (FLOP-weighted
    geometric mean): where a GEMM efficiency read from them holds."""
    import math

    dtypes: set[str] = set()
    weight = log_sum = 0.0
    for rank in result.ranks:
        for row in rank.ops:
            if row.category != "matmul" or not row.flops or row.calls < 1:
                continue
            if row.dtype:
                dtypes.add(row.dtype)
            weight += row.flops
            log_sum += row.flops * math.log(row.flops / row.calls)
    return tuple(sorted(dtypes)), (math.exp(log_sum / weight) if weight else None)


def _memory_share(result: TraceAnalysis) -> tuple[float | None, str]:
    bw = result.device.bandwidth_bytes_per_s
    moved = ideal = 0.0
    for rank in result.ranks:
        for row in rank.ops:
            if row.category not in _MEMORY_CATEGORIES or not row.bytes or row.time_s <= 0:
                continue
            moved += row.bytes
            ideal += row.time_s * bw
    if not bw or ideal <= 0:
        return None, ""
    return min(moved / ideal, 1.0), f"memory-bound ops, {moved / 1e9:.3g} GB moved"


def _collective_share(result: TraceAnalysis) -> tuple[float | None, str]:
    c = result.cross
    if c is None:
        return None, ""
    rows = [
        r
        for r in c.collectives
        if r.of_link is not None and r.bytes is not None and r.bytes >= MIN_MESSAGE_BYTES
    ]
    weight = sum(r.bytes * r.calls for r in rows)
    if not weight:
        return None, ""
    share = sum(r.of_link * r.bytes * r.calls for r in rows) / weight
    ops = ", ".join(sorted({r.op for r in rows}))
    return min(share, 1.0), f"bus bandwidth of {ops} over the link, messages ≥ 1 MB"


def calibration(result: TraceAnalysis) -> Calibration:
    """What the traced run achieved; None where the trace cannot tell."""
    if result.device.peak_flops_per_s is None:
        from ceiling.errors import InvalidInput

        raise InvalidInput(
            f"{result.path}: the trace's device is unknown, so no efficiency can be read "
            "from it; pass its device (--spec NAME)"
        )
    basis: dict[str, str] = {}
    figures = {}
    for name, (value, how) in (
        ("matmul_efficiency", _compute_share(result, "matmul")),
        ("attention_efficiency", _compute_share(result, "attention")),
        ("memory_efficiency", _memory_share(result)),
        ("collective_efficiency", _collective_share(result)),
    ):
        figures[name] = value
        if value is not None:
            basis[name] = how
    world = max([r.world_size or 0 for r in result.ranks] + [len(result.ranks)])
    dtypes, per_call = _gemm_scope(result)
    return Calibration(
        **figures, world_size=world, source=f"measured in the trace {result.path}", basis=basis,
        matmul_dtypes=dtypes, matmul_flops_per_call=per_call,
    )  # fmt: skip


# GEMMs this many times larger than the traced ones keep nothing of the traced efficiency
# (a decade's worth of size moves a GEMM's efficiency as much as the device's default does)
SCOPE_DECADES = 3.0


def matmul_weight(cal: Calibration, dtype: str, gemm_flops: float | None) -> tuple[float, str]:
    """How much of the traced GEMM efficiency a plan in `dtype` with GEMMs of `gemm_flops`
    may take (1: all of it, 0: the catalog's default), and why: none in a dtype the trace's
    GEMMs did not run in; less the further its GEMMs are above the traced ones in size,
    nothing SCOPE_DECADES decades above (small GEMMs reach less of the peak)."""
    import math

    if cal.matmul_dtypes and dtype not in cal.matmul_dtypes:
        traced = ", ".join(cal.matmul_dtypes)
        return 0.0, f"the trace's GEMMs ran in {traced}, not {dtype}: the default kept"
    if not gemm_flops or not cal.matmul_flops_per_call:
        return 1.0, ""
    decades = math.log10(gemm_flops / cal.matmul_flops_per_call)
    if decades <= 0:
        return 1.0, ""
    w = max(0.0, 1.0 - decades / SCOPE_DECADES)
    return w, (
        f"the plan's GEMMs ({gemm_flops:.3g} FLOPs) are {10**decades:.3g}× the traced ones "
        f"({cal.matmul_flops_per_call:.3g}): {w:.0%} of the traced efficiency, the rest the "
        "default's (geometric blend)"
    )


def calibrated(cluster, cal: Calibration, dtype: str | None = None, gemm_flops=None):
    """The cluster with the traced run's efficiencies in place of its defaults. Collectives
    of a job that fit in one of the cluster's nodes calibrate the intra-node links; of a
    larger job, the inter-node ones. The GEMM efficiency holds within the dtypes and sizes
    the trace measured (`matmul_weight`): beyond them it is blended toward the default."""
    from dataclasses import replace

    changes = {
        name: value
        for name in ("matmul_efficiency", "attention_efficiency", "memory_efficiency")
        if (value := getattr(cal, name)) is not None
    }
    if "matmul_efficiency" in changes and dtype is not None:
        w, _ = matmul_weight(cal, dtype, gemm_flops)
        measured, default = changes["matmul_efficiency"], cluster.matmul_efficiency
        if w <= 0:
            del changes["matmul_efficiency"]
        elif w < 1:
            changes["matmul_efficiency"] = measured**w * default ** (1 - w)
    if cal.collective_efficiency is not None:
        inside = cal.world_size <= cluster.devices_per_node
        key = "intra_collective_efficiency" if inside else "inter_collective_efficiency"
        changes[key] = cal.collective_efficiency
    if "matmul_efficiency" in changes:
        changes["efficiency_source"] = cal.source
    if "attention_efficiency" in changes:
        changes["attention_measured"] = True
    return replace(cluster, **changes)
