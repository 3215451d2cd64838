"""Run a training loop with 0..k DataLoader workers and break each step down.

For each worker count: a DataLoader over the target's dataset (prefetching 2 batches per
worker), warm-up steps, then timed steps where the wait for the next batch (including its
copy to the device), the step itself and the final synchronisation are clocked apart. The
loader alone is timed too (same workers, no model). Device compute per step comes from
steps recorded op by op (a sync around each op), done once: it does not depend on the loader.
"""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from ceiling.errors import InvalidInput
from ceiling.profile.checks import (
    available_memory_bytes,
    check_device,
    check_dtype_runs,
    check_fits,
    parse_dtype,
)
from ceiling.profile.recorder import METHOD_VERSION, OpRecorder
from ceiling.profile.runner import StepRunner, guard, sync
from ceiling.profile.step import StepBreakdown, breakdown, verdict
from ceiling.profile.targets import load_target, move_batch

# --slow-data: a stand-in for slow decoding or augmentation, per sample.
SLOW_DATA_S_PER_SAMPLE = 4e-3
DEFAULT_WORKERS = (0, 2, 4)
PREFETCH_BATCHES_PER_WORKER = 2
# compute takes each op's least time over a few recorded steps: other load only adds to it
RECORDED_STEPS = 5


@dataclass
class StepReport:
    target: str
    device: str
    dtype: str
    samples_per_step: int
    data_delay_s_per_sample: float
    compute_s: float
    rows: list[StepBreakdown]
    verdict: list[str]
    method: str = (
        "data: time blocked in next(loader) + copy to device; compute: sum of per-op times "
        "over one step, each op's least time in 5 recorded steps (sync around each op); "
        "host: the rest (Python, autograd, dispatch, and any time other processes take the "
        "CPU); means over timed steps"
    )
    method_version: int = METHOD_VERSION
    environment: dict[str, Any] = field(default_factory=dict)


def recorded_compute(target: str, runner: StepRunner, repeats: int) -> float:
    """Sum over a step's ops of each op's least time across `repeats` recorded steps.

    Per op, not per step: on a shared machine any op may be preempted, and a preempted op
    is a few ms of someone else's work, not this step's compute."""
    best: list[float] | None = None
    for _ in range(repeats):
        rec = OpRecorder(time_ops=True)
        with rec:
            guard(target, runner.step, rec)
        times = [c.time_s or 0.0 for c in rec.calls]
        if best is None or len(best) != len(times):
            best = times if best is None else min(best, times, key=sum)
        else:
            best = [min(a, b) for a, b in zip(best, times, strict=True)]
    return sum(best or [])


def timed_steps(steps: int, workers: int) -> int:
    """Enough steps that the batches prefetched during warm-up are a small part of them."""
    return max(steps, 4 * workers * PREFETCH_BATCHES_PER_WORKER)


def _loader(dataset, batch: int, workers: int, source=None) -> torch.utils.data.DataLoader:
    kwargs: dict[str, Any] = {"batch_size": batch, "shuffle": False, "drop_last": True}
    if source is not None:  # the user's own loader: keep its collate function
        kwargs["collate_fn"] = source.collate_fn
    if workers > 0:
        kwargs.update(
            num_workers=workers,
            persistent_workers=True,
            prefetch_factor=PREFETCH_BATCHES_PER_WORKER,
        )
    return torch.utils.data.DataLoader(dataset, **kwargs)


def _loader_rate(loader, batches: int) -> float:
    it = iter(loader)
    next(it)  # the first batch pays for starting the workers
    t0 = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches / (time.perf_counter() - t0)


def _sweep_one(runner: StepRunner, loader, warmup: int, steps: int, dtype):
    dev = runner.device
    it = iter(loader)
    for _ in range(warmup):
        runner.step(batch=move_batch(next(it), dev, dtype))
    sync(dev)
    data, total, waits = [], [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        batch = move_batch(next(it), dev, dtype)
        t1 = time.perf_counter()
        runner.step(batch=batch)
        t2 = time.perf_counter()
        sync(dev)
        t3 = time.perf_counter()
        data.append(t1 - t0)
        total.append(t3 - t0)
        waits.append(t3 - t2)
    del it
    # means, not medians: a loader that keeps up only in bursts must show in the average
    return statistics.fmean(total), statistics.fmean(data), statistics.fmean(waits)


def measure_step(
    target: str = "mlp",
    *,
    workers: tuple[int, ...] = DEFAULT_WORKERS,
    slow_data: bool = False,
    device: str = "cpu",
    dtype: str = "fp32",
    batch: int | None = None,
    warmup_steps: int = 2,
    steps: int = 8,
    progress=None,
) -> StepReport:
    """The step breakdown of `target` for each loader worker count (see module docstring)."""
    if not workers or any(w < 0 for w in workers):
        raise InvalidInput(f"worker counts must be ≥ 0, got {list(workers)}")
    if steps < 1 or warmup_steps < 0:
        raise InvalidInput(f"need steps ≥ 1 and warm-up ≥ 0, got {steps} and {warmup_steps}")
    dev = check_device(device)
    if dev.type == "meta":
        raise InvalidInput("ceiling step times a real loop: use --device cpu or cuda")
    key, torch_dtype = parse_dtype(dtype)
    check_dtype_runs(dev, key, torch_dtype)
    delay = SLOW_DATA_S_PER_SAMPLE if slow_data else 0.0
    workload = load_target(target, batch=batch, delay_s=delay)
    dataset, source = workload.dataset, None
    if dataset is None:
        source = workload.dataloader
        if not isinstance(source, torch.utils.data.DataLoader):
            raise InvalidInput(
                f"{target} has no dataset: return a torch DataLoader under 'dataloader' "
                "so that its worker count can be varied"
            )
        dataset = source.dataset
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    check_fits(workload.params, itemsize, True, available_memory_bytes(dev))
    runner = guard(target, StepRunner, workload, dev, torch_dtype, True)
    guard(target, runner.step)
    compute_s = recorded_compute(target, runner, RECORDED_STEPS)
    batch_size = workload.samples_per_step if source is None else source.batch_size
    needed = (warmup_steps + timed_steps(steps, max(workers)) + 1) * batch_size
    if len(dataset) < needed:
        raise InvalidInput(f"{target}'s dataset has {len(dataset)} samples; {needed} are needed")
    rows = []
    with warnings.catch_warnings():
        # torch warns when workers outnumber cores; sleeping workers (--slow-data) need none
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        for w in workers:
            if progress is not None:
                progress(w)
            loader = _loader(dataset, batch_size, w, source)
            n = timed_steps(steps, w)
            step_s, data_s, sync_s = guard(
                target, _sweep_one, runner, loader, warmup_steps, n, torch_dtype
            )
            rate = guard(target, _loader_rate, loader, n)
            rows.append(breakdown(w, step_s, data_s, compute_s, sync_s, rate))
            del loader
    from ceiling.profile.run import environment

    return StepReport(
        target=workload.name,
        device=str(dev),
        dtype=key,
        samples_per_step=batch_size,
        data_delay_s_per_sample=delay,
        compute_s=compute_s,
        rows=rows,
        verdict=verdict(rows),
        environment=environment(dev),
    )
