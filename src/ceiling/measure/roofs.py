"""What a FLOP rate and a DRAM bandwidth leave out, read quickly where no machine profile
has them: the per-op floor (dispatch on a CPU, launch on a GPU), the read bandwidth of the
last-level cache, the first touch of a new buffer (measure.first_touch), and each matmul
shape's own rate, its operands in cache or, when the step's data do not fit, from memory.

Raw figures (seconds, bytes/s); ceiling.model.roofline.Roofs combines them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from ceiling.errors import CeilingError
from ceiling.measure.once import measured_once
from ceiling.measure.timer import benchmark

CACHE_SHARE = 0.25  # a buffer this share of the cache stays resident between passes
QUICK_BUDGET_MS = 60.0


@dataclass(frozen=True)
class LocalRoofs:
    per_op_s: float
    per_op_source: str
    cache_bytes: float | None
    cache_bandwidth_bytes_per_s: float | None
    first_touch_s_per_byte: float = 0.0  # extra per byte of a new buffer ...
    first_touch_from_bytes: float | None = None  # ... from this size (None: none pays it)
    first_touch_s_per_fault: float = 0.0  # one page fault (0: not counted here)
    # seconds per element of common elementwise functions (measure.functions)
    function_s_per_element: dict = field(default_factory=dict)
    # host seconds per op by phase of a training step (measure.host_costs; {}: not a step)
    host_s_by_phase: dict = field(default_factory=dict)
    # ((bytes an elementwise op moves, bytes/s it moves them at), ...) by size
    bandwidth_by_bytes: tuple = ()


def _profiled_overhead(device: str, profile: str | Path | None) -> dict:
    """What `ceiling bench overhead` saved in the machine profile ({} when nothing)."""
    from ceiling.hardware.profile import load_profile

    try:
        saved = load_profile(profile).device("cuda" if device.startswith("cuda") else "cpu")
    except (CeilingError, OSError):
        return {}
    overhead = (saved.extra or {}).get("overhead")
    return overhead if isinstance(overhead, dict) else {}


def _profiled_per_op_s(overhead: dict) -> float | None:
    """The median tiny-op time `ceiling bench` saved in the machine profile, if any."""
    value = overhead.get("tiny_op_s")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def first_touch_cost(device: str, profile=None, overhead: dict | None = None):
    """model.first_touch.FirstTouch: from the machine profile's raw times (`overhead`: its
    saved overhead figures, when already read), else measured (once per process, device and
    thread count)."""
    from ceiling.measure.first_touch import quick_first_touch
    from ceiling.model.first_touch import fit

    if overhead is None:
        overhead = _profiled_overhead(device, profile)
    saved = overhead.get("first_touch")
    try:
        return fit(saved["sizes_bytes"], saved["fresh_s"], saved["reused_s"],
                   saved.get("fresh_faults"))  # fmt: skip
    except (CeilingError, KeyError, TypeError, AttributeError):
        t = quick_first_touch(device)
        return fit(t.sizes_bytes, t.fresh_s, t.reused_s, t.fresh_faults)


def quick_cache_bandwidth(device: str, cache_bytes: float | None) -> float | None:
    """Best bytes/s of summing a buffer a quarter of the last-level cache (read-only, hot),
    measured once per process, device, thread count and cache size."""
    if not cache_bytes:
        return None
    return measured_once(
        "cache_bandwidth", device, lambda: _time_cache_bandwidth(device, cache_bytes), cache_bytes
    )


def _time_cache_bandwidth(device: str, cache_bytes: float) -> float:
    import torch

    n = max(int(cache_bytes * CACHE_SHARE) // 4, 1024)
    x = torch.ones(n, dtype=torch.float32, device=device)
    times = benchmark(
        lambda: x.sum(), device=device, warmup_ms=20.0, budget_ms=QUICK_BUDGET_MS, min_samples=50
    )
    return n * 4 / min(times)


# elements of each operand of the timed add: its three operands from inside the core's own
# caches to beyond the last level (32 KiB ... 32 MiB of fp32 each)
ELEMENTWISE_ELEMENTS = (2**13, 2**16, 2**19, 2**21, 2**22, 2**23)


def quick_elementwise_bandwidth(device: str) -> tuple[tuple[float, float], ...]:
    """time_elementwise_bandwidth at the quick budget, once per process, device and
    threads."""
    return measured_once(
        "elementwise_bandwidth", device, lambda: time_elementwise_bandwidth(device)
    )


def time_elementwise_bandwidth(
    device: str, budget_ms: float = QUICK_BUDGET_MS, elements=ELEMENTWISE_ELEMENTS
) -> tuple[tuple[float, float], ...]:
    """((bytes moved, bytes/s), ...): an add of two fp32 tensors into a third (read two,
    write one, as a training step's elementwise ops do) at each size, its median call less
    the same add's on one element (the call's own cost, which the per-op floor prices): the
    bandwidth an op of that size moves its bytes at, from the caches it fits or from
    memory. A size whose call is no longer than the one-element call is left out."""
    import torch

    def median_call(n: int) -> float:
        x, y, o = (torch.ones(n, dtype=torch.float32, device=device) for _ in range(3))
        times = benchmark(lambda: torch.add(x, y, out=o), device=device, warmup_ms=1.0,
                          budget_ms=budget_ms / (len(elements) + 1), min_samples=3,
                          flush=None)  # fmt: skip
        return _typical(times)

    floor = median_call(1)
    out = []
    for n in elements:
        moved, work = 3.0 * n * 4, median_call(n) - floor
        if work > 0:
            out.append((moved, moved / work))
    return tuple(out)


AUTOGRAD_CHAIN = 100  # tiny ops per timed chain (each adds one op to the backward pass)


def quick_autograd_op(device: str) -> float:
    """time_autograd_op at the quick budget, measured once per process, device and threads."""
    return measured_once("autograd_op", device, lambda: time_autograd_op(device))


def time_autograd_op(device: str, budget_ms: float = QUICK_BUDGET_MS) -> float:
    """Median seconds per op of a training step's tiny ops: a chain of one-element
    multiplies recorded by autograd, then its backward (one more op per multiply), so the
    graph bookkeeping every op of a training step pays is in the figure."""
    import torch

    x = torch.ones(1, device=device, requires_grad=True)

    def chain() -> None:
        y = x
        for _ in range(AUTOGRAD_CHAIN):
            y = y * 1.0
        y.backward()

    times = benchmark(chain, device=device, warmup_ms=10.0, budget_ms=budget_ms, flush=None)
    return sorted(times)[len(times) // 2] / (2 * AUTOGRAD_CHAIN)


def host_costs(device: str, profile=None, overhead: dict | None = None):
    """measure.host_costs.HostCosts: from the machine profile (`ceiling bench overhead`
    saves them; `overhead`: as first_touch_cost), else measured quickly (once per process,
    device and threads)."""
    from ceiling.measure.host_costs import from_row, quick_host_costs

    if overhead is None:
        overhead = _profiled_overhead(device, profile)
    return from_row(overhead.get("host_costs")) or quick_host_costs(device)


def function_costs(device: str, profile=None, overhead: dict | None = None) -> dict[str, float]:
    """Seconds per element of each function of measure.functions: from the machine
    profile's raw times (`overhead`: as first_touch_cost), else measured quickly (once per
    process, device and threads); a function the profile lacks (saved before it was
    timed) measured quickly beside the profile's."""
    from ceiling.measure.functions import NAMES, quick_function_times

    if overhead is None:
        overhead = _profiled_overhead(device, profile)
    saved = overhead.get("functions")
    try:
        costs = _per_element(float(saved["elements"]), dict(saved["best_s"]))
    except (KeyError, TypeError, ValueError):
        costs = {}
    if not set(NAMES) <= set(costs):
        t = quick_function_times(device)
        costs = {**_per_element(t.elements, t.best_s), **costs}
    return costs


