"""Collective bandwidth on torch.distributed, measured the way nccl-tests does.

Every rank runs the same sweep of operations and message sizes (see
ceiling.model.collectives for which buffer `bytes` names); each (op, size) gets warm-up
calls and then a fixed number of timed calls, the same number on every rank so the
collectives pair up. A rank's time is its median call; the point's time is the slowest
rank's, since a collective is done when its last rank is. The first all-reduce and
broadcast of each size are checked for the right values, so a broken transport cannot
produce a fast-looking number.
"""

from __future__ import annotations

import warnings
from typing import Any

from ceiling.errors import InvalidInput, WrongResult
from ceiling.model.collectives import OPS

METHOD_VERSION = 1
DTYPE = "float32"
# Each timed point moves about this many bytes in total (fewer calls for big messages).
BYTES_PER_POINT = 2**27
MIN_ITERS, MAX_ITERS = 3, 50
WARMUP_ITERS = 2


def default_sizes(min_bytes: int = 4 * 2**10, max_bytes: int = 16 * 2**20) -> list[int]:
    """Powers of 4 from min_bytes to max_bytes."""
    if not 4 <= min_bytes <= max_bytes:
        raise InvalidInput(f"need 4 <= min bytes ({min_bytes}) <= max bytes ({max_bytes})")
    sizes, s = [], min_bytes
    while s <= max_bytes:
        sizes.append(int(s))
        s *= 4
    return sizes


def iterations_for(nbytes: int, iters: int | None = None) -> int:
    if iters is not None:
        return iters
    return max(MIN_ITERS, min(MAX_ITERS, BYTES_PER_POINT // max(nbytes, 1)))


def _buffers(op: str, nbytes: int, n: int, rank: int, device: str):
    """(callable running the op once, check or None); bytes rounded to whole elements per rank."""
    import torch
    import torch.distributed as dist

    elems = max(nbytes // 4 // n, 1) * n  # divisible by n for the sharded ops
    f = torch.float32
    if op == "all_reduce":
        buf = torch.full((elems,), float(rank + 1), dtype=f, device=device)
        expected = n * (n + 1) / 2

        def run():
            dist.all_reduce(buf)

        def check():
            buf.fill_(float(rank + 1))
            dist.all_reduce(buf)
            got = float(buf[0].item()), float(buf[-1].item())
            if got != (expected, expected):
                raise WrongResult(f"all-reduce returned {got}, expected {expected} everywhere")

        return run, check, elems * 4
    if op == "broadcast":
        buf = torch.full((elems,), float(rank), dtype=f, device=device)

        def run():
            dist.broadcast(buf, src=0)

        def check():
            buf.fill_(float(rank) + 7.0)
            dist.broadcast(buf, src=0)
            if float(buf[-1].item()) != 7.0:
                raise WrongResult(f"broadcast delivered {float(buf[-1].item())}, expected 7.0")

        return run, check, elems * 4
    if op == "all_gather":
        out = torch.empty(elems, dtype=f, device=device)
        inp = torch.ones(elems // n, dtype=f, device=device)
        return (lambda: dist.all_gather_into_tensor(out, inp)), None, elems * 4
    if op == "reduce_scatter":
        out = torch.empty(elems // n, dtype=f, device=device)
        inp = torch.ones(elems, dtype=f, device=device)
        return (lambda: dist.reduce_scatter_tensor(out, inp)), None, elems * 4
    if op == "all_to_all":
        out = torch.empty(elems, dtype=f, device=device)
        inp = torch.ones(elems, dtype=f, device=device)
        return (lambda: dist.all_to_all_single(out, inp)), None, elems * 4
    raise InvalidInput(f"unknown collective {op!r}; known: {', '.join(OPS)}")


def comm_worker(ctx, ops: list[str], sizes: list[int], iters: int | None = None) -> Any:
    """The job every rank runs: the sweep; rank 0 returns raw per-point times."""
    import torch

    from ceiling.measure.timer import benchmark

    warnings.filterwarnings("ignore", category=FutureWarning)  # renamed collectives
    points = []
    total = len(ops) * len(sizes)
    for op in ops:
        for size in sizes:
            run, check, actual = _buffers(op, size, ctx.world_size, ctx.rank, ctx.device)
            if check is not None:
                check()
            k = iterations_for(actual, iters)
            ctx.barrier()
            for _ in range(WARMUP_ITERS):
                run()
            ctx.sync()
            samples = benchmark(
                run,
                device=ctx.device,
                warmup_ms=0.0,
                min_samples=k,
                max_samples=k,
                flush=None,
            )
            samples.sort()
            mine = samples[len(samples) // 2]
            per_rank = ctx.gather_objects(mine)
            points.append({"op": op, "bytes": actual, "iters": k, "time_s_per_rank": per_rank})
            ctx.progress(f"{op} {actual} bytes ({len(points)}/{total})")
    if ctx.rank != 0:
        return None
    return {
        "method_version": METHOD_VERSION,
        "ranks": ctx.world_size,
        "device": ctx.device,
        "backend_engine": ctx.backend,
        "launcher": ctx.launcher,
        "dtype": DTYPE,
        "torch": torch.__version__,
        "points": points,
    }


def run_comm_benchmark(
    workers: int,
    ops: list[str],
    sizes: list[int],
    *,
    iters: int | None = None,
    device: str = "auto",
    timeout_s: float = 300.0,
    on_progress=None,
) -> dict[str, Any] | None:
    """Spawn `workers` ranks here (or join torchrun's job); rank 0 gets the raw sweep."""
    from ceiling.measure import distributed

    for op in ops:
        if op not in OPS:
            raise InvalidInput(f"unknown collective {op!r}; known: {', '.join(OPS)}")
    if iters is not None and iters < 1:
        raise InvalidInput(f"iterations must be at least 1, got {iters}")
    job = distributed.Job(
        target="ceiling.measure.comm:comm_worker",
        kwargs={"ops": list(ops), "sizes": list(sizes), "iters": iters},
        device=device,
        threads_per_worker=1,
        timeout_s=timeout_s,
    )
    if distributed.under_launcher():
        rank, result = distributed.run_under_launcher(job)
        return result if rank == 0 else None
    if workers < 2:
        raise InvalidInput(f"a collective needs at least 2 workers, got {workers}")
    return distributed.launch_local(job, workers, on_progress=on_progress)
