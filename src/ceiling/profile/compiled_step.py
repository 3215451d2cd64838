"""A compiled step from its own kernels: each generated (fused) kernel at its bytes, each
extern kernel (a library matmul, convolution or attention) at its FLOPs, both at this
device's roofs, and the step predicted from them beside the measured one.

A kernel's predicted time is `model.roofline.op_time` of its FLOPs and bytes: FLOPs at its
own measured rate (an extern matmul's shape timed alone, else the rate the eager step's
calls of that op got, else the compute roof), bytes at the memory roof the step's working
set picks (cache or DRAM), plus its host cost per call: the per-op floor, the measured
cost of one tiny op, paid where the graph's code calls it. A generated kernel's FLOPs
(pointwise arithmetic and reductions) are left at zero: a fused kernel is the bytes it
moves, and the elementwise functions it computes (a GELU, an exp), each at its measured
cost per element as the eager op is (model.roofline).

The compiled step is those kernels, plus the eager ops outside the compiled graphs (the
optimizer, the loss, code between graph breaks: predicted as the eager step predicts
them), plus host time between kernels (the guards, the graphs' Python wrappers), which
the kernels' host costs and each compiled frame call's own (its guards and wrappers,
measured once by measure.compiled_overhead) stand for in the prediction.
"""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.model import roofline
from ceiling.profile.compiled import Kernel, ProfiledStep, Site
from ceiling.profile.placement import HOST_SHARE, MEMORY_TIME_SHARE, NEAR_ROOF

OUTSIDE_SHARE = 0.20  # eager ops outside the compiled graphs above this share of the step
HOST_PHASE = "compiled"  # no measured phase: a kernel call pays the per-op floor


@dataclass(frozen=True)
class CompiledStep:
    """One compiled step: its kernels with their bytes, FLOPs, measured and predicted
    times; the compiled frames it ran (more than one per step: graph breaks); measured
    and predicted parts. Measured parts come from one step under torch.profiler
    (`profiled_step_s` its wall time); `step_s` is the measured step without it."""

    kernels: list[Kernel]
    frames: int
    profiled_step_s: float
    kernel_s: float  # measured time inside the kernels
    outside_s: float  # measured time of the eager ops outside the compiled graphs
    predicted_kernel_s: float  # the kernels' work at their roofs
    predicted_host_s: float  # their host cost per call
    predicted_outside_s: float  # the eager ops outside, as the eager step predicts them
    step_s: float | None = None
    uncaptured: int = 0  # kernels seen running but not compiling: bytes unknown
    frame_calls: int = 0  # calls of compiled frames in the step

    @property
    def host_s(self) -> float:
        """The profiled step outside every kernel and eager op: guards, wrappers."""
        return max(self.profiled_step_s - self.kernel_s - self.outside_s, 0.0)

    @property
    def predicted_step_s(self) -> float:
        return self.predicted_kernel_s + self.predicted_host_s + self.predicted_outside_s

    @property
    def graph_breaks(self) -> int:
        return max(self.frames - 1, 0)

    @property
    def generated_bytes(self) -> float:
        return sum(k.bytes or 0.0 for k in self.kernels if k.kind == "generated")


def _site_time(s: Site, name, roofs, bandwidth, rates, op_rates) -> roofline.OpTime:
    """One call of a site at the roofs; a fused kernel's compute is at least its functions'
    measured cost per element over their elements, one after another."""
    t = roofline.op_time(
        s.flops, s.bytes_read + s.bytes_written, 1, roofs, bandwidth,
        rates.get(s.matmul_dims) or op_rates.get(name), phase=HOST_PHASE,
    )  # fmt: skip
    per_element = roofs.function_s_per_element
    functions_s = sum(n * per_element.get(f, 0.0) for f, n in s.functions)
    return roofline.OpTime(
        max(t.compute_s, functions_s), t.memory_s, t.overhead_s, roofs.serial_dispatch
    )


def _kernel(name, calls, time_s, kind, sites, roofs, bandwidth, rates, op_rates):
    """The kernel's row, and its time at the roofs (None: not seen compiling). Its calls
    share out over the sites that call it (a graph may call one kernel from several places,
    an extern matmul at several shapes), each site at its own shape's rate."""
    if not sites:
        return Kernel(name, calls, time_s, kind), None
    per_site = calls / len(sites)
    times = [_site_time(s, name, roofs, bandwidth, rates, op_rates) for s in sites]
    t = roofline.OpTime(
        per_site * sum(x.compute_s for x in times),
        per_site * sum(x.memory_s for x in times),
        per_site * sum(x.overhead_s for x in times),
        roofs.serial_dispatch,
    )
    dims = {s.matmul_dims for s in sites}
    row = Kernel(
        name, calls, time_s, kind, per_site * sum(s.bytes_read for s in sites),
        per_site * sum(s.bytes_written for s in sites), per_site * sum(s.flops for s in sites),
        dims.pop() if len(dims) == 1 else None, t.time_s, t.bound,
    )  # fmt: skip
    return row, t


