"""Run a training loop with 0..k DataLoader workers and break each step down.

For each worker count: a DataLoader over the target's dataset (prefetching 2 batches per
worker), warm-up steps that include the workers' start-up and their first round of
batches, then timed steps where the wait for the next batch (including its copy to the
device), the step itself and the final synchronisation are clocked apart. With k workers
batches arrive in rounds of k, so the timed steps are a whole number of rounds: the mean
then holds no part-round bias. The loader alone is timed too (same workers, no model; with
0 workers it is the data wait of the loop itself). Device compute per step comes from
steps recorded op by op (a sync around each op), done once: it does not depend on the loader.
"""

from __future__ import annotations

import statistics
import time
import warnings
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from ceiling.errors import InvalidInput, argument
from ceiling.profile.checks import (
    available_memory_bytes,
    check_device,
    check_dtype_runs,
    check_fits,
    parse_dtype,
)
from ceiling.profile.recorder import METHOD_VERSION, OpRecorder
from ceiling.profile.runner import StepRunner, guard, sync
from ceiling.profile.step import StepBreakdown, breakdown, contention, verdict
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
    threads: int | None = None  # torch intra-op threads of the step
    typical_op_s: float | None = None  # median op time of the recorded steps (compute: least)
    method: str = (
        "data: time blocked in next(loader) + copy to device; compute: sum of per-op times "
        "over one step, each op's least time in 5 recorded steps (sync around each op); "
        "host: the rest (Python, autograd, dispatch, and any time other processes take the "
        "CPU); means over timed steps, a whole number of rounds of the workers' batches"
    )
    method_version: int = METHOD_VERSION
    environment: dict[str, Any] = field(default_factory=dict)
    # the fastest worker count's step under three roofs, and its waterfall to the step time
    waterfall_workers: int | None = None
    explanation: Any = None


def _cores() -> int | None:
    import os

    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def recorded_compute(target: str, runner: StepRunner, repeats: int) -> tuple[float, float, list]:
    """Sum over a step's ops of each op's least time across `repeats` recorded steps, the
    median of the recorded steps' own op-time sums, and the op calls at their least times.

    Per op, not per step: on a shared machine any op may be preempted, and a preempted op
    is a few ms of someone else's work, not this step's compute. The median says how much
    such waiting a typical step had."""
    best: list[float] | None = None
    sums = []
    calls: list = []
    for _ in range(repeats):
        rec = OpRecorder(time_ops=True)
        with rec:
            guard(target, runner.step, rec)
        calls = rec.calls
        times = [c.time_s or 0.0 for c in rec.calls]
        sums.append(sum(times))
        if best is None or len(best) != len(times):
            best = times if best is None else min(best, times, key=sum)
        else:
            best = [min(a, b) for a, b in zip(best, times, strict=True)]
    best = best or []
    at_best = (
        [replace(c, time_s=t) for c, t in zip(calls, best, strict=True)]
        if len(best) == len(calls)
        else []
    )
    return sum(best), statistics.median(sums), at_best


def _explain(calls, rows, dev, key: str, workload, itemsize: int, runner=None):
    """The fastest worker count's step against three roofs, and its waterfall: explained
    as `ceiling profile` explains a step (profile.run.explain_recorded), its data wait
    apart."""
    from ceiling.profile.ceiling import resolve_ceiling, tf32_enabled
    from ceiling.profile.op_flops import MODEL_CATEGORIES
    from ceiling.profile.run import explain_recorded

    if not calls:
        return None, None
    row = min(rows, key=lambda r: r.step_s)
    ceiling = resolve_ceiling(dev, key, tf32_enabled(dev) and key == "fp32", None, None)
    model_flops = sum(
        c.flops - c.recomputed_flops
        for c in calls
        if c.category in MODEL_CATEGORIES and c.phase != "recompute"
    )
    explanation = explain_recorded(
        calls, ceiling, dev, None, workload, itemsize, True, row.step_s,
        row.step_s - row.data_s, model_flops, runner=runner, data_wait_s=row.data_s,
    )  # fmt: skip
    return row.workers, explanation


