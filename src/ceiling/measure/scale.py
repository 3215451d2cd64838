"""Scaling runs: time one workload's steps on 1..N workers, as processes or as threads.

Processes are torch.distributed ranks (see `ceiling.measure.distributed`): the largest N
is started once and each smaller N runs on a subgroup of the first N ranks while the others
wait at a barrier (they sleep there, they do not spin), so one start-up serves every N.
Threads run the same workload as N Python threads of this process (shared memory, one
GIL), which is how concurrency and parallelism are told apart.

Each measured step: all workers meet at a barrier, then every worker times its step, which
ends in a collective (or a barrier), so all finish together; the step's time is the median
worker's, which keeps out the few ms by which they leave the starting barrier apart. Raw
per-step times and per-phase medians come back; fitting and formatting happen elsewhere.
"""

from __future__ import annotations

import os
import platform
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ceiling.errors import CeilingError, InvalidInput, WorkerFailed
from ceiling.measure import scale_workloads as wl
from ceiling.measure.stall import STALL_S

# 2: the work time (critical path without synchronisation) is recorded beside the step time
METHOD_VERSION = 2
BACKENDS = ("processes", "threads")
# The phases that are a worker's own work; the rest (wait_s, comm_s) is synchronisation.
WORK_PHASES = ("serial_s", "compute_s", "optimizer_s")


@dataclass(frozen=True)
class ScaleConfig:
    workload: str
    workers: tuple[int, ...]
    mode: str = "strong"
    backend: str = "processes"
    steps: int = 5
    warmup_steps: int = 1
    imbalance: float = 0.0
    threads_per_worker: int | None = None  # None: cores // max(workers), at least 1
    device: str = "auto"
    timeout_s: float = 300.0
    stall_s: float = STALL_S  # stop when no worker makes progress this long
    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        wl.check_workload(self.workload)
        if not self.workers:
            raise InvalidInput("give at least one worker count, e.g. --workers 1,2,4")
        if any(n < 1 for n in self.workers):
            raise InvalidInput(f"worker counts must be at least 1, got {list(self.workers)}")
        if list(self.workers) != sorted(set(self.workers)):
            raise InvalidInput(f"worker counts must increase without repeats: {self.workers}")
        if self.mode not in ("strong", "weak"):
            raise InvalidInput(f"mode must be strong or weak, got {self.mode!r}")
        if self.backend not in BACKENDS:
            raise InvalidInput(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend}")
        if self.steps < 1 or self.warmup_steps < 0:
            raise InvalidInput(
                f"need steps >= 1 and warm-up >= 0, got {self.steps} and {self.warmup_steps}"
            )
        if not 0.0 <= self.imbalance <= 100.0:
            raise InvalidInput(f"imbalance must be in [0, 100], got {self.imbalance:g}")
        if self.threads_per_worker is not None and self.threads_per_worker < 1:
            raise InvalidInput(f"threads per worker must be >= 1, got {self.threads_per_worker}")
        if not 0 < self.timeout_s < float("inf") or not 0 < self.stall_s < float("inf"):
            raise InvalidInput(
                f"timeouts must be positive and finite, got {self.timeout_s:g} s and "
                f"{self.stall_s:g} s"
            )
        if self.backend == "threads" and self.workload == "ddp":
            raise InvalidInput("the ddp workload needs --backend processes (one model each)")
        if self.workload == "ddp" and self.mode == "strong":
            batch = int(self.options.get("batch", 8))
            bad = [n for n in self.workers if batch % n]
            m = _lcm(self.workers)
            if bad:
                raise InvalidInput(
                    f"strong scaling splits the global batch: batch {batch} is not a multiple "
                    f"of {', '.join(map(str, bad))} workers (use --batch {-(-batch // m) * m} "
                    "or --mode weak)"
                )


def _lcm(values) -> int:
    import math

    out = 1
    for v in values:
        out = out * v // math.gcd(out, v)
    return out


