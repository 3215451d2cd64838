"""Memory bandwidth the STREAM way: copy, scale, add, triad (+ dot), in float64.

Each kernel is one pass into a preallocated output (torch `out=` / in-place ops: no
temporaries). Bytes per element follow STREAM: copy and scale read one array and write one
(2 words), add and triad read two and write one (3 words), dot reads two (2 words).
Arrays are at least 4x the last-level cache so no pass is served from cache. The rate is
taken from the best time with the first timed iteration discarded (STREAM's rule); the
median is reported too. After timing, every array is checked against its expected value,
as STREAM's checkSTREAMresults does: a wrong result is an error, not a figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ceiling.errors import InvalidInput, WrongResult
from ceiling.measure import machine
from ceiling.measure.stats import Stats, summarize
from ceiling.measure.timer import HostTimer, benchmark

KERNELS = ("copy", "scale", "add", "triad", "dot")
WRITING_KERNELS = ("copy", "scale", "add", "triad")
WORDS_PER_ELEMENT = {"copy": 2, "scale": 2, "add": 3, "triad": 3, "dot": 2}
ELEMENT_BYTES = 8  # float64, as STREAM
SCALAR = 3.0
# Initial values as in STREAM; with them every result is an exact small integer in float64.
INITIAL = {"a": 1.0, "b": 2.0, "c": 0.0}
LLC_FACTOR = 4
MIN_ARRAY_BYTES = {"cpu": 64 * 2**20, "cuda": 512 * 2**20}
# Never take more than this share of the device's memory for the three arrays.
MAX_MEMORY_SHARE = 0.25


@dataclass(frozen=True)
class StreamResult:
    kernel: str
    elements: int
    bytes: float  # bytes moved per call, STREAM counting
    samples: list[float]  # seconds, first timed iteration already discarded
    stats: Stats
    device: str
    note: str = ""
    # Clocks, power, temperature read right after the timed calls (hardware.telemetry).
    telemetry: dict[str, Any] | None = None

    @property
    def best_gbps(self) -> float:
        """GB/s with GB = 1e9 bytes, from the best time."""
        return self.bytes / self.stats.min / 1e9

    @property
    def median_gbps(self) -> float:
        return self.bytes / self.stats.median / 1e9

    def row(self) -> dict[str, Any]:
        return {
            "kernel": self.kernel,
            "dtype": "fp64",
            "bytes": self.bytes,
            "elements": self.elements,
            "best_gbps": self.best_gbps,
            "median_gbps": self.median_gbps,
            "best_s": self.stats.min,
            "median_s": self.stats.median,
            "samples": len(self.samples),
            "noisy": self.stats.noisy,
            "note": self.note,
            "telemetry": self.telemetry,
        }


def array_elements(device: str) -> int:
    """float64 elements per array: >= 4x the LLC (STREAM's rule) and >= a floor, within memory."""
    kind = "cuda" if machine.is_cuda(device) else "cpu"
    want = max(LLC_FACTOR * machine.last_level_cache_bytes(device), MIN_ARRAY_BYTES[kind])
    total = machine.device_memory_bytes(device)
    if total:
        want = min(want, MAX_MEMORY_SHARE * total / 3)
    return int(want // ELEMENT_BYTES)


def expected_values() -> dict[str, float]:
    """Array values after copy, scale, add, triad in that order (each kernel is idempotent)."""
    a, b, c = INITIAL["a"], INITIAL["b"], INITIAL["c"]
    c = a  # copy
    b = SCALAR * c  # scale
    c = a + b  # add
    a = b + SCALAR * c  # triad
    return {"a": a, "b": b, "c": c}


def _check(name: str, array, value: float, kernel: str) -> None:
    lo, hi = float(array.min()), float(array.max())
    if not (lo == hi == value):
        raise WrongResult(
            f"STREAM {kernel}: array {name} holds values in [{lo}, {hi}], expected {value}; "
            "the bandwidth of a wrong result is not reported"
        )


def run_stream(
    device: str = "cpu",
    *,
    elements: int | None = None,
    warmup_ms: float = 20.0,
    budget_ms: float = 300.0,
    kernels: tuple[str, ...] = KERNELS,
    on_kernel=None,
    read_telemetry=None,
    into: list[StreamResult] | None = None,
) -> list[StreamResult]:
    """Time each STREAM kernel; `on_kernel(name)` is called before each (for progress),
    `read_telemetry()` after each, its reading kept in the kernel's result. Each result is
    appended to `into` (returned) as its kernel finishes."""
    import torch

    n = elements or array_elements(device)
    a = torch.full((n,), INITIAL["a"], dtype=torch.float64, device=device)
    b = torch.full((n,), INITIAL["b"], dtype=torch.float64, device=device)
    c = torch.full((n,), INITIAL["c"], dtype=torch.float64, device=device)
    bodies = {
        "copy": lambda: c.copy_(a),
        "scale": lambda: torch.mul(c, SCALAR, out=b),
        "add": lambda: torch.add(a, b, out=c),
        # a = b + s*c in one pass: add's alpha multiplies the second operand in the same loop.
        "triad": lambda: torch.add(b, c, alpha=SCALAR, out=a),
        "dot": lambda: torch.dot(a, b),
    }
    results = into if into is not None else []
    done: set[str] = set()
    for kernel in KERNELS:
        if kernel not in kernels:
            continue
        if on_kernel:
            on_kernel(kernel)
        samples = benchmark(
            bodies[kernel],
            device=device,
            warmup_ms=warmup_ms,
            budget_ms=budget_ms,
            min_samples=4,
            flush=None,  # the arrays are many times the cache already
        )[1:]
        results.append(
            StreamResult(
                kernel=kernel,
                elements=n,
                bytes=float(WORDS_PER_ELEMENT[kernel] * ELEMENT_BYTES * n),
                samples=samples,
                stats=summarize(samples),
                device=device,
                telemetry=read_telemetry() if read_telemetry else None,
            )
        )
        done.add(kernel)
        _validate(kernel, done, a, b, c, n, bodies)
    return results


def _validate(kernel, done, a, b, c, n, bodies) -> None:
    """Check the output of `kernel` against the value the STREAM sequence implies so far."""
    if kernel == "dot":
        got = float(bodies["dot"]())
        want = float(a[0]) * float(b[0]) * n
        if not math.isclose(got, want, rel_tol=1e-12):
            raise WrongResult(f"STREAM dot: got {got}, expected {want}")
        return
    # Only a complete copy->scale->add->triad order is checked against STREAM's final
    # values; a partial run checks each output against its own inputs instead.
    out = {"copy": ("c", c), "scale": ("b", b), "add": ("c", c), "triad": ("a", a)}[kernel]
    first = {
        "copy": float(a[0]),
        "scale": SCALAR * float(c[0]),
        "add": float(a[0]) + float(b[0]),
        "triad": float(b[0]) + SCALAR * float(c[0]),
    }[kernel]
    if kernel == "triad" and {"copy", "scale", "add"} <= done:
        first = expected_values()["a"]
    _check(out[0], out[1], first, kernel)


def run_naive_triad(
    elements: int, *, warmup_ms: float = 20.0, budget_ms: float = 300.0
) -> StreamResult:
    """numpy `a = b + s*c` as usually written: `s*c` makes a temporary array, so memory sees
    two passes and an allocation, while STREAM still credits 3 words per element."""
    import numpy as np

    b = np.full(elements, INITIAL["b"])
    c = np.full(elements, 1.0)
    holder = {}

    def naive():
        holder["a"] = b + SCALAR * c

    samples = benchmark(
        naive,
        warmup_ms=warmup_ms,
        budget_ms=budget_ms,
        min_samples=4,
        flush=None,
        timer=HostTimer(),
    )[1:]
    if not float(holder["a"].min()) == float(holder["a"].max()) == INITIAL["b"] + SCALAR:
        raise WrongResult("naive numpy triad produced a wrong result")
    return StreamResult(
        kernel="triad (numpy a = b + s*c)",
        elements=elements,
        bytes=float(3 * ELEMENT_BYTES * elements),
        samples=samples,
        stats=summarize(samples),
        device="cpu",
        note="naive: s*c makes a temporary; same STREAM byte count",
    )


def bandwidth_ceiling(results: list[StreamResult]) -> float:
    """The device's measured bandwidth (bytes/s): the best of copy/scale/add/triad.

    dot is left out: it only reads, which most memory systems do faster than read+write,
    so it would overstate the roof for ops that write results.
    """
    rates = [r.bytes / r.stats.min for r in results if r.kernel in WRITING_KERNELS]
    if not rates:
        raise InvalidInput("no copy/scale/add/triad result to take the bandwidth from")
    return max(rates)