def timed_steps(steps: int, workers: int) -> int:
    """At least `steps` and two rounds of batches, rounded up to whole rounds of `workers`
    (each worker delivers one batch per round when the loader is the bottleneck)."""
    if workers <= 0:
        return steps
    n = max(steps, 2 * workers)
    return -(-n // workers) * workers


def warmup_steps_for(warmup: int, workers: int) -> int:
    """Warm-up takes the whole first round when there are workers: it carries their
    start-up, and timing then starts on a round boundary."""
    return max(warmup, workers)


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


def _loader_rate(loader, batches: int, workers: int) -> float:
    it = iter(loader)
    for _ in range(max(workers, 1)):  # the first round pays for starting the workers
        next(it)
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
    data, total, waits, fetch = [], [], [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        raw = next(it)
        tf = time.perf_counter()
        batch = move_batch(raw, dev, dtype)
        t1 = time.perf_counter()
        runner.step(batch=batch)
        t2 = time.perf_counter()
        sync(dev)
        t3 = time.perf_counter()
        data.append(t1 - t0)
        fetch.append(tf - t0)
        total.append(t3 - t0)
        waits.append(t3 - t2)
    del it
    # means, not medians: a loader that keeps up only in bursts must show in the average
    return (
        statistics.fmean(total),
        statistics.fmean(data),
        statistics.fmean(waits),
        statistics.fmean(fetch),
    )


def measure_step(
    target: str = "mlp",
    *,
    workers: tuple[int, ...] = DEFAULT_WORKERS,
    slow_data: bool = False,
    data_delay_s: float | None = None,
    device: str = "cpu",
    dtype: str = "fp32",
    batch: int | None = None,
    warmup_steps: int = 2,
    steps: int = 8,
    threads: int | None = None,
    progress=None,
) -> StepReport:
    """The step breakdown of `target` for each loader worker count (see module docstring).

    `slow_data` makes a built-in dataset sleep SLOW_DATA_S_PER_SAMPLE per sample;
    `data_delay_s` sets that per-sample sleep itself (and implies slow data).
    `threads`: torch intra-op threads for the run (restored after); default torch's own,
    or 1 for the slow-data demo, whose point is the loader (on a small machine, workers
    waking up would otherwise stall the step's parallel regions and blur it)."""
    if threads is not None and threads < 1:
        raise InvalidInput(f"{argument('threads')} must be ≥ 1, got {threads}")
    if threads is None and (slow_data or data_delay_s):
        threads = 1
    before = torch.get_num_threads()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        return _measure_step(
            target, workers=workers, slow_data=slow_data, data_delay_s=data_delay_s,
            device=device, dtype=dtype, batch=batch, warmup_steps=warmup_steps, steps=steps,
            progress=progress,
        )  # fmt: skip
    finally:
        torch.set_num_threads(before)


def _measure_step(
    target: str,
    *,
    workers: tuple[int, ...],
    slow_data: bool,
    data_delay_s: float | None,
    device: str,
    dtype: str,
    batch: int | None,
    warmup_steps: int,
    steps: int,
    progress,
) -> StepReport:
    dev, key, torch_dtype = _checked(workers, data_delay_s, device, dtype, warmup_steps, steps)
    delay = data_delay_s if data_delay_s is not None else 0.0
    if slow_data and data_delay_s is None:
        delay = SLOW_DATA_S_PER_SAMPLE
    workload = load_target(target, batch=batch, delay_s=delay)
    dataset, source = _dataset(target, workload, delay)
    itemsize = torch.empty((), dtype=torch_dtype).element_size()
    check_fits(workload.params, itemsize, True, available_memory_bytes(dev))
    runner = guard(target, StepRunner, workload, dev, torch_dtype, True)
    guard(target, runner.step)
    compute_s, typical_op_s, best_calls = recorded_compute(target, runner, RECORDED_STEPS)
    batch_size = workload.samples_per_step if source is None else source.batch_size
    batches = max(warmup_steps_for(warmup_steps, w) + timed_steps(steps, w) for w in workers)
    needed = (batches + 1) * batch_size
    if len(dataset) < needed:
        raise InvalidInput(f"{target}'s dataset has {len(dataset)} samples; {needed} are needed")
    rows = _sweep(target, runner, dataset, source, batch_size, workers, warmup_steps, steps,
                  torch_dtype, compute_s, progress)  # fmt: skip
    from ceiling.profile.run import environment

    waterfall_workers, explanation = guard(
        target, _explain, best_calls, rows, dev, key, workload, itemsize, runner
    )
    return StepReport(
        target=workload.name,
        device=str(dev),
        dtype=key,
        samples_per_step=batch_size,
        data_delay_s_per_sample=delay,
        compute_s=compute_s,
        rows=rows,
        verdict=verdict(rows, cores=_cores(), threads=torch.get_num_threads())
        + contention(compute_s, typical_op_s),
        threads=torch.get_num_threads(),
        typical_op_s=typical_op_s,
        environment=environment(dev),
        waterfall_workers=waterfall_workers,
        explanation=explanation,
    )


def _checked(workers, data_delay_s, device: str, dtype: str, warmup_steps: int, steps: int):
    """The device and dtype the step loop runs on, once the options are known to be valid."""
    if not workers or any(w < 0 for w in workers):
        raise InvalidInput(f"worker counts must be ≥ 0, got {list(workers)}")
    if steps < 1 or warmup_steps < 0:
        raise InvalidInput(f"need steps ≥ 1 and warm-up ≥ 0, got {steps} and {warmup_steps}")
    dev = check_device(device)
    if dev.type == "meta":
        raise InvalidInput("ceiling step times a real loop: use --device cpu or cuda")
    key, torch_dtype = parse_dtype(dtype)
    check_dtype_runs(dev, key, torch_dtype)
    if data_delay_s is not None and not (0 <= data_delay_s <= 10):
        raise InvalidInput(f"the per-sample data delay must be in 0..10 s, got {data_delay_s}")
    return dev, key, torch_dtype


def _dataset(target: str, workload, delay: float):
    """The dataset batches are drawn from, and the user's own DataLoader it came from (None
    for a built-in's dataset)."""
    dataset, source = workload.dataset, None
    if dataset is None:
        source = workload.dataloader
        if not isinstance(source, torch.utils.data.DataLoader):
            raise InvalidInput(
                f"{target} has no dataset: return a torch DataLoader under 'dataloader' "
                "so that its worker count can be varied"
            )
        dataset = source.dataset
        if delay > 0:
            raise InvalidInput("--slow-data delays the built-in datasets; yours is your own")
    return dataset, source


def _sweep(target, runner, dataset, source, batch_size, workers, warmup_steps, steps,
           torch_dtype, compute_s, progress) -> list:  # fmt: skip
    """One breakdown row per worker count: the step, its wait for data, and the loader's rate."""
    rows = []
    with warnings.catch_warnings():
        # torch warns when workers outnumber cores; sleeping workers (--slow-data) need none
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        for w in workers:
            if progress is not None:
                progress(w)
            loader = _loader(dataset, batch_size, w, source)
            n = timed_steps(steps, w)
            warm = warmup_steps_for(warmup_steps, w)
            step_s, data_s, sync_s, fetch_s = guard(
                target, _sweep_one, runner, loader, warm, n, torch_dtype
            )
            # with no workers the loop's own wait for a batch is the loader alone
            if w == 0:
                rate = 1.0 / fetch_s if fetch_s > 0 else float("inf")
            else:
                rate = guard(target, _loader_rate, loader, n, w)
            rows.append(breakdown(w, step_s, data_s, compute_s, sync_s, rate))
            del loader
    return rows
