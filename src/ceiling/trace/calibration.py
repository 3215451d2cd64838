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
    # where the attention and memory figures hold: attention FLOPs and memory-bound bytes per
    # call (weighted geometric means, as the GEMMs'), and the dtypes attention ran in
    attention_dtypes: tuple[str, ...] = ()
    attention_flops_per_call: float | None = None
    memory_bytes_per_call: float | None = None
    device: str = ""  # the traced device's name
    missing: dict[str, str] = field(default_factory=dict)  # why a figure could not be read

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


def _scope(result: TraceAnalysis, categories, size: str) -> tuple[tuple[str, ...], float | None]:
    """The dtypes the traced ops of `categories` ran in, and their `size` (flops or bytes) per
    call, the size-weighted geometric mean: where a figure read from them holds."""
    import math

    dtypes: set[str] = set()
    weight = log_sum = 0.0
    for rank in result.ranks:
        for row in rank.ops:
            amount = getattr(row, size)
            if row.category not in categories or not amount or row.calls < 1:
                continue
            if row.dtype:
                dtypes.add(row.dtype)
            weight += amount
            log_sum += amount * math.log(amount / row.calls)
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
    if result.device.name is None or not (
        result.device.peaks_flops_per_s or result.device.bandwidth_bytes_per_s
    ):
        from ceiling.errors import InvalidInput

        raise InvalidInput(
            f"{result.path}: the trace's device is unknown, so no efficiency can be read "
            "from it; pass its device (--spec NAME)"
        )
    basis: dict[str, str] = {}
    missing: dict[str, str] = {}
    figures = {}
    for name, (value, how), why_not in (
        ("matmul_efficiency", _compute_share(result, "matmul"),
         "no GEMM with recorded input shapes (record_shapes=True) in a dtype the "
         f"{result.device.name} has a peak for"),
        ("attention_efficiency", _compute_share(result, "attention"),
         "no attention op with recorded input shapes in a dtype the "
         f"{result.device.name} has a peak for"),
        ("memory_efficiency", _memory_share(result),
         "no memory-bound op with recorded input shapes (its bytes are counted from them)"),
        ("collective_efficiency", _collective_share(result),
         "no collective of ≥ 1 MB between ranks of known size and link"),
    ):  # fmt: skip
        figures[name] = value
        if value is not None:
            basis[name] = how
        else:
            missing[name] = why_not
    world = max([r.world_size or 0 for r in result.ranks] + [len(result.ranks)])
    dtypes, per_call = _scope(result, ("matmul",), "flops")
    attention_dtypes, attention_per_call = _scope(result, ("attention",), "flops")
    _, bytes_per_call = _scope(result, _MEMORY_CATEGORIES, "bytes")
    return Calibration(
        **figures, world_size=world, source=f"measured in the trace {result.path}", basis=basis,
        matmul_dtypes=dtypes, matmul_flops_per_call=per_call,
        attention_dtypes=attention_dtypes, attention_flops_per_call=attention_per_call,
        memory_bytes_per_call=bytes_per_call, device=result.device.name or "", missing=missing,
    )  # fmt: skip


# figure -> (the Calibration fields of its traced dtypes and size per call, the size's unit)
SCOPES = {
    "matmul_efficiency": ("matmul_dtypes", "matmul_flops_per_call", "FLOPs"),
    "attention_efficiency": ("attention_dtypes", "attention_flops_per_call", "FLOPs"),
    "memory_efficiency": (None, "memory_bytes_per_call", "bytes"),
}
_WHAT = {"matmul_efficiency": "GEMMs", "attention_efficiency": "attention ops",
         "memory_efficiency": "memory-bound ops"}  # fmt: skip


def scoped(cal: Calibration, name: str, dtype: str | None, size: float | None,
           default: float) -> tuple[float | None, str]:  # fmt: skip
    """The value of the traced figure `name` for a plan in `dtype` whose ops of that kind are
    `size` (FLOPs or bytes) a call, where the catalog's figure is `default` (None: keep the
    default), and why. A kernel's time is a fixed part (launch, ramp-up, a partial wave) plus
    its work at the rate large kernels reach, so an efficiency read on calls of size s₀ holds
    at a larger size s as 1/e = 1/e∞ + (1/e₀ − 1/e∞)·s₀/s, e∞ the default: the traced fixed
    time kept, the rate the default's. At or below the traced size, and where the trace beat
    the default, the traced figure as it is (smaller calls would reach less: an optimistic
    reading). On another device than the trace's, the efficiency carries over, not the
    seconds. None in a dtype the trace's ops did not run in, or for a figure not measured."""
    dtypes_field, size_field, unit = SCOPES[name]
    what, measured = _WHAT[name], getattr(cal, name)
    traced_dtypes = getattr(cal, dtypes_field) if dtypes_field else ()
    if measured is None or measured <= 0:
        return None, f"the trace measured no {what}"
    if dtype is not None and traced_dtypes and dtype not in traced_dtypes:
        return None, f"the trace's {what} ran in {', '.join(traced_dtypes)}, not {dtype}"
    traced = getattr(cal, size_field)
    if measured >= default or not size or size <= 0 or not traced or size <= traced:
        return measured, ""
    value = 1.0 / (1.0 / default + (1.0 / measured - 1.0 / default) * traced / size)
    return value, (
        f"the plan's {what} ({size:.3g} {unit} a call) are {size / traced:.3g}× the traced "
        f"ones ({traced:.3g}): the traced fixed time a call kept, at the default's rate "
        f"({default:.3g}) beyond it"
    )


def calibrated(cluster, cal: Calibration, dtype: str | None = None, gemm_flops=None,
               sizes: dict[str, float] | None = None):  # fmt: skip
    """The cluster with the traced run's efficiencies in place of its defaults. Collectives
    of a job that fit in one of the cluster's nodes calibrate the intra-node links; of a
    larger job, the inter-node ones. The GEMM, attention and memory figures hold in the
    dtypes the trace measured and move with the size of a call from what it measured toward
    the default (`scoped`; `sizes`: the plan's size a call of each, `gemm_flops` the
    GEMMs')."""
    from dataclasses import replace

    sizes = {"matmul_efficiency": gemm_flops, **(sizes or {})}
    changes = {}
    for name in ("matmul_efficiency", "attention_efficiency", "memory_efficiency"):
        if getattr(cal, name) is None:
            continue
        value, _ = scoped(cal, name, dtype, sizes.get(name), getattr(cluster, name))
        if value is not None:
            changes[name] = value
    if cal.collective_efficiency is not None:
        inside = cal.world_size <= cluster.devices_per_node
        key = "intra_collective_efficiency" if inside else "inter_collective_efficiency"
        changes[key] = cal.collective_efficiency
    if "matmul_efficiency" in changes:
        changes["efficiency_source"] = cal.source
    if "attention_efficiency" in changes:
        changes["attention_measured"] = True
    return replace(cluster, **changes)
