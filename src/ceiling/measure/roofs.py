"""The two roofs a FLOP rate and a DRAM bandwidth leave out, read quickly where no machine
profile has them: the per-op floor (dispatch on a CPU, launch on a GPU) and the read
bandwidth of the last-level cache.

Raw figures (seconds, bytes/s); ceiling.model.roofline.Roofs combines them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ceiling.errors import CeilingError
from ceiling.measure.timer import benchmark

CACHE_SHARE = 0.25  # a buffer this share of the cache stays resident between passes
QUICK_BUDGET_MS = 60.0


@dataclass(frozen=True)
class LocalRoofs:
    per_op_s: float
    per_op_source: str
    cache_bytes: float | None
    cache_bandwidth_bytes_per_s: float | None


def _profiled_per_op_s(device: str, profile: str | Path | None) -> float | None:
    """The median tiny-op time `ceiling bench` saved in the machine profile, if any."""
    from ceiling.hardware.profile import load_profile

    try:
        saved = load_profile(profile).device("cuda" if device.startswith("cuda") else "cpu")
    except (CeilingError, OSError):
        return None
    overhead = (saved.extra or {}).get("overhead") or {}
    value = overhead.get("tiny_op_s")
    return float(value) if isinstance(value, (int, float)) and value > 0 else None


def quick_cache_bandwidth(device: str, cache_bytes: float | None) -> float | None:
    """Best bytes/s of summing a buffer a quarter of the last-level cache (read-only, hot)."""
    import torch

    if not cache_bytes:
        return None
    n = max(int(cache_bytes * CACHE_SHARE) // 4, 1024)
    x = torch.ones(n, dtype=torch.float32, device=device)
    times = benchmark(
        lambda: x.sum(), device=device, warmup_ms=20.0, budget_ms=QUICK_BUDGET_MS, min_samples=50
    )
    return n * 4 / min(times)


AUTOGRAD_CHAIN = 100  # tiny ops per timed chain (each adds one op to the backward pass)


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


def local_roofs(
    device: str, cache_bytes: float | None, profile=None, train: bool = False
) -> LocalRoofs:
    """The per-op floor: with autograd for a training step (measured quickly), else from
    the machine profile or a quick measurement; the cache's bandwidth measured quickly."""
    from ceiling.measure.overhead import time_tiny_op

    if train:
        per_op = time_autograd_op(device)
        source = "a quick tiny-op measurement with autograd (forward and backward ops)"
    else:
        per_op = _profiled_per_op_s(device, profile)
        source = "machine profile (`ceiling bench overhead`)"
    if per_op is None:
        per_op, _best = time_tiny_op(device, warmup_ms=10.0, budget_ms=QUICK_BUDGET_MS)
        source = "a quick tiny-op measurement (`ceiling bench overhead` measures it properly)"
    return LocalRoofs(per_op, source, cache_bytes, quick_cache_bandwidth(device, cache_bytes))


MAX_SHAPES = 24  # distinct matmul shapes timed per step, the largest by FLOPs first


def matmul_rates(shapes, device: str, dtype, budget_ms: float = 15.0) -> dict:
    """Best FLOP/s of one (M, K) × (K, N) matmul per (M, N, K), laid out as nn.Linear has
    it (a weight of N rows of K): the compute roof of a matmul of that shape on this
    device, which small and skinny shapes keep below peak."""
    import torch

    rates = {}
    for m, n, k in sorted(shapes, key=lambda s: -s[0] * s[1] * s[2])[:MAX_SHAPES]:
        x = torch.randn(m, k, device=device, dtype=dtype)
        w = torch.randn(n, k, device=device, dtype=dtype)
        times = benchmark(lambda x=x, w=w: torch.nn.functional.linear(x, w), device=device,
                          warmup_ms=2.0, budget_ms=budget_ms, min_samples=5)  # fmt: skip
        rates[(m, n, k)] = 2.0 * m * n * k / min(times)
    return rates
