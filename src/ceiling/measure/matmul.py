"""Matrix-multiply throughput per dtype, each result checked against a float64 reference."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ceiling.errors import InvalidInput, UnsupportedOnDevice, WrongResult
from ceiling.measure import machine
from ceiling.measure.stats import Stats, summarize
from ceiling.measure.timer import benchmark
from ceiling.vocabulary import normalize_dtype, torch_dtype

MATMUL_DTYPES = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8")

# Bound on the norm-wise relative error ||C - C_ref||_F / ||C_ref||_F. The reference uses the
# same (already rounded) inputs in float64, so only accumulation and output rounding count:
# about the unit roundoff of the output type (2^-53, 2^-24, tf32 inputs 2^-11, bf16 2^-8,
# fp16 2^-11, fp8 e4m3 2^-4) times a margin for sqrt(K)-style growth.
TOLERANCE = {
    "fp64": 1e-10,
    "fp32": 1e-4,
    "tf32": 5e-3,
    "bf16": 2e-2,
    "fp16": 5e-3,
    "fp8": 1e-1,
}

# Sizes (square) swept by default; the quick set is what `ceiling bench --quick` runs.
DEFAULT_SIZES = {"cpu": (512, 1024, 2048), "cuda": (1024, 2048, 4096, 8192)}
QUICK_SIZES = {"cpu": (1024, 2048), "cuda": (4096, 8192)}

# An emulated dtype asked for explicitly runs at the largest power of two up to this size
# whose single call is predicted (from a 128-cube probe, cubic scaling) to take under
# NON_NATIVE_CALL_S, so the answer comes in seconds, not minutes.
NON_NATIVE_MAX_SIZE = 1024
NON_NATIVE_CALL_S = 0.25
# Rows of C compared with the float64 reference (a sample keeps the check cheap at 8192^3).
CHECK_ROWS = 64
# On a CPU, operand sets are rotated until together they exceed this many times the LLC.
ROTATE_LLC_FACTOR = 2.0
MAX_OPERAND_SETS = 4


@dataclass(frozen=True)
class MatmulResult:
    """One timed matmul shape: raw samples (s) plus what they mean."""

    dtype: str
    m: int
    n: int
    k: int
    device: str
    samples: list[float]
    stats: Stats
    rel_error: float
    native: bool
    peak_flops_per_s: float | None = None
    notes: list[str] = field(default_factory=list)
    # Lowest clock consistent with a rate above the peak (None when within the peak).
    implied_clock_hz: float | None = None
    # Clocks, power, temperature read right after the timed calls (hardware.telemetry).
    telemetry: dict[str, Any] | None = None

    @property
    def flops(self) -> float:
        """2*M*N*K: one multiply-add counts 2 FLOPs."""
        return 2.0 * self.m * self.n * self.k

    @property
    def best_s(self) -> float:
        return self.stats.min

    @property
    def median_s(self) -> float:
        return self.stats.median

    @property
    def best_flops_per_s(self) -> float:
        return self.flops / self.best_s

    @property
    def peak_fraction(self) -> float | None:
        if not self.peak_flops_per_s:
            return None
        return self.best_flops_per_s / self.peak_flops_per_s

    def row(self) -> dict[str, Any]:
        return {
            **gemm_row(self),
            "peak_fraction": self.peak_fraction,
            "peak_tflops": self.peak_flops_per_s / 1e12 if self.peak_flops_per_s else None,
            "native": self.native,
            "notes": list(self.notes),
            "implied_clock_hz": self.implied_clock_hz,
            "telemetry": self.telemetry,
        }


def gemm_row(r) -> dict[str, Any]:
    """The figures of one timed GEMM (`r` has dtype, m, n, k, flops, samples, stats and
    rel_error), as every matmul record shows them; rates from the best and median times."""
    return {
        "dtype": r.dtype,
        "m": r.m,
        "n": r.n,
        "k": r.k,
        "flops": r.flops,
        "median_s": r.stats.median,
        "best_s": r.stats.min,
        "tflops": r.flops / r.stats.min / 1e12,
        "median_tflops": r.flops / r.stats.median / 1e12,
        "rel_error": r.rel_error,
        "samples": len(r.samples),
        "noisy": r.stats.noisy,
    }


def parse_shape(text: str) -> tuple[int, int, int]:
    """'MxNxK' -> (M, N, K)."""
    parts = text.lower().replace("×", "x").split("x")
    try:
        m, n, k = (int(p) for p in parts)
    except ValueError:
        raise InvalidInput(
            f"cannot read shape {text!r}; expected MxNxK, e.g. 4096x4096x4096"
        ) from None
    if min(m, n, k) <= 0:
        raise InvalidInput(f"shape {text!r}: M, N and K must be positive")
    return m, n, k


def check_dtype(dtype: str) -> str:
    return normalize_dtype(dtype, MATMUL_DTYPES, what="matmul dtype")


def supported(dtype: str, device: str) -> str | None:
    """None if the device can run this dtype at all, else the reason it cannot."""
    import torch

    if dtype == "tf32" and not machine.is_cuda(device):
        return "tf32 is a GPU tensor-core mode; a CPU has none (fp32 is its nearest)"
    if dtype == "fp8":
        if not machine.is_cuda(device):
            return "fp8 matmul needs a GPU with compute capability >= 8.9"
        cap = torch.cuda.get_device_capability(torch.device(device))
        if cap < (8, 9):
            return f"fp8 matmul needs compute capability >= 8.9; this GPU is {cap[0]}.{cap[1]}"
        if not hasattr(torch, "_scaled_mm"):
            return "this torch has no torch._scaled_mm for fp8"
    if dtype == "tf32" and torch.cuda.get_device_capability(torch.device(device)) < (8, 0):
        return "tf32 needs compute capability >= 8.0"
    return None


def _float32_precision(dtype: str):
    """fp32 means IEEE fp32; tf32 lets cuBLAS round inputs to tf32. Restored after."""
    return machine.float32_matmul_mode(tf32=dtype == "tf32")


def _operands(dtype: str, m: int, n: int, k: int, device: str, gen) -> tuple[Any, ...]:
    """Random normal A (m x k), B (k x n) in the dtype and an output buffer; never zeros."""
    import torch

    a = torch.randn(m, k, generator=gen, device=device, dtype=torch.float32)
    if dtype == "fp8":
        # _scaled_mm wants B column-major: build B^T row-major and view it transposed.
        bt = torch.randn(n, k, generator=gen, device=device, dtype=torch.float32)
        scale = torch.ones((), device=device, dtype=torch.float32)
        return (a.to(torch.float8_e4m3fn), bt.to(torch.float8_e4m3fn).t(), scale, None)
    b = torch.randn(k, n, generator=gen, device=device, dtype=torch.float32)
    tdt = torch_dtype(dtype)
    return (a.to(tdt), b.to(tdt), None, torch.empty(m, n, device=device, dtype=tdt))


def _make_call(dtype: str):
    import torch

    if dtype == "fp8":

        def call_fp8(ops):
            a, b, scale, _ = ops
            out = torch._scaled_mm(a, b, scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)
            # torch before 2.4 returned (result, amax).
            return out[0] if isinstance(out, tuple) else out

        return call_fp8

    def call(ops):
        a, b, _, c = ops
        return torch.matmul(a, b, out=c)

    return call


def relative_error(dtype: str, ops: tuple[Any, ...], c) -> float:
    """Norm-wise error of sampled rows of C against float64 A @ B on the same inputs."""
    import torch

    a, b = ops[0], ops[1]
    m = a.shape[0]
    rows = torch.linspace(0, m - 1, min(CHECK_ROWS, m), device=a.device).round().long()
    # float8 tensors support few ops (indexing among them only in recent torch): widen first.
    a_rows = (a.to(torch.float32) if a.element_size() == 1 else a)[rows]
    ref = a_rows.to(torch.float64) @ b.to(torch.float32).to(torch.float64)
    got = c[rows].to(torch.float64)
    denom = torch.linalg.norm(ref)
    err = torch.linalg.norm(got - ref) / denom if denom > 0 else torch.linalg.norm(got)
    value = float(err)
    return value if math.isfinite(value) else math.inf


def _probe_size(dtype: str, device: str, gen) -> int:
    """Largest power of two <= NON_NATIVE_MAX_SIZE whose call should take < NON_NATIVE_CALL_S."""
    import time

    probe = 128
    ops = _operands(dtype, probe, probe, probe, device, gen)
    call = _make_call(dtype)
    call(ops)
    t0 = time.perf_counter()
    call(ops)
    elapsed = max(time.perf_counter() - t0, 1e-6)
    size = probe
    while (
        size * 2 <= NON_NATIVE_MAX_SIZE and elapsed * ((size * 2) / probe) ** 3 < NON_NATIVE_CALL_S
    ):
        size *= 2
    return size


def run_matmul(
    dtype: str,
    m: int,
    n: int,
    k: int,
    device: str = "cpu",
    *,
    warmup_ms: float = 50.0,
    budget_ms: float = 300.0,
    peak_flops_per_s: float | None = None,
    native: bool = True,
    seed: int = 0,
) -> MatmulResult:
    """Time C = A @ B at one shape; raise WrongResult if C is not A @ B within TOLERANCE."""
    import torch

    dtype = check_dtype(dtype)
    reason = supported(dtype, device)
    if reason:
        raise UnsupportedOnDevice(reason)
    if dtype == "fp8" and (m % 16 or n % 16 or k % 16):
        raise InvalidInput(f"fp8 matmul needs M, N, K divisible by 16, got {m}x{n}x{k}")
    elem = 1 if dtype == "fp8" else torch_dtype(dtype).itemsize
    # One operand set, the float32 draw it is converted from, and the float64 copy of B
    # that the correctness check builds.
    machine.check_fits(
        (m * k + k * n + m * n) * elem + 4.0 * max(m * k, k * n) + 8.0 * k * n,
        device,
        f"{dtype} matmul {m}x{n}x{k}",
    )
    # Drawn on the device itself: an 8192^2 operand would take seconds to draw on the host.
    gen = torch.Generator(device=device).manual_seed(seed)
    sets = _operand_sets(dtype, m, n, k, device, elem, gen)
    call = _make_call(dtype)
    outputs: dict[int, Any] = {}

    def timed(ops):
        outputs[id(ops)] = call(ops)

    with _float32_precision(dtype), torch.no_grad():
        samples = benchmark(
            timed, device=device, warmup_ms=warmup_ms, budget_ms=budget_ms, inputs=sets
        )
        first = sets[0]
        err = relative_error(dtype, first, outputs[id(first)])
    if not err <= TOLERANCE[dtype]:
        raise WrongResult(
            f"{dtype} matmul {m}x{n}x{k} on {device}: relative error {err:.3g} exceeds "
            f"{TOLERANCE[dtype]:g}; the result is wrong, so its timing is not reported"
        )
    notes = [] if native else [f"{dtype} is not native here: emulated, far below the hardware"]
    if dtype == "fp8":
        notes.append(
            "fp8 e4m3 through torch._scaled_mm: per-tensor float32 scales of 1, bf16 output, "
            "full-precision accumulation (use_fast_accum off: slower, more accurate)"
        )
    stats = summarize(samples)
    rate = 2.0 * m * n * k / stats.min
    implied_clock_hz = None
    if peak_flops_per_s and rate > peak_flops_per_s:
        implied_clock_hz, note = _above_peak(rate, peak_flops_per_s, device)
        notes.append(note)
    return MatmulResult(
        dtype=dtype,
        m=m,
        n=n,
        k=k,
        device=device,
        samples=samples,
        stats=stats,
        rel_error=err,
        native=native,
        peak_flops_per_s=peak_flops_per_s,
        notes=notes,
        implied_clock_hz=implied_clock_hz,
    )


def _operand_sets(dtype: str, m: int, n: int, k: int, device: str, elem: int, gen) -> list:
    """One operand set on a GPU; on a CPU, as many copies as push one set out of the last
    level cache before it is used again (small operands would stay in the caches between
    calls), as far as they fit."""
    sets = [_operands(dtype, m, n, k, device, gen)]
    if not machine.is_cuda(device):
        set_bytes = (m * k + k * n + m * n) * elem
        llc = machine.last_level_cache_bytes(device)
        want = min(MAX_OPERAND_SETS, math.ceil(ROTATE_LLC_FACTOR * llc / set_bytes))
        free = machine.free_memory_bytes(device)
        if free is not None:  # extra copies only as far as they fit
            want = min(want, max(1, int(machine.FIT_SHARE * free // set_bytes)))
        while len(sets) < want:
            sets.append(_operands(dtype, m, n, k, device, gen))
    return sets


def _above_peak(rate: float, peak_flops_per_s: float, device: str) -> tuple[float | None, str]:
    """The clock a rate above the peak implies (None where no clock is readable) and the note
    that says so.

    A measured rate above the peak means the peak's clock is too low (turbo above a nominal
    clock, or a hypervisor that shows only the nominal one), never a free lunch. At the
    FLOPs/cycle the peak assumes, the rate bounds the real clock from below."""
    clock_hz = None if machine.is_cuda(device) else getattr(machine.cpu_info(), "freq_hz", None)
    if not clock_hz:
        return None, (
            "measured above the peak: the clock the peak assumes is below the one this "
            "device really runs at (turbo, or a VM showing the nominal clock)"
        )
    implied_clock_hz = clock_hz * rate / peak_flops_per_s
    return implied_clock_hz, (
        f"measured above the peak ({rate / peak_flops_per_s:.0%}): at the FLOPs per cycle "
        f"it assumes, the cores run at >= {implied_clock_hz / 1e9:.2f} GHz, not the "
        f"{clock_hz / 1e9:.2f} GHz readable here (turbo, or a VM showing the nominal "
        "clock)"
    )


@dataclass(frozen=True)
class MatmulPlan:
    """What to run: (dtype, shapes) pairs, plus lines for dtypes skipped and why."""

    runs: list[tuple[str, list[tuple[int, int, int]], bool]]
    skipped: dict[str, str]


def plan_matmul(
    device: str,
    dtypes: list[str] | None = None,
    sizes: list[int] | None = None,
    shapes: list[tuple[int, int, int]] | None = None,
    quick: bool = False,
) -> MatmulPlan:
    """Dtypes asked for explicitly always run (emulated ones at a size that takes seconds);
    by default every dtype runs that is native here, the others are listed as skipped."""
    import torch

    explicit = dtypes is not None and len(dtypes) > 0
    chosen = [check_dtype(d) for d in dtypes] if explicit else list(MATMUL_DTYPES)
    kind = "cuda" if machine.is_cuda(device) else "cpu"
    native = machine.native_dtypes(device)
    user_shapes = list(shapes or []) + [(s, s, s) for s in sizes or []]
    default = [(s, s, s) for s in (QUICK_SIZES if quick else DEFAULT_SIZES)[kind]]
    runs, skipped = [], {}
    gen = torch.Generator(device=device).manual_seed(1)
    for d in chosen:
        reason = supported(d, device)
        if reason:
            skipped[d] = reason
            continue
        is_native = bool(native.get(d, False))
        if is_native:
            runs.append((d, user_shapes or default, True))
        elif explicit:
            if user_shapes:
                runs.append((d, user_shapes, False))
            else:
                s = _probe_size(d, device, gen)
                runs.append((d, [(s, s, s)], False))
        else:
            skipped[d] = (
                f"{d} is not native here (emulated, often 100x slower); "
                f"ask for it with --dtype {d} to measure it at a small size"
            )
    return MatmulPlan(runs, skipped)
