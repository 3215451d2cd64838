"""Event simulation of pipeline-parallel schedules and of a data-parallel step with stragglers.

Pipeline: p devices, m micro-batches, v model chunks per device (interleaving). Each device
runs its forward and backward passes in the fixed order its schedule prescribes; a pass
starts when the device is free and its input has arrived (the previous virtual stage's
forward, or the next one's backward, plus the point-to-point latency). Times per device are
given per stage; with v chunks each chunk takes 1/v of its device's time, or its own time
where chunks are uneven (a device holding a layer fewer in one chunk).

Schedules (Huang et al. 2019 GPipe; Narayanan et al. 2021 1F1B and interleaved 1F1B):
- gpipe: every forward, then every backward.
- 1f1b: device k runs min(p-k-1, m) warm-up forwards, then alternates one forward and one
  backward, then drains the remaining backwards.
- interleaved: device k holds virtual stages k, k+p, ..., k+(v-1)p; forwards go through
  chunks in groups of p micro-batches; warm-up is 2(p-k-1) + (v-1)p passes.

With uniform stages and no latency the bubble — idle time over the ideal compute time —
is (p-1)/m for gpipe and 1f1b and (p-1)/(v·m) interleaved; the simulator reproduces that
from the event order, it does not assume it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ceiling.errors import InvalidInput

SCHEDULES = ("gpipe", "1f1b", "interleaved")
# Passes (2·p·m·v) one simulation may run: each is a few µs of Python and a record kept.
MAX_PASSES = 400_000


@dataclass(frozen=True)
class Pass:
    """One forward or backward pass of one micro-batch through one chunk on one device."""

    device: int
    kind: str  # "F" or "B"
    micro_batch: int
    chunk: int
    start_s: float
    end_s: float


@dataclass(frozen=True)
class PipelineResult:
    schedule: str
    stages: int
    micro_batches: int
    chunks: int
    makespan_s: float
    ideal_s: float  # the busiest device's own compute time
    bubble_fraction: float  # (makespan - ideal) / ideal: the (p-1)/(v·m) convention
    idle_fraction: float  # idle share of all device-time in the makespan
    utilisation: tuple[float, ...]  # per device: busy / makespan
    peak_in_flight: tuple[int, ...]  # per device: most chunk-passes whose activations are held
    passes: tuple[Pass, ...]


def _check_times(name: str, times, p: int, v: int) -> tuple[tuple[float, ...], ...]:
    """Per device, the time of each of its v chunks: a device's number is split evenly over
    its chunks; a sequence of v numbers gives each chunk its own (uneven chunks)."""
    if _is_number(times):
        times = [times] * p
    if len(times) != p:
        raise InvalidInput(f"{name}: need one time per stage, got {len(times)} for {p} stages")
    out = []
    for device in times:
        if _is_number(device):
            chunks = (float(device) / v,) * v
        elif len(device) == v:
            chunks = tuple(float(x) for x in device)
        else:
            raise InvalidInput(
                f"{name}: a stage's chunk times need one per chunk, got {len(device)} for v = {v}"
            )
        for x in chunks:
            if not x >= 0 or x == float("inf"):
                raise InvalidInput(f"{name}: stage times must be finite and ≥ 0, got {x!r}")
        out.append(chunks)
    return tuple(out)


def _order(schedule: str, k: int, p: int, m: int, v: int) -> list[tuple[str, int, int]]:
    """Device k's passes in execution order: (kind, micro-batch, chunk)."""
    if schedule == "gpipe":
        return [("F", i, 0) for i in range(m)] + [("B", i, 0) for i in range(m)]
    if schedule == "1f1b":
        warm = min(p - k - 1, m)
        fwd = [("F", i, 0) for i in range(m)]
        bwd = [("B", i, 0) for i in range(m)]
        out = fwd[:warm]
        for i in range(m - warm):
            out.append(fwd[warm + i])
            out.append(bwd[i])
        return out + bwd[m - warm :]
    # interleaved: virtual micro-batch i maps to (micro-batch, chunk) in groups of p
    total = m * v

    def fwd_id(i: int) -> tuple[str, int, int]:
        chunk = (i // p) % v
        return ("F", (i // (p * v)) * p + i % p, chunk)

    def bwd_id(i: int) -> tuple[str, int, int]:
        chunk = v - 1 - (i // p) % v
        return ("B", (i // (p * v)) * p + i % p, chunk)

    warm = min((p - k - 1) * 2 + (v - 1) * p, total)
    out = [fwd_id(i) for i in range(warm)]
    for i in range(total - warm):
        out.append(fwd_id(warm + i))
        out.append(bwd_id(i))
    return out + [bwd_id(i) for i in range(total - warm, total)]


def check_schedule(schedule: str, stages: int, micro_batches: int, chunks: int = 1) -> None:
    """Refuse a schedule and shape the simulation cannot run, before any time is spread over
    the stages."""
    if schedule not in SCHEDULES:
        raise InvalidInput(f"schedule must be one of {', '.join(SCHEDULES)}, got {schedule!r}")
    p, m, v = stages, micro_batches, chunks
    for name, val in (("stages", p), ("micro-batches", m), ("chunks", v)):
        if not isinstance(val, int) or isinstance(val, bool) or val < 1:
            raise InvalidInput(f"{name} must be a positive integer, got {val!r}")
    if 2 * p * m * v > MAX_PASSES:
        raise InvalidInput(
            f"2 directions × p({p}) × m({m}) × v({v}) = {2 * p * m * v:,} passes to simulate, "
            f"above the limit of {MAX_PASSES:,}; fewer micro-batches or stages show the same "
            "bubble, (p-1)/(v·m)"
        )
    if schedule != "interleaved" and v != 1:
        raise InvalidInput(f"chunks v = {v} needs the interleaved schedule (got {schedule})")
    if schedule == "interleaved" and m % p:
        raise InvalidInput(
            f"interleaved 1F1B needs micro-batches divisible by stages: m({m}) % p({p}) = {m % p}"
        )


def simulate_pipeline(
    schedule: str,
    stages: int,
    micro_batches: int,
    forward_s: Sequence[float | Sequence[float]] | float,
    backward_s: Sequence[float | Sequence[float]] | float,
    chunks: int = 1,
    p2p_s: float = 0.0,
) -> PipelineResult:
    """Simulate one step; forward_s/backward_s per device (a number means every device),
    each a device's time split evenly over its chunks or a sequence of its v chunks' times."""
    check_schedule(schedule, stages, micro_batches, chunks)
    p, m, v = stages, micro_batches, chunks
    if not p2p_s >= 0 or p2p_s == float("inf"):
        raise InvalidInput(f"point-to-point time must be finite and ≥ 0, got {p2p_s!r}")
    f_chunk = _check_times("forward", forward_s, p, v)
    b_chunk = _check_times("backward", backward_s, p, v)
    fwd = [sum(x) for x in f_chunk]
    bwd = [sum(x) for x in b_chunk]

    orders = [_order(schedule, k, p, m, v) for k in range(p)]
    passes, free = _run_events(orders, p, v, f_chunk, b_chunk, p2p_s, schedule)
    makespan = max(free)
    peak = []
    for k in range(p):
        held = top = 0
        for kind, _, _ in orders[k]:
            held += 1 if kind == "F" else -1
            top = max(top, held)
        peak.append(top)
    busy = [m * (fwd[k] + bwd[k]) for k in range(p)]
    ideal = max(busy)
    util = tuple(b / makespan if makespan > 0 else 0.0 for b in busy)
    return PipelineResult(
        schedule=schedule,
        stages=p,
        micro_batches=m,
        chunks=v,
        makespan_s=makespan,
        ideal_s=ideal,
        bubble_fraction=(makespan - ideal) / ideal if ideal > 0 else 0.0,
        idle_fraction=1.0 - sum(busy) / (p * makespan) if makespan > 0 else 0.0,
        utilisation=util,
        peak_in_flight=tuple(peak),
        passes=tuple(sorted(passes, key=lambda x: (x.device, x.start_s))),
    )


def _run_events(orders, p, v, f_chunk, b_chunk, p2p_s, schedule):
    """Every pass's start and end; returns (passes, each device's last end).

    A device runs its passes in order until one waits for a pass not yet done; it is
    woken when that pass ends. Each pass is handled once, so the work grows linearly in
    p·m·v (a sweep over every device until one pass moves would be quadratic in p)."""
    last_virtual = p * v - 1
    done: dict[tuple[str, int, int], float] = {}  # (kind, micro-batch, virtual stage) -> end
    waiting: dict[tuple[str, int, int], list[int]] = {}  # a pass not done -> devices on it
    nxt = [0] * p
    free = [0.0] * p
    passes: list[Pass] = []
    runnable = list(range(p - 1, -1, -1))
    while runnable:
        k = runnable.pop()
        order = orders[k]
        while nxt[k] < len(order):
            kind, mb, chunk = order[nxt[k]]
            vs = chunk * p + k
            if kind == "F":
                dep = ("F", mb, vs - 1) if vs > 0 else None
            else:
                dep = ("B", mb, vs + 1) if vs < last_virtual else ("F", mb, vs)
            ready = 0.0
            if dep is not None:
                dep_end = done.get(dep)
                if dep_end is None:
                    waiting.setdefault(dep, []).append(k)
                    break
                # Crossing to another device costs the point-to-point time.
                ready = dep_end + (0.0 if dep[2] % p == k else p2p_s)
            start = max(free[k], ready)
            end = start + (f_chunk[k][chunk] if kind == "F" else b_chunk[k][chunk])
            key = (kind, mb, vs)
            done[key] = end
            free[k] = end
            passes.append(Pass(k, kind, mb, chunk, start, end))
            nxt[k] += 1
            runnable.extend(waiting.pop(key, ()))
    if len(passes) != sum(len(o) for o in orders):  # a schedule bug, not a user error
        raise RuntimeError(f"pipeline schedule {schedule} deadlocked")
    return passes, free


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def bubble_formula(stages: int, micro_batches: int, chunks: int = 1) -> float:
    """Closed-form bubble (p-1)/(v·m) (Narayanan et al. 2021, section 2.2)."""
    return (stages - 1) / (chunks * micro_batches)


# ---- data-parallel stragglers ---------------------------------------------------------


@dataclass(frozen=True)
class StragglerResult:
    workers: int
    compute_s: tuple[float, ...]
    allreduce_s: float
    step_s: float  # slowest worker's compute + the all-reduce everyone joins
    wait_s: tuple[float, ...]  # per worker: time spent waiting for the slowest
    mean_wait_s: float
    efficiency: float  # mean useful compute / step time
    slowdown: float  # step time over the step with every worker at the median


def simulate_straggler(compute_s: Sequence[float], allreduce_s: float = 0.0) -> StragglerResult:
    """A synchronous data-parallel step: the gradient all-reduce starts when the last worker
    finishes its backward, so every other worker waits for it."""
    times = tuple(float(x) for x in compute_s)
    if not times:
        raise InvalidInput("need at least one worker")
    for x in times:
        if not x > 0 or x == float("inf"):
            raise InvalidInput(f"worker compute times must be finite and > 0, got {x!r}")
    if not allreduce_s >= 0 or allreduce_s == float("inf"):
        raise InvalidInput(f"all-reduce time must be finite and ≥ 0, got {allreduce_s!r}")
    slowest = max(times)
    waits = tuple(slowest - x for x in times)
    step = slowest + allreduce_s
    ordered = sorted(times)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])
    return StragglerResult(
        workers=n,
        compute_s=times,
        allreduce_s=allreduce_s,
        step_s=step,
        wait_s=waits,
        mean_wait_s=sum(waits) / n,
        efficiency=(sum(times) / n) / step,
        slowdown=step / (median + allreduce_s),
    )


def straggler_workers(
    workers: int,
    step_s: float,
    slow_factor: float = 1.0,
    slow_count: int = 1,
    jitter: float = 0.0,
    seed: int = 0,
) -> list[float]:
    """Per-worker compute times: `slow_count` workers `slow_factor`× slower, and optional
    multiplicative noise (normal, relative standard deviation `jitter`, clipped at 0.1×)."""
    if not isinstance(workers, int) or workers < 1:
        raise InvalidInput(f"workers must be a positive integer, got {workers!r}")
    if not step_s > 0:
        raise InvalidInput(f"step time must be > 0, got {step_s!r}")
    if not slow_factor >= 1.0:
        raise InvalidInput(f"slow factor must be ≥ 1 (1 = no straggler), got {slow_factor!r}")
    if not 0 <= slow_count <= workers:
        raise InvalidInput(f"slow workers must be in [0, {workers}], got {slow_count!r}")
    if not 0 <= jitter < 1:
        raise InvalidInput(f"jitter must be in [0, 1), got {jitter!r}")
    import numpy as np

    rng = np.random.default_rng(seed)
    noise = np.clip(1.0 + jitter * rng.standard_normal(workers), 0.1, None) if jitter else None
    times = [step_s * (slow_factor if i < slow_count else 1.0) for i in range(workers)]
    if noise is not None:
        times = [t * float(z) for t, z in zip(times, noise, strict=True)]
    return times
