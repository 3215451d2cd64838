"""The best BLAS path on the CPU beside the framework's: numpy's matmul (the BLAS numpy was
built with — OpenBLAS, MKL or Accelerate) timed at the shapes torch's was, each result checked
against float64. Returns raw samples; `framework_gap` compares the two rates afterwards.

A CPU's matmul ceiling is the best any library reaches on it, not torch's: where torch's
GEMM runs below numpy's on the same cores, that gap is the framework's (its BLAS, its
threads), and no model change will recover it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median
from typing import Any

from ceiling.errors import WrongResult
from ceiling.measure import machine
from ceiling.measure.matmul import (
    CHECK_ROWS,
    MAX_OPERAND_SETS,
    ROTATE_LLC_FACTOR,
    TOLERANCE,
    gemm_row,
)
from ceiling.measure.stats import Stats, summarize
from ceiling.measure.timer import benchmark

# The dtypes a CPU BLAS multiplies natively (dgemm, sgemm), by numpy's name.
BLAS_DTYPES = {"fp64": "float64", "fp32": "float32"}


@dataclass(frozen=True)
class BlasResult:
    """One timed numpy matmul: raw samples (s) and the library that ran it."""

    dtype: str
    m: int
    n: int
    k: int
    library: str
    samples: list[float]
    stats: Stats
    rel_error: float
    # torch's rate over this library's in each round the two ran alternately at this shape
    round_ratios: tuple[float, ...] = ()

    @property
    def flops(self) -> float:
        """2*M*N*K: one multiply-add counts 2 FLOPs."""
        return 2.0 * self.m * self.n * self.k

    @property
    def best_flops_per_s(self) -> float:
        return self.flops / self.stats.min

    def row(self) -> dict[str, Any]:
        return {
            **gemm_row(self),
            "library": self.library,
            "torch_over_blas_rounds": list(self.round_ratios),
        }


def blas_library() -> str:
    """numpy's BLAS as its build reports it ("scipy-openblas 0.3.31"), else "numpy's BLAS"."""
    import numpy as np

    try:
        blas = np.show_config(mode="dicts")["Build Dependencies"]["blas"]
    except Exception:  # numpy < 1.25 prints its config and returns nothing
        return "numpy's BLAS"
    name, version = blas.get("name") or "numpy's BLAS", blas.get("version") or ""
    return f"{name} {version}".strip()


def run_numpy_matmul(
    dtype: str,
    m: int,
    n: int,
    k: int,
    *,
    warmup_ms: float = 50.0,
    budget_ms: float = 300.0,
    seed: int = 0,
) -> BlasResult:
    """Time numpy's C = A @ B at one shape on the CPU; raise WrongResult if C is not A @ B
    within the tolerance `measure.matmul` holds torch's result to."""
    import numpy as np

    np_dtype = BLAS_DTYPES[dtype]
    set_bytes = (m * k + k * n + m * n) * np.dtype(np_dtype).itemsize
    machine.check_fits(set_bytes + 8.0 * k * n, "cpu", f"numpy {dtype} matmul {m}x{n}x{k}")
    rng = np.random.default_rng(seed)
    # operand sets rotated as torch's are, so neither library runs from a warm cache
    llc = machine.last_level_cache_bytes("cpu")
    count = max(1, min(MAX_OPERAND_SETS, math.ceil(ROTATE_LLC_FACTOR * llc / set_bytes)))
    sets = [
        (
            rng.standard_normal((m, k)).astype(np_dtype),
            rng.standard_normal((k, n)).astype(np_dtype),
            np.empty((m, n), dtype=np_dtype),
        )
        for _ in range(count)
    ]

    def call(ops) -> None:
        a, b, c = ops
        np.matmul(a, b, out=c)

    samples = benchmark(call, device="cpu", warmup_ms=warmup_ms, budget_ms=budget_ms, inputs=sets)
    a, b, c = sets[0]
    rows = np.linspace(0, m - 1, min(CHECK_ROWS, m)).round().astype(int)
    ref = a[rows].astype(np.float64) @ b.astype(np.float64)
    denom = float(np.linalg.norm(ref))
    err = float(np.linalg.norm(c[rows] - ref)) / denom if denom > 0 else math.inf
    if not err <= TOLERANCE[dtype]:
        raise WrongResult(
            f"numpy {dtype} matmul {m}x{n}x{k}: relative error {err:.3g} exceeds "
            f"{TOLERANCE[dtype]:g}; the result is wrong, so its timing is not reported"
        )
    return BlasResult(dtype, m, n, k, blas_library(), samples, summarize(samples), err)


def framework_gap(
    torch_rows: list[dict], blas_rows: list[dict], busy: bool = False
) -> list[dict[str, Any]]:
    """Per dtype measured by both, at the shape the BLAS ran fastest: torch's rate over the
    BLAS's (rows as `MatmulResult.row()` / `BlasResult.row()` give them), the median of the
    rounds the two ran alternately, with the rounds' range. `verdict`: "framework gap"
    (below 1, the framework leaves that share of the machine unused) or "torch's path is
    the best" only when the range is narrower than the distance from 1; else "inconclusive",
    or "busy" when other work shared the machine (then no verdict either)."""
    out = []
    for dtype in BLAS_DTYPES:
        mine = [r for r in blas_rows if r["dtype"] == dtype]
        if not mine:
            continue
        best_blas = max(mine, key=lambda r: r["tflops"])
        shape = (best_blas["m"], best_blas["n"], best_blas["k"])
        same = [r for r in torch_rows if r["dtype"] == dtype and (r["m"], r["n"], r["k"]) == shape]
        if not same:
            continue
        ratios = best_blas.get("torch_over_blas_rounds") or []
        ratio = median(ratios) if ratios else same[0]["tflops"] / best_blas["tflops"]
        out.append(
            {
                "dtype": dtype,
                "library": best_blas["library"],
                "shape": list(shape),
                "torch_tflops": same[0]["tflops"],
                "blas_tflops": best_blas["tflops"],
                "ratio": ratio,
                "ratio_range": [min(ratios), max(ratios)] if ratios else None,
                "rounds": len(ratios),
                "verdict": gap_verdict(ratios, busy),
            }
        )
    return out


def gap_verdict(ratios: list[float], busy: bool) -> str:
    """What torch/BLAS ratios from interleaved rounds say: a verdict only when the machine
    was idle and the rounds' spread is narrower than the effect (the distance from 1)."""
    if busy:
        return "busy"
    if len(ratios) < 2:
        return "inconclusive"
    spread, effect = max(ratios) - min(ratios), abs(median(ratios) - 1.0)
    if spread >= effect:
        return "inconclusive"
    return "framework gap" if median(ratios) < 1 else "torch's path is the best"
