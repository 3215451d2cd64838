"""A CPU's matrix-multiply rate at the few rows a decode step multiplies by.

A decode step multiplies each weight matrix by one row per sequence. On a CPU such a GEMM
runs far below the rate a large square one reaches: at one row it streams the weights
(a GEMV); from two rows the BLAS's GEMM path takes over, and its rate grows towards the
peak only over tens of rows (a 2-core EPYC guest: 9.5 GFLOP/s at one and two rows, 32 at
eight, 131 at 128, 182 for a 2048-square GEMM). The weights of a model do not stay in
cache from one step to the next, so each call here multiplies the next of several weight
matrices that together exceed the last-level cache, as a forward pass meets its layers'
weights.

`time_gemm_rows` returns the raw best seconds at each row count; `ceiling.model.gemm_rows`
turns them into a rate as a function of rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.measure.timer import benchmark

ROWS = (1, 2, 4, 8, 16, 32, 64, 128)
WIDTH = 1024  # K = N: a 4 MiB fp32 weight matrix
# Distinct weight matrices rotated through: 64 MiB, past a last-level cache of one CPU's share.
MATRICES = 16
QUICK_BUDGET_MS = 8.0


@dataclass(frozen=True)
class GemmRowsSamples:
    """Best seconds of an fp32 (rows × k) @ (k × n) multiply with a weight not in cache."""

    rows: list[int]
    k: int
    n: int
    best_s: list[float]


def time_gemm_rows(
    device: str = "cpu", rows=ROWS, width: int = WIDTH, budget_ms: float = 40.0
) -> GemmRowsSamples:
    """Best seconds of `x @ W` at each row count, W the next of MATRICES weights each call."""
    import torch

    weights = [torch.randn(width, width, device=device) for _ in range(MATRICES)]
    best = []
    for m in rows:
        x = torch.randn(int(m), width, device=device)
        times = benchmark(lambda w, x=x: torch.mm(x, w), device=device, warmup_ms=1.0,
                          budget_ms=budget_ms, min_samples=MATRICES, inputs=weights,
                          flush=None)  # fmt: skip
        best.append(min(times))
    return GemmRowsSamples([int(m) for m in rows], width, width, best)


def quick_gemm_rows(device: str = "cpu") -> GemmRowsSamples:
    """time_gemm_rows at the quick budget, measured once per process, device and threads."""
    from ceiling.measure.once import measured_once

    return measured_once(
        "gemm_rows", device, lambda: time_gemm_rows(device, budget_ms=QUICK_BUDGET_MS)
    )
