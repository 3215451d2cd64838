"""Split a training step's wall time into data, host, device compute and synchronisation.

    step = data + host + compute
- data: time the loop is blocked waiting for the next batch (loader + copy to the device);
- compute: device time of the step's ops (from per-op times), capped at what is left;
- host: the rest — Python, autograd bookkeeping, dispatch and launches that the device does
  not hide;
- sync: time the host sits in the end-of-step synchronisation; it is part of compute (the
  device is still busy), shown because a large value means the host ran far ahead.

Only compute shrinks on a faster device: data and host are the serial part. By Amdahl's law
an infinitely fast device speeds the step up by at most 1 / (1 - p) with p = compute / step.
"""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.errors import InvalidInput
from ceiling.model import laws

DATA_LOADER = "data loader"
HOST = "host"  # Python, autograd, dispatch
COMPUTE = "compute"  # device compute


@dataclass(frozen=True)
class StepBreakdown:
    workers: int
    step_s: float
    data_s: float
    host_s: float
    compute_s: float
    sync_s: float
    loader_batches_per_s: float | None  # the loader alone, no model
    model_batches_per_s: float  # what the model consumes when data is instant
    serial_fraction: float  # (data + host) / step
    amdahl_ceiling: float  # speedup of the step on an infinitely fast device
    bottleneck: str

    @property
    def data_share(self) -> float:
        return self.data_s / self.step_s

    def speedup_on_faster_device(self, factor: float) -> float:
        """Amdahl: the step's speedup when only device compute runs `factor` times faster."""
        return laws.amdahl_speedup(min(max(1.0 - self.serial_fraction, 0.0), 1.0), factor)

    @property
    def loader_limits(self) -> bool:
        """The loader alone delivers fewer batches per second than the model consumes."""
        rate = self.loader_batches_per_s
        return rate is not None and rate < self.model_batches_per_s


def breakdown(
    workers: int,
    step_s: float,
    data_s: float,
    compute_s: float,
    sync_s: float = 0.0,
    loader_batches_per_s: float | None = None,
) -> StepBreakdown:
    """Breakdown of a step from measured wall, data wait, op compute and sync time (seconds)."""
    for name, value in (("step", step_s), ("data", data_s), ("compute", compute_s)):
        if not value >= 0:
            raise InvalidInput(f"{name} time must be ≥ 0 s, got {value}")
    if step_s <= 0:
        raise InvalidInput(f"step time must be > 0 s, got {step_s}")
    data = min(data_s, step_s)
    rest = step_s - data
    compute = min(compute_s, rest)
    host = rest - compute
    p = compute / step_s
    parts = {DATA_LOADER: data, HOST: host, COMPUTE: compute}
    return StepBreakdown(
        workers=workers,
        step_s=step_s,
        data_s=data,
        host_s=host,
        compute_s=compute,
        sync_s=min(max(sync_s, 0.0), compute),
        loader_batches_per_s=loader_batches_per_s,
        model_batches_per_s=1.0 / rest if rest > 0 else float("inf"),
        serial_fraction=1.0 - p,
        amdahl_ceiling=laws.amdahl_ceiling(min(max(p, 0.0), 1.0)),
        bottleneck=max(parts, key=parts.get),
    )


# host time this many times its 0-worker value (and up by a tenth of the step), with more
# threads + workers than cores
OVERSUBSCRIBED_HOST_GROWTH = 1.5


def verdict(
    rows: list[StepBreakdown], cores: int | None = None, threads: int | None = None
) -> list[str]:
    """Plain sentences about a sweep over loader worker counts. `cores` and `threads` (the
    step's intra-op threads) let it say when loader workers crowd the step off the CPU."""
    if not rows:
        return []
    out = []
    first, best = rows[0], min(rows, key=lambda r: r.step_s)
    if first.bottleneck == DATA_LOADER:
        rate = (
            f"; the loader alone gives {first.loader_batches_per_s:.1f} batches/s against "
            f"{first.model_batches_per_s:.1f} the model consumes"
            if first.loader_batches_per_s is not None
            else ""
        )
        out.append(
            f"with {first.workers} workers the data loader is the bottleneck: "
            f"{first.data_share * 100:.0f} % of the step waits for data{rate}"
        )
    else:
        out.append(f"with {first.workers} workers the bottleneck is {first.bottleneck}")
    if best is not first:
        out.append(
            f"step time falls from {first.step_s * 1e3:.1f} ms ({first.workers} workers) to "
            f"{best.step_s * 1e3:.1f} ms ({best.workers} workers), "
            f"{first.step_s / best.step_s:.2f}× faster; there the bottleneck is {best.bottleneck}"
        )
    elif len(rows) > 1 and first.loader_batches_per_s is not None and not first.loader_limits:
        out.append(
            f"more loader workers do not help: with {first.workers} the loader already gives "
            f"{first.loader_batches_per_s:.1f} batches/s against {first.model_batches_per_s:.1f} "
            "the model consumes"
        )
    crowded = _oversubscribed(rows, cores, threads)
    if crowded:
        out.append(crowded)
    ceiling = best.amdahl_ceiling
    ceiling_text = "unbounded" if ceiling == float("inf") else f"{ceiling:.2f}×"
    out.append(
        f"serial part (data + host) at {best.workers} workers: "
        f"{best.serial_fraction * 100:.0f} % of the step, so an infinitely fast device "
        f"would speed this step up {ceiling_text} at most (Amdahl)"
    )
    return out


def _oversubscribed(rows: list[StepBreakdown], cores: int | None, threads: int | None):
    base = next((r for r in rows if r.workers == 0), None)
    if base is None or not cores or not threads:
        return None
    worst = max(rows, key=lambda r: r.host_s)
    if worst.workers + threads <= cores:
        return None
    grew = worst.host_s - base.host_s
    if worst.host_s <= OVERSUBSCRIBED_HOST_GROWTH * base.host_s or grew < 0.1 * worst.step_s:
        return None
    return (
        f"host time rises from {base.host_s * 1e3:.1f} ms (0 workers) to "
        f"{worst.host_s * 1e3:.1f} ms ({worst.workers} workers): {worst.workers} loader "
        f"workers and {threads} torch thread{'s' if threads != 1 else ''} share {cores} "
        "cores; use fewer workers or fewer torch threads (--threads)"
    )


# a typical recorded step's op time this many times the least: the CPU was being shared
CONTENTION_RATIO = 2.0


def contention(best_op_s: float, typical_op_s: float) -> list[str]:
    """A sentence when the same ops took far longer in a typical recorded step than at
    best: the waiting is time other processes or threads held the CPU, and it lands in
    "host" (compute keeps the least time)."""
    if best_op_s <= 0 or typical_op_s < CONTENTION_RATIO * best_op_s:
        return []
    return [
        f"the step's ops took {best_op_s * 1e3:.3g} ms at best but {typical_op_s * 1e3:.3g} ms "
        f"in a typical recorded step ({typical_op_s / best_op_s:.1f}×): the CPU is shared "
        "(other processes, or loader workers and torch threads), and that waiting counts as "
        "host time here"
    ]