def _per_element(elements: float, best: dict) -> dict[str, float]:
    return {
        k: float(v) / elements for k, v in best.items() if isinstance(v, (int, float)) and v > 0
    }


def local_roofs(
    device: str, cache_bytes: float | None, profile=None, train: bool = False
) -> LocalRoofs:
    """The per-op floor: with autograd for a training step (measured quickly, with each
    phase's host time per op), else from the machine profile or a quick measurement; the
    cache's bandwidth and an elementwise op's bandwidth by size measured quickly."""
    from ceiling.measure.overhead import time_tiny_op

    overhead = _profiled_overhead(device, profile)  # the profile file, read once
    if train:
        per_op = quick_autograd_op(device)
        source = "a quick tiny-op measurement with autograd (forward and backward ops)"
    else:
        per_op = _profiled_per_op_s(overhead)
        source = "machine profile (`ceiling bench overhead`)"
    if per_op is None:
        per_op, _best = measured_once(
            "tiny_op",
            device,
            lambda: time_tiny_op(device, warmup_ms=10.0, budget_ms=QUICK_BUDGET_MS),
        )
        source = "a quick tiny-op measurement (`ceiling bench overhead` measures it properly)"
    touch = first_touch_cost(device, overhead=overhead)
    host = host_costs(device, overhead=overhead).by_phase() if train else {}
    return LocalRoofs(per_op, source, cache_bytes, quick_cache_bandwidth(device, cache_bytes),
                      touch.s_per_byte, touch.from_bytes, touch.s_per_fault,
                      function_costs(device, overhead=overhead), host,
                      quick_elementwise_bandwidth(device))  # fmt: skip