def cpu_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def threads_per_worker(cfg: ScaleConfig) -> int:
    if cfg.threads_per_worker is not None:
        return cfg.threads_per_worker
    return max(1, cpu_cores() // max(cfg.workers))


def _summarize_n(n: int, per_rank: list[list[tuple[float, dict]]]) -> dict[str, Any]:
    """Per step: the step time (the median rank's) and the work time (the slowest rank's
    own work, synchronisation left out); phases = per-rank medians.

    Every workload ends its step with a collective, so the ranks finish together; they leave
    the starting barrier up to a few ms apart, and the median keeps that skew out. The work
    time is the critical path of the work itself (WORK_PHASES summed, slowest rank), so a
    straggler counts in it but the barrier's and the collective's own cost do not."""
    steps = len(per_rank[0])
    step_times = [statistics.median(per_rank[r][i][0] for r in range(n)) for i in range(steps)]
    work_times = [
        max(sum(per_rank[r][i][1].get(k, 0.0) for k in WORK_PHASES) for r in range(n))
        for i in range(steps)
    ]
    names = sorted({k for rank in per_rank for _, ph in rank for k in ph})
    phases = {
        k: [statistics.median(ph.get(k, 0.0) for _, ph in rank) for rank in per_rank] for k in names
    }
    return {
        "n": n,
        "step_times_s": step_times,
        "work_times_s": work_times,
        "phases_per_rank_s": phases,
    }


def _run_steps(workload, cfg: ScaleConfig, barrier: Callable[[], None]) -> list[tuple]:
    for _ in range(cfg.warmup_steps):
        barrier()
        workload.step()
    out = []
    for _ in range(cfg.steps):
        barrier()
        t0 = time.perf_counter()
        phases = workload.step()
        out.append((time.perf_counter() - t0, phases))
    return out


# ---------------------------------------------------------------------------- processes


def _nothing(*_args) -> None:
    return None


def scale_worker(ctx, config: dict[str, Any]) -> dict[str, Any] | None:
    """The job every rank runs (see distributed.Job): all worker counts in turn."""
    import torch
    import torch.distributed as dist

    cfg = ScaleConfig(**{**config, "workers": tuple(config["workers"])})
    runs, truth = [], {}
    for n in cfg.workers:
        if n > ctx.world_size:
            break
        ranks = list(range(n))
        group = dist.new_group(ranks) if n < ctx.world_size else dist.group.WORLD
        cpu_group = (
            dist.new_group(ranks, backend="gloo")
            if ctx.backend != "gloo" and n < ctx.world_size
            else (ctx.cpu_group if n == ctx.world_size else group)
        )
        if ctx.rank < n:
            sctx = wl.StepContext(
                rank=ctx.rank,
                n=n,
                mode=cfg.mode,
                device=ctx.device,
                backend="processes",
                imbalance=cfg.imbalance,
                # one worker has nobody to wait for: no barrier, nothing to combine
                barrier=(lambda g=group: dist.barrier(group=g)) if n > 1 else _nothing,
                all_reduce=(lambda t, g=group: dist.all_reduce(t, group=g)) if n > 1 else _nothing,
                sync=ctx.sync,
                group=group,
                options=cfg.options,
            )
            work = wl.make_workload(cfg.workload, sctx)
            truth = work.truth()
            mine = _run_steps(work, cfg, sctx.barrier)
            gathered: list[Any] = [None] * n
            dist.all_gather_object(gathered, mine, group=cpu_group)
            if ctx.rank == 0:
                runs.append(_summarize_n(n, gathered))
            del work
        ctx.barrier()
        ctx.progress(f"N = {n} done")
    if ctx.rank != 0:
        return None
    return {
        "runs": runs,
        "truth": truth,
        "device": ctx.device,
        "backend_engine": ctx.backend,
        "launcher": ctx.launcher,
        "world_size": ctx.world_size,
        "torch": torch.__version__,
    }


def _stall_s(cfg: ScaleConfig) -> float:
    """The synthetic workload sleeps through its work: a worker asleep for its share of a
    long step is working, so the stall window is at least twice the longest share."""
    if cfg.workload != "synthetic":
        return cfg.stall_s
    longest_share_s = float(cfg.options.get("work_s", 0.5)) * (1.0 + cfg.imbalance)
    return max(cfg.stall_s, 2.0 * longest_share_s)


def _run_processes(cfg: ScaleConfig, on_progress, on_start) -> dict[str, Any]:
    from dataclasses import asdict

    from ceiling.hardware import capacity
    from ceiling.measure import distributed

    job = distributed.Job(
        target="ceiling.measure.scale:scale_worker",
        kwargs={"config": {**asdict(cfg), "workers": list(cfg.workers)}},
        device=cfg.device,
        threads_per_worker=threads_per_worker(cfg),
        timeout_s=cfg.timeout_s,
        stall_s=_stall_s(cfg),
    )
    if distributed.under_launcher():
        rank, result = distributed.run_under_launcher(job)
        return result if rank == 0 else None
    capacity.check_workers(max(cfg.workers), capacity.local_room())
    return distributed.launch_local(
        job, max(cfg.workers), on_progress=on_progress, on_start=on_start
    )


# ---------------------------------------------------------------------------- threads


def _run_threads(cfg: ScaleConfig, on_progress) -> dict[str, Any]:
    device = "cpu"
    tpw = threads_per_worker(cfg)
    if wl.uses_torch(cfg.workload, "threads"):
        import torch

        torch.set_num_threads(tpw)
        if cfg.device in ("auto", "cuda") and torch.cuda.is_available():
            device = "cuda"
    runs, truth = [], {}
    for n in cfg.workers:
        barrier = threading.Barrier(n, timeout=cfg.timeout_s)
        results: list[Any] = [None] * n
        errors: list[tuple[int, BaseException]] = []

        def run_rank(rank: int, n=n, barrier=barrier, results=results, errors=errors) -> None:
            try:
                sync = _device_sync(device)
                sctx = wl.StepContext(
                    rank=rank,
                    n=n,
                    mode=cfg.mode,
                    device=device,
                    backend="threads",
                    imbalance=cfg.imbalance,
                    barrier=barrier.wait,
                    all_reduce=None,
                    sync=sync,
                    options=cfg.options,
                )
                work = wl.make_workload(cfg.workload, sctx)
                results[rank] = (work.truth(), _run_steps(work, cfg, barrier.wait))
            except threading.BrokenBarrierError:
                pass
            except BaseException as exc:  # reported by the launching thread
                errors.append((rank, exc))
                barrier.abort()

        threads = [threading.Thread(target=run_rank, args=(r,), daemon=True) for r in range(n)]
        for t in threads:
            t.start()
        end = time.monotonic() + cfg.timeout_s  # one deadline for all, not one per thread
        for t in threads:
            t.join(max(end - time.monotonic(), 0.0))
        if errors:
            bad_rank, bad = errors[0]
            if isinstance(bad, CeilingError):
                raise bad
            raise WorkerFailed(
                f"worker thread rank {bad_rank} of {n} failed: {type(bad).__name__}: {bad}"
            ) from bad
        if any(t.is_alive() for t in threads) or any(r is None for r in results):
            hung = _thread_places(threads, [r for r, t in enumerate(threads) if t.is_alive()])
            barrier.abort()
            raise WorkerFailed(
                f"threads did not finish within {cfg.timeout_s:g} s at N = {n}"
                + (f" (still running: {'; '.join(hung)})" if hung else "")
            )
        truth = results[0][0]
        runs.append(_summarize_n(n, [r[1] for r in results]))
        if on_progress is not None:
            on_progress(f"N = {n} done")
    return {"runs": runs, "truth": truth, "device": device, "backend_engine": "threads"}


def _thread_places(threads: list[threading.Thread], ranks: list[int]) -> list[str]:
    """'rank 1 at job.py:12 in step' for each hung thread: its innermost frame."""
    import sys
    from pathlib import Path

    frames = sys._current_frames()
    out = []
    for r in ranks:
        frame = frames.get(threads[r].ident)
        if frame is None:  # ended just now
            out.append(f"rank {r}")
            continue
        code = frame.f_code
        out.append(f"rank {r} at {Path(code.co_filename).name}:{frame.f_lineno} in {code.co_name}")
    return out


def _device_sync(device: str):
    if device.startswith("cuda"):
        import torch

        return torch.cuda.synchronize
    return lambda: None


# ---------------------------------------------------------------------------- entry


def _shape(cfg: ScaleConfig) -> dict[str, Any]:
    """The N = 1 problem's size, per workload."""
    o = cfg.options
    if cfg.workload == "matmul":
        size = int(o.get("size", 1024))
        return {"m": size, "n": size, "k": size}
    if cfg.workload == "ddp":
        return {
            "model": o.get("model", "tiny"),
            "batch": o.get("batch", 8),
            "seq": o.get("seq", 64),
        }
    if cfg.workload == "python":
        return {"iterations": o.get("iterations", 2_000_000)}
    if cfg.workload == "synthetic":
        return {"work_s": o.get("work_s", 0.5), "comm_bytes": o.get("comm_bytes", 0)}
    return {}


def environment() -> dict[str, Any]:
    return {
        "host": platform.node(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_cores": cpu_cores(),
    }


def run_scaling(
    cfg: ScaleConfig,
    on_progress: Callable[[str], None] | None = None,
    on_start: Callable[[list[int]], None] | None = None,
) -> dict[str, Any] | None:
    """Measure `cfg`; None on ranks other than 0 under torchrun. Raw samples, no fits."""
    if cfg.backend == "threads":
        raw = _run_threads(cfg, on_progress)
    else:
        raw = _run_processes(cfg, on_progress, on_start)
        if raw is None:
            return None
    cores = cpu_cores()
    tpw = threads_per_worker(cfg)
    oversubscribed = [r["n"] for r in raw["runs"] if r["n"] * tpw > cores]
    if raw.get("launcher") == "torchrun":
        oversubscribed = []  # ranks may be on other machines; cores here say nothing
    return {
        "method_version": METHOD_VERSION,
        "workload": cfg.workload,
        "mode": cfg.mode,
        "backend": cfg.backend,
        "steps": cfg.steps,
        "warmup_steps": cfg.warmup_steps,
        "imbalance": cfg.imbalance,
        "threads_per_worker": tpw,
        "options": cfg.options,
        "dtype": str(cfg.options.get("dtype", "float32")),
        "shape": _shape(cfg),
        "environment": environment(),
        "oversubscribed_ns": oversubscribed,
        **raw,
    }
