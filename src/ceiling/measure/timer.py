"""The timing harness: warm-up and measurement as time budgets, raw samples out.

One call of `fn` is one sample. On a CUDA device each sample is bracketed by a pair of CUDA
events and the L2 cache is flushed before it (outside the events), so a kernel never finds
its inputs already on chip from the previous call; events are read once at the end, so
timing does not stall the queue. On a CPU the host clock (perf_counter_ns) brackets each
call; rotating over several input sets keeps small inputs from sitting in cache.
Statistics live in `ceiling.measure.stats`; this module only produces durations in seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ceiling.errors import InvalidInput
from ceiling.hardware.profile import METHOD_VERSION  # noqa: F401  (re-exported for records)

# The flush buffer is this many times the L2, so whatever a sample left there is evicted.
L2_FLUSH_FACTOR = 2.0
# Used when the driver does not report an L2 size.
L2_FLUSH_FALLBACK_BYTES = 256 * 2**20

# Warm-up calls at least: the first pays one-off costs, the next shows the steady time.
WARMUP_MIN_CALLS = 2

Clock = Callable[[], int]  # nanoseconds, monotonic


class Timer(Protocol):
    """Brackets one call: start() before, stop(token) after, collect() turns tokens to seconds."""

    def start(self) -> Any: ...

    def stop(self, token: Any) -> Any: ...

    def collect(self, pending: Sequence[Any]) -> list[float]: ...


class HostTimer:
    """Host clock around each call; `sync` (if given) waits for queued device work first."""

    def __init__(self, clock: Clock = time.perf_counter_ns, sync: Callable[[], None] | None = None):
        self._clock = clock
        self._sync = sync

    def start(self) -> int:
        if self._sync is not None:
            self._sync()
        return self._clock()

    def stop(self, token: int) -> float:
        if self._sync is not None:
            self._sync()
        return (self._clock() - token) * 1e-9

    def collect(self, pending: Sequence[float]) -> list[float]:
        return [float(p) for p in pending]


class CudaEventTimer:
    """A CUDA event pair per call on the device's current stream; read after one synchronize."""

    def __init__(self, device: Any):
        import torch

        self._torch = torch
        self._device = torch.device(device)

    def _record(self):
        event = self._torch.cuda.Event(enable_timing=True)
        event.record(self._torch.cuda.current_stream(self._device))
        return event

    def start(self):
        return self._record()

    def stop(self, token):
        return (token, self._record())

    def collect(self, pending: Sequence[Any]) -> list[float]:
        self._torch.cuda.synchronize(self._device)
        # elapsed_time reports milliseconds.
        return [start.elapsed_time(end) * 1e-3 for start, end in pending]


def is_cuda(device: Any) -> bool:
    return str(device).startswith("cuda")


def device_sync(device: Any) -> Callable[[], None] | None:
    """A function that waits for all queued work on `device`; None on a CPU (nothing queued)."""
    if not is_cuda(device):
        return None
    import torch

    dev = torch.device(device)
    return lambda: torch.cuda.synchronize(dev)


def l2_flush_bytes(l2_bytes: float | None, factor: float = L2_FLUSH_FACTOR) -> int:
    """Size of the buffer written before each GPU sample: `factor` x the L2, or a fallback."""
    if factor < 1:
        raise InvalidInput(f"the flush buffer must be at least the L2 size, got factor {factor}")
    if not l2_bytes or l2_bytes <= 0:
        return L2_FLUSH_FALLBACK_BYTES
    return math.ceil(l2_bytes * factor)


def make_l2_flush(device: Any) -> Callable[[], None] | None:
    """Writing a buffer of twice the device's L2 evicts the previous sample's data from it."""
    if not is_cuda(device):
        return None
    import torch

    props = torch.cuda.get_device_properties(torch.device(device))
    buf = torch.empty(
        l2_flush_bytes(getattr(props, "L2_cache_size", None)), dtype=torch.int8, device=device
    )
    return buf.zero_


def benchmark(
    fn: Callable[..., Any],
    *,
    device: Any = "cpu",
    warmup_ms: float = 25.0,
    budget_ms: float = 100.0,
    min_samples: int = 3,
    max_samples: int = 10_000,
    inputs: Sequence[Any] | None = None,
    flush: Callable[[], Any] | str | None = "auto",
    timer: Timer | None = None,
    clock: Clock = time.perf_counter_ns,
    sync: Callable[[], None] | str | None = "auto",
) -> list[float]:
    """Durations in seconds of repeated calls of `fn`, one per sample, in call order.

    Warm-up runs `fn` until `warmup_ms` of host time has passed (at least twice); the median
    warm-up call after the first sets how many samples fit in `budget_ms` (clamped to
    min/max_samples).
    With `inputs`, call i is `fn(inputs[i % len(inputs)])`, so each input set is reused only
    after the others have pushed it out of cache. `flush` runs untimed before each sample
    ("auto": the L2 flush on CUDA, nothing on CPU). `clock` and `timer` are injectable so
    the logic can be tested with a fake clock.
    """
    if warmup_ms < 0 or budget_ms <= 0:
        raise InvalidInput(
            f"warm-up must be >= 0 ms and budget > 0 ms, got {warmup_ms}, {budget_ms}"
        )
    if not 1 <= min_samples <= max_samples:
        raise InvalidInput(f"need 1 <= min_samples ({min_samples}) <= max_samples ({max_samples})")
    if inputs is not None and len(inputs) == 0:
        raise InvalidInput("inputs to rotate over must not be empty")
    if sync == "auto":
        sync = device_sync(device)
    if flush == "auto":
        flush = make_l2_flush(device)
    if timer is None:
        timer = CudaEventTimer(device) if is_cuda(device) else HostTimer(clock, sync)

    calls = 0

    def call() -> None:
        nonlocal calls
        if inputs is None:
            fn()
        else:
            fn(inputs[calls % len(inputs)])
        calls += 1

    warm: list[int] = []
    began = clock()
    while True:
        t0 = clock()
        call()
        if sync is not None:
            sync()
        t1 = clock()
        warm.append(t1 - t0)
        if (t1 - began) * 1e-6 >= warmup_ms and len(warm) >= WARMUP_MIN_CALLS:
            break
    # The first call pays one-off costs (allocation, library and kernel selection, page
    # faults); it would shrink the sample count to min_samples if it set the per-call time.
    steady = sorted(warm[1:])
    per_call_s = max(steady[len(steady) // 2] * 1e-9, 1e-9)
    n = min(max(math.ceil(budget_ms * 1e-3 / per_call_s), min_samples), max_samples)

    pending = []
    for _ in range(n):
        if flush is not None:
            flush()
        token = timer.start()
        call()
        pending.append(timer.stop(token))
    return timer.collect(pending)