MAX_SHAPES = 24  # distinct matmul shapes timed per step, the largest by FLOPs first


MAX_COPIES = 64  # operand copies rotated to keep a small matmul's operands out of cache


def _typical(times: list[float]) -> float:
    """The median call: a step sums many calls of each shape, so its time holds each one's
    typical time, not the luckiest (which no step gets for all its calls at once)."""
    return sorted(times)[len(times) // 2]


def matmul_rates(
    shapes, device: str, dtype, budget_ms: float = 15.0, cold_bytes: float | None = None
) -> dict:
    """FLOP/s of one (M, K) × (K, N) matmul per (M, N, K) (its median call), laid out as
    nn.Linear has it (a weight of N rows of K), into an existing output: the compute roof
    of a matmul of that shape on this device, which small and skinny shapes keep below peak.
    A batched shape (B, M, N, K) is timed as one bmm of B such products: many small
    matrices in one call (windowed or per-head attention) run far faster than B calls.

    `cold_bytes` (the last-level cache, when the step's data do not fit it; else the
    core's own cache below it): each call reads operands the previous calls have pushed out
    of a cache that size, as each of the step's matmuls reads its weights from memory (or
    from the last level, the ops in between having refilled the core's own cache); a
    matrix-vector product then runs at the bandwidth a matmul kernel streams at, which a
    plain read benchmark does not show."""
    import torch

    def batched(shape) -> tuple[int, int, int, int]:
        return tuple(shape) if len(shape) == 4 else (1, *shape)

    rates = {}
    for shape in sorted(shapes, key=lambda s: -math.prod(s))[:MAX_SHAPES]:
        b, m, n, k = batched(shape)
        pair = b * (m * k + n * k) * torch.empty((), dtype=dtype).element_size()
        copies = min(MAX_COPIES, 1 + int(2 * cold_bytes // pair)) if cold_bytes else 1
        lead = (b,) if len(shape) == 4 else ()
        inputs = [
            (torch.randn(*lead, m, k, device=device, dtype=dtype),
             torch.randn(*lead, n, k, device=device, dtype=dtype))
            for _ in range(copies)
        ]  # fmt: skip
        out = torch.empty(*lead, m, n, device=device, dtype=dtype)
        product = torch.bmm if lead else torch.mm

        def mm(x_w, out=out, product=product) -> None:
            product(x_w[0], x_w[1].transpose(-1, -2), out=out)

        times = benchmark(mm, device=device, inputs=inputs, warmup_ms=2.0,
                          budget_ms=budget_ms, min_samples=max(5, copies))  # fmt: skip
        rates[shape] = 2.0 * b * m * n * k / _typical(times)
    return rates


def attention_times(dims, device: str, dtype, budget_ms: float = 15.0) -> dict:
    """Seconds of one fused attention call per shape (op_flops.attention_dims; its median
    call), timed alone: the library's attention kernel at that shape, its compute roof on
    this device. A backward is timed as the gradients of one forward kept for the purpose."""
    import torch
    import torch.nn.functional as F

    out = {}
    for key in dims:
        direction, b, h, lq, lk, d, causal = key
        q = torch.randn(b, h, lq, d, device=device, dtype=dtype)
        k, v = (torch.randn(b, h, lk, d, device=device, dtype=dtype) for _ in range(2))
        if direction == "forward":

            def call(q=q, k=k, v=v, causal=causal) -> None:
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        else:
            qkv = [t.requires_grad_() for t in (q, k, v)]
            y = F.scaled_dot_product_attention(*qkv, is_causal=causal)
            grad = torch.randn_like(y)

            def call(y=y, qkv=qkv, grad=grad) -> None:
                torch.autograd.grad(y, qkv, grad, retain_graph=True)

        times = benchmark(call, device=device, warmup_ms=1.0, budget_ms=budget_ms,
                          min_samples=3)  # fmt: skip
        out[key] = _typical(times)
    return out


def replayed_times(
    keys, device: str, budget_ms: float = 15.0, cold_bytes: float | None = None
) -> dict:
    """Seconds of one call (its median) per recorded call key (overload name, argument
    specs: profile.op_flops.replay_key), run again alone on fresh random tensors of the
    same shapes: a convolution's own rate on this device at its shape, which the library's
    kernel choice (direct, im2col, Winograd; depthwise or not) sets, not the matmul peak; a
    recurrent layer's, whose time steps run one after another as small GEMMs. A call that
    cannot run on random inputs is left out (its op then at the peak). `cold_bytes`: as
    matmul_rates has it, each call reads arguments the previous calls have pushed out of a
    cache that size (copies of them rotated), as the step's call reads its weights, and its
    saved activations in the backward, after the ops in between."""
    out = {}
    for key in list(keys)[:MAX_SHAPES]:
        try:
            fn, args = _replayable(key, device)
            fn(*args)
        except (RuntimeError, TypeError, ValueError):  # a call its random inputs cannot
            continue  # stand for (a backward checking its saved state): at the peak
        copies = _copies(args, cold_bytes)
        inputs = [args] + [_replayable(key, device)[1] for _ in range(copies - 1)]

        def call(args, fn=fn) -> None:
            fn(*args)

        times = benchmark(call, device=device, inputs=inputs, warmup_ms=1.0,
                          budget_ms=budget_ms, min_samples=max(3, copies))  # fmt: skip
        out[key] = _typical(times)
    return out


def _copies(args, cold_bytes: float | None) -> int:
    """Copies of a call's arguments that, rotated, push each out of a cache of
    `cold_bytes` before it is read again (1: no cache to push them out of)."""
    import torch
    from torch.utils._pytree import tree_leaves

    held = sum(a.nbytes for a in tree_leaves(args) if isinstance(a, torch.Tensor))
    if not cold_bytes or held <= 0:
        return 1
    return min(MAX_COPIES, 1 + int(2 * cold_bytes // held))


def _replayable(key, device: str):
    import torch

    name, specs = key
    namespace, op, overload = name.split(".")
    fn = getattr(getattr(getattr(torch.ops, namespace), op), overload)

    def build(spec):
        if isinstance(spec, tuple) and len(spec) == 3 and spec[0] == "tensor":
            dtype = getattr(torch, spec[2])
            if dtype.is_floating_point:
                return torch.randn(spec[1], dtype=dtype, device=device)
            return torch.zeros(spec[1], dtype=dtype, device=device)  # a workspace, indices
        if isinstance(spec, tuple):
            return [build(s) for s in spec]
        return spec

    return fn, [build(s) for s in specs]
