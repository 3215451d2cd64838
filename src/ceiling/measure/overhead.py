"""Fixed costs that no FLOP rate shows: per-op dispatch/launch, the Python loop, and the
problem size below which a GPU is slower than the CPU."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ceiling.errors import WrongResult
from ceiling.measure import machine, once
from ceiling.measure.first_touch import FirstTouchSamples, quick_first_touch, time_first_touch
from ceiling.measure.functions import (
    FULL_SAMPLES,
    FunctionTimes,
    quick_function_times,
    time_functions,
)
from ceiling.measure.gemm_rows import GemmRowsSamples, quick_gemm_rows, time_gemm_rows
from ceiling.measure.host_costs import HostCosts, quick_host_costs, time_host_costs
from ceiling.measure.stats import summarize
from ceiling.measure.timer import HostTimer, benchmark, device_sync

OPS_PER_SAMPLE = 200  # tiny ops per timed sample, so the clock's own cost is amortised
LOOP_ELEMENTS = 1_000_000  # the elementwise-square example
# The pure-Python loop is timed over this many elements and scaled to LOOP_ELEMENTS,
# which keeps it to a fraction of a second; the report says so.
LOOP_SAMPLE_ELEMENTS = 100_000
ELEMENTWISE_SIZES = tuple(2**p for p in range(10, 27, 2))
MATMUL_SIZES = (16, 32, 64, 128, 256, 512, 1024, 2048)


@dataclass(frozen=True)
class CrossoverResult:
    """GPU vs CPU per size; crossover = smallest size from which the GPU stays faster."""

    op: str
    sizes: list[int]
    cpu_s: list[float]
    gpu_s: list[float]
    gpu_with_transfer_s: list[float]
    crossover: int | None
    crossover_with_transfer: int | None


@dataclass(frozen=True)
class OverheadResult:
    device: str
    tiny_op_s: float  # median seconds per tiny op (dispatch on CPU, launch on GPU)
    tiny_op_best_s: float
    loop_s: float  # Python loop over LOOP_ELEMENTS (scaled from the sampled part)
    loop_sampled_elements: int
    vectorized_s: float  # numpy x * x over LOOP_ELEMENTS, best time
    device_vectorized_s: float  # torch x * x on the device, best time
    crossovers: list[CrossoverResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # a new buffer's first touch (measure.first_touch): raw best times per size
    first_touch: FirstTouchSamples | None = None
    # elementwise functions' best times on a cached block (measure.functions)
    functions: FunctionTimes | None = None
    # host seconds per op of an eager training step, by phase (measure.host_costs)
    host_costs: HostCosts | None = None
    # on a CPU, a GEMM's best time at the few rows of a decode step (measure.gemm_rows)
    gemm_rows: GemmRowsSamples | None = None

    @property
    def loop_vs_vectorized(self) -> float:
        return self.loop_s / self.vectorized_s

    def row(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "tiny_op_s": self.tiny_op_s,
            "tiny_op_best_s": self.tiny_op_best_s,
            "loop_elements": LOOP_ELEMENTS,
            "loop_s": self.loop_s,
            "loop_sampled_elements": self.loop_sampled_elements,
            "vectorized_s": self.vectorized_s,
            "device_vectorized_s": self.device_vectorized_s,
            "loop_vs_vectorized": self.loop_vs_vectorized,
            "crossovers": [c.__dict__ for c in self.crossovers],
            "notes": list(self.notes),
            **first_touch_row(self.first_touch),
            **({"functions": self.functions.__dict__} if self.functions else {}),
            **({"host_costs": self.host_costs.row()} if self.host_costs else {}),
            **({"gemm_rows": self.gemm_rows.__dict__} if self.gemm_rows else {}),
        }


def first_touch_row(samples: FirstTouchSamples | None) -> dict[str, Any]:
    """The raw first-touch times and what they give (cost per byte, the size it starts at),
    as a machine profile keeps them under "overhead"."""
    if samples is None:
        return {}
    from ceiling.model.first_touch import fit

    cost = fit(samples.sizes_bytes, samples.fresh_s, samples.reused_s, samples.fresh_faults)
    return {
        "first_touch": samples.__dict__,
        "first_touch_s_per_byte": cost.s_per_byte,
        "first_touch_from_bytes": cost.from_bytes,
        "first_touch_s_per_fault": cost.s_per_fault,
    }


def time_tiny_op(device: str, warmup_ms: float, budget_ms: float) -> tuple[float, float]:
    """Median and best seconds per `y = x + x` on one-element tensors."""
    import torch

    x = torch.ones(1, device=device)
    y = torch.empty(1, device=device)

    def burst():
        for _ in range(OPS_PER_SAMPLE):
            torch.add(x, x, out=y)

    # Host clock with a device sync per burst: on a GPU, tiny kernels cost what launching
    # them costs, and that is what a user's loop of small ops pays.
    timer = HostTimer(sync=device_sync(device))
    samples = benchmark(
        burst, device=device, warmup_ms=warmup_ms, budget_ms=budget_ms, flush=None, timer=timer
    )
    s = summarize(samples)
    return s.median / OPS_PER_SAMPLE, s.min / OPS_PER_SAMPLE


def square_loop(x, out, count: int) -> None:
    """The sequential form from the example: one element per Python iteration."""
    for i in range(count):
        out[i] = x[i] * x[i]


def time_loop_vs_vectorized(device: str, budget_ms: float) -> tuple[float, float, float]:
    """(loop over LOOP_ELEMENTS scaled from a sample, numpy x*x, torch x*x on device) in s."""
    import time

    import numpy as np
    import torch

    x = np.arange(LOOP_ELEMENTS, dtype=np.float32)
    out = np.empty_like(x)
    t0 = time.perf_counter_ns()
    square_loop(x, out, LOOP_SAMPLE_ELEMENTS)
    loop_s = (time.perf_counter_ns() - t0) * 1e-9 * LOOP_ELEMENTS / LOOP_SAMPLE_ELEMENTS
    vec = np.empty_like(x)

    def vectorized():
        np.multiply(x, x, out=vec)

    vec_s = min(benchmark(vectorized, warmup_ms=5, budget_ms=budget_ms, flush=None))
    if not np.array_equal(out[:LOOP_SAMPLE_ELEMENTS], vec[:LOOP_SAMPLE_ELEMENTS]):
        raise WrongResult("the loop and the vectorized square disagree")
    xt = torch.from_numpy(x).to(device)
    yt = torch.empty_like(xt)
    dev_s = min(
        benchmark(
            lambda: torch.mul(xt, xt, out=yt), device=device, warmup_ms=5, budget_ms=budget_ms
        )
    )
    return loop_s, vec_s, dev_s


def _first_stable_win(sizes, slow, fast) -> int | None:
    """Smallest size from which `fast` beats `slow` at every larger size too."""
    best = None
    for size, s, f in reversed(list(zip(sizes, slow, fast, strict=True))):
        if f < s:
            best = size
        else:
            break
    return best


def crossover(op: str, device: str, sizes, budget_ms: float) -> CrossoverResult:
    """Time `op` ('elementwise' x*x over n, 'matmul' n^3) on the CPU and on the GPU, the
    GPU both on resident data and with the host->device and device->host copies counted.

    Every case is timed the same way, by the host clock from the call until the result is
    ready (a device sync for the GPU): what a caller waiting for one op pays, launch cost
    included, as the CPU's figure includes its dispatch. CUDA events would leave the launch
    out and move the crossover to sizes where the GPU does not really win. Host tensors are
    ordinary pageable memory, as a user's are.
    """
    import torch

    cpu_s, gpu_s, gpu_xfer_s = [], [], []
    sync = device_sync(device)
    kernel = torch.mul if op == "elementwise" else torch.matmul
    for n in sizes:
        host = torch.randn(n) if op == "elementwise" else torch.randn(n, n)
        out = torch.empty_like(host)
        back = torch.empty_like(host)
        dev = host.to(device)
        dout = torch.empty_like(dev)

        def on_cpu(host=host, out=out):
            kernel(host, host, out=out)

        def on_gpu(dev=dev, dout=dout):
            kernel(dev, dev, out=dout)

        def with_transfer(host=host, back=back, dev=dev, dout=dout):
            dev.copy_(host)
            kernel(dev, dev, out=dout)
            back.copy_(dout)

        cpu_s.append(min(benchmark(on_cpu, warmup_ms=5, budget_ms=budget_ms, flush=None)))
        gpu_s.append(
            min(
                benchmark(
                    on_gpu,
                    device=device,
                    warmup_ms=5,
                    budget_ms=budget_ms,
                    timer=HostTimer(sync=sync),
                )
            )
        )
        gpu_xfer_s.append(
            min(
                benchmark(
                    with_transfer,
                    device=device,
                    warmup_ms=5,
                    budget_ms=budget_ms,
                    timer=HostTimer(sync=sync),
                )
            )
        )
    return CrossoverResult(
        op=op,
        sizes=list(sizes),
        cpu_s=cpu_s,
        gpu_s=gpu_s,
        gpu_with_transfer_s=gpu_xfer_s,
        crossover=_first_stable_win(sizes, cpu_s, gpu_s),
        crossover_with_transfer=_first_stable_win(sizes, cpu_s, gpu_xfer_s),
    )


def run_overhead(
    device: str = "cpu", *, warmup_ms: float = 20.0, budget_ms: float = 200.0, quick: bool = False
) -> OverheadResult:
    tiny_med, tiny_best = time_tiny_op(device, warmup_ms, budget_ms)
    loop_s, vec_s, dev_s = time_loop_vs_vectorized(device, budget_ms)
    notes = [
        f"Python loop timed over the first {LOOP_SAMPLE_ELEMENTS:,} of {LOOP_ELEMENTS:,} "
        "elements and scaled linearly"
    ]
    crossovers = []
    if machine.is_cuda(device):
        step = 2 if quick else 1
        crossovers.append(
            crossover("elementwise", device, ELEMENTWISE_SIZES[::step], budget_ms / 4)
        )
        crossovers.append(crossover("matmul", device, MATMUL_SIZES[::step], budget_ms / 4))
    else:
        notes.append("GPU-vs-CPU crossover needs a GPU; skipped")
    if not math.isfinite(loop_s / vec_s):
        raise WrongResult("vectorized time was zero")
    if quick:  # the figures a profile measures without a machine profile: taken once
        first_touch, functions = quick_first_touch(device), quick_function_times(device)
        host = quick_host_costs(device)
    else:
        first_touch = time_first_touch(device, budget_ms=budget_ms / 5)
        functions = time_functions(device, budget_ms / 10, *FULL_SAMPLES)
        once.remember("first_touch", device, first_touch)  # later quick callers take these
        once.remember("functions", device, functions)
        host = time_host_costs(device, budget_ms=budget_ms / 2)
        once.remember("host_costs", device, host)
    rows = None
    if not machine.is_cuda(device):  # a GPU's skinny GEMMs are priced by their tiles
        rows = quick_gemm_rows(device) if quick else time_gemm_rows(device, budget_ms=budget_ms / 5)
    return OverheadResult(
        device=device,
        tiny_op_s=tiny_med,
        tiny_op_best_s=tiny_best,
        loop_s=loop_s,
        loop_sampled_elements=LOOP_SAMPLE_ELEMENTS,
        vectorized_s=vec_s,
        device_vectorized_s=dev_s,
        crossovers=crossovers,
        notes=notes,
        first_touch=first_touch,
        functions=functions,
        host_costs=host,
        gemm_rows=rows,
    )