def _work_and_host(found, serial: bool) -> tuple[float, float]:
    """The kernels' work and the host time it does not hide (`found`: each kernel's row
    and its time over all its calls): on a CPU the host cost adds to each kernel's work;
    on a GPU the host queues kernels ahead (step_with_queue), one call at a time."""
    if serial:
        times = [t for _, t in found]
        return sum(max(t.compute_s, t.memory_s) for t in times), sum(t.overhead_s for t in times)
    calls = []
    for row, t in found:
        n = max(row.calls, 1)
        calls += [roofline.OpTime(t.compute_s / n, t.memory_s / n, t.overhead_s / n)] * n
    by_bound = roofline.step_with_queue(calls)
    return by_bound["compute"] + by_bound["memory"], by_bound["overhead"]


def predict(
    profiled: ProfiledStep,
    sites: dict[str, list[Site]],
    roofs: roofline.Roofs,
    bandwidth_bytes_per_s: float,
    *,
    rates: dict | None = None,
    op_rates: dict | None = None,
    predicted_outside_s: float = 0.0,
    step_s: float | None = None,
    frame_host_s: float = 0.0,
) -> CompiledStep:
    """The compiled step from one profiled step and the kernel sites its compile recorded.
    `rates`: measured FLOP/s by matmul (M, N, K); `op_rates`: by profiler name (aten::mm),
    what the eager step's calls of that op ran at; `predicted_outside_s`: the eager ops
    outside the compiled graphs, predicted; `frame_host_s`: host time of one compiled
    frame call beyond its kernels (measure.compiled_overhead), paid per call."""
    rates, op_rates = rates or {}, op_rates or {}
    at = (roofs, bandwidth_bytes_per_s, rates, op_rates)
    found = [_kernel(k.name, k.calls, k.time_s, "generated", sites.get(k.name), *at)
             for k in profiled.generated]  # fmt: skip
    found += [_kernel(name, calls, t, "extern", sites.get(name), *at)
              for name, (calls, t) in profiled.extern.items()]  # fmt: skip
    rows = sorted((row for row, _ in found), key=lambda k: (-k.time_s, k.name))
    known = [(row, t) for row, t in found if t is not None]
    work, host = _work_and_host(known, roofs.serial_dispatch)
    return CompiledStep(
        kernels=rows,
        frames=profiled.frames,
        profiled_step_s=profiled.wall_s,
        kernel_s=sum(k.time_s for k in rows),
        outside_s=profiled.outside_s,
        predicted_kernel_s=work,
        predicted_host_s=host + profiled.frame_calls * frame_host_s,
        predicted_outside_s=predicted_outside_s,
        step_s=step_s,
        uncaptured=len(rows) - len(known),
        frame_calls=profiled.frame_calls,
    )


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def _gb(b: float) -> str:
    return f"{b / 1e9:.3g} GB"


def _memory_hint(step: CompiledStep, bandwidth: float) -> str | None:
    fused = [k for k in step.kernels if k.kind == "generated" and k.bytes is not None]
    spent = sum(k.time_s for k in fused)
    if not fused or not step.kernel_s or spent / step.kernel_s < MEMORY_TIME_SHARE:
        return None
    moved = sum(k.bytes for k in fused)
    at_roof = moved / bandwidth / spent if spent else 0.0
    head = (
        f"the fused kernels take {_pct(spent / step.kernel_s)} of kernel time and move "
        f"{_gb(moved)} a step ({moved / bandwidth * 1e3:.3g} ms at the bandwidth roof, "
        f"{at_roof * 100:.2g} % of their time)"
    )
    if at_roof >= NEAR_ROOF:
        return (
            f"{head}: bandwidth bounds them; what is left is moving fewer bytes: a 16-bit "
            "dtype halves them, activation checkpointing trades them for recompute"
        )
    return (
        f"{head}: not bandwidth but their cost per call (threads, loop setup over small "
        "tensors) holds them; larger batches amortise it"
    )


def hints(step: CompiledStep, bandwidth_bytes_per_s: float, device: str) -> list[str]:
    """What is left to gain on a model compiled already: graph breaks, the fused kernels'
    bytes, eager ops outside the graphs, host time. Never advice to compile it."""
    found = []
    if step.graph_breaks:
        found.append(
            f"{step.frames} compiled frames run per step: {step.graph_breaks} graph "
            "break(s) leave Python and eager ops between them; torch._dynamo.explain "
            "names each break and its reason"
        )
    found.append(_memory_hint(step, bandwidth_bytes_per_s))
    wall = step.profiled_step_s
    if wall > 0 and step.outside_s / wall >= OUTSIDE_SHARE:
        found.append(
            f"eager ops outside the compiled graphs (the optimizer, the loss, code between "
            f"graph breaks) take {_pct(step.outside_s / wall)} of the profiled step; an "
            "optimizer with foreach=True or fused=True runs as a few large ops"
        )
    if wall > 0 and step.host_s / wall >= HOST_SHARE:
        remedy = (
            "CUDA graphs (mode='reduce-overhead') or larger batches"
            if device.startswith("cuda")
            else "larger batches amortise it"
        )
        found.append(
            f"{_pct(step.host_s / wall)} of the profiled step is host time outside every "
            f"kernel (guards, the graphs' wrappers, allocation): {remedy}"
        )
    if step.uncaptured:
        found.append(
            f"{step.uncaptured} kernel(s) ran but were not seen compiling (the model was "
            "compiled before it was profiled): their bytes and predicted times are unknown"
        )
    return [h for h in found if h]
