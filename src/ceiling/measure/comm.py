"""Collective bandwidth on torch.distributed, measured the way nccl-tests does.

Every rank runs the same sweep of operations and message sizes (see
ceiling.model.collectives for which buffer `bytes` names); each (op, size) gets warm-up
calls and then a fixed number of timed calls, the same number on every rank so the
collectives pair up. A rank's time is its median call; the point's time is the slowest
rank's, since a collective is done when its last rank is (nccl-tests averages the ranks by
default; the slowest is the conservative choice). Before timing, every op and size is
run once on rank- and position-dependent values and every element of the result is
checked, so a broken transport cannot produce a fast-looking number. all-reduce and
broadcast run in place, the others out of place (torch's calls), said per row.
"""

from __future__ import annotations

import os
import warnings
from typing import Any

from ceiling.errors import InvalidInput, WrongResult
from ceiling.measure.stall import STALL_S
from ceiling.model.collectives import OPS
from ceiling.units import format_bytes

# 2: every op checked element by element; all-reduce timed on zeros
# 3: rank 0 reads its device's clocks after each point; the device name and whether the
#    ranks span nodes are recorded
METHOD_VERSION = 3
DTYPE = "float32"
# Each timed point moves about this many bytes in total (fewer calls for big messages).
BYTES_PER_POINT = 2**27
MIN_ITERS, MAX_ITERS = 3, 50
WARMUP_ITERS = 2


# Largest message by default: big enough on GPUs for NVLink and NICs to saturate (nccl-tests
# sweeps to GiBs), small on CPUs where gloo copies through host memory.
DEFAULT_MAX_BYTES = {"cpu": 16 * 2**20, "cuda": 2**30}


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


# Which ops run in place (the result overwrites the input buffer), as torch's calls do;
# nccl-tests times both placements, torch.distributed offers these.
IN_PLACE = {
    "all_reduce": True,
    "broadcast": True,
    "all_gather": False,
    "reduce_scatter": False,
    "all_to_all": False,
}


def _expect(name: str, got, want) -> None:
    """Every element checked, as nccl-tests' data check does (not a sample of them)."""
    import torch

    if not torch.equal(got, want):
        bad = (got != want).nonzero()
        i = int(bad[0].item()) if len(bad) else 0
        raise WrongResult(
            f"{name} returned {float(got.reshape(-1)[i].item())} at element {i} of "
            f"{got.numel()}, expected {float(want.reshape(-1)[i].item())}: the transport "
            "corrupts data, so its timings mean nothing"
        )


def _buffers(op: str, nbytes: int, n: int, rank: int, device: str):
    """(run the op once, check its result, bytes): bytes rounded to whole elements per rank.

    Values are small whole numbers, exact in float32 whatever the order of summation, so
    the check is exact. Timed calls then run on zeros, which stay zeros under repeated
    reduction (repeated sums of real data would overflow to inf over many calls)."""
    import torch
    import torch.distributed as dist

    elems = max(nbytes // 4 // n, 1) * n  # divisible by n for the sharded ops
    shard = elems // n
    f = torch.float32

    def ramp(length: int, offset: int = 0):
        # per-element values that differ by position and rank, small enough to stay exact
        return ((torch.arange(length, device=device) + offset) % 251).to(f)

    if op == "all_reduce":
        buf = torch.empty(elems, dtype=f, device=device)

        def check():
            buf.copy_(ramp(elems) + rank)
            dist.all_reduce(buf)
            _expect("all-reduce", buf, ramp(elems) * n + n * (n - 1) / 2)
            buf.zero_()

        return (lambda: dist.all_reduce(buf)), check, elems * 4
    if op == "broadcast":
        buf = torch.empty(elems, dtype=f, device=device)

        def check():
            buf.copy_(ramp(elems, 7 * rank))
            dist.broadcast(buf, src=0)
            _expect("broadcast", buf, ramp(elems))

        return (lambda: dist.broadcast(buf, src=0)), check, elems * 4
    if op == "all_gather":
        out = torch.empty(elems, dtype=f, device=device)
        inp = torch.empty(shard, dtype=f, device=device)

        def check():
            inp.copy_(ramp(shard, rank * shard))
            dist.all_gather_into_tensor(out, inp)
            _expect("all-gather", out, ramp(elems))

        return (lambda: dist.all_gather_into_tensor(out, inp)), check, elems * 4
    if op == "reduce_scatter":
        out = torch.empty(shard, dtype=f, device=device)
        inp = torch.empty(elems, dtype=f, device=device)

        def check():
            inp.copy_(ramp(elems) + rank)
            dist.reduce_scatter_tensor(out, inp)
            _expect("reduce-scatter", out, ramp(shard, rank * shard) * n + n * (n - 1) / 2)

        return (lambda: dist.reduce_scatter_tensor(out, inp)), check, elems * 4
    if op == "all_to_all":
        out = torch.empty(elems, dtype=f, device=device)
        inp = torch.empty(elems, dtype=f, device=device)

        def check():
            # block j of rank r's input goes to rank j; it holds 1000·r + j + position
            inp.copy_(ramp(elems) + 1000 * rank + (torch.arange(elems, device=device) // shard))
            dist.all_to_all_single(out, inp)
            idx = torch.arange(elems, device=device)
            # block i of the output is block `rank` of rank i's input
            want = ((rank * shard + idx % shard) % 251).to(f) + 1000 * (idx // shard).to(f) + rank
            _expect("all-to-all", out, want)

        return (lambda: dist.all_to_all_single(out, inp)), check, elems * 4
    raise InvalidInput(f"unknown collective {op!r}; known: {', '.join(OPS)}")


def comm_worker(ctx, ops: list[str], sizes: list[int], iters: int | None = None) -> Any:
    """The job every rank runs: the sweep; rank 0 returns raw per-point times."""
    import torch

    from ceiling.measure.timer import benchmark

    warnings.filterwarnings("ignore", category=FutureWarning)  # renamed collectives
    reader = None
    if ctx.rank == 0:
        from ceiling.measure.machine import telemetry_reader

        reader, _ = telemetry_reader(ctx.device)
    points = []
    total = len(ops) * len(sizes)
    for op in ops:
        for size in sizes:
            run, check, actual = _buffers(op, size, ctx.world_size, ctx.rank, ctx.device)
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
            points.append(
                {
                    "op": op,
                    "bytes": actual,
                    "iters": k,
                    "in_place": IN_PLACE[op],
                    "checked": True,
                    "time_s_per_rank": per_rank,
                    "telemetry": reader.read() if reader is not None else None,
                }
            )
            ctx.progress(f"{op} {actual} bytes ({len(points)}/{total})")
    if ctx.rank != 0:
        return None
    on_gpu = str(ctx.device).startswith("cuda")
    return {
        "method_version": METHOD_VERSION,
        "ranks": ctx.world_size,
        # torchrun says how many ranks share this node; spawned locally, all of them do
        "ranks_per_node": int(os.environ.get("LOCAL_WORLD_SIZE", ctx.world_size)),
        "device": ctx.device,
        "device_name": torch.cuda.get_device_name(torch.device(ctx.device)) if on_gpu else "cpu",
        "telemetry_source": reader.source if reader is not None else None,
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
    stall_s: float = STALL_S,
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
        stall_s=stall_s,
    )
    if distributed.under_launcher():
        rank, result = distributed.run_under_launcher(job)
        return result if rank == 0 else None
    if workers < 2:
        raise InvalidInput(f"a collective needs at least 2 workers, got {workers}")
    check_room(workers, max(sizes), device)
    return distributed.launch_local(job, workers, on_progress=on_progress)


# A rank holds its buffers plus the values its data check builds: up to 4 × the message.
BUFFER_COPIES = 4


def check_room(workers: int, max_bytes: int, device: str, room=None) -> None:
    """Refuse, before any worker starts, more workers than this machine's cores allow or
    buffers that do not fit in its memory (CPU runs: buffers live in host memory)."""
    from ceiling.hardware import capacity

    room = room or capacity.local_room()
    on_cpu = device == "cpu"
    if device == "auto":
        import torch

        on_cpu = not torch.cuda.is_available()
    capacity.check_workers(workers, room)
    if on_cpu:
        capacity.check_bytes(
            workers * (capacity.WORKER_BYTES + BUFFER_COPIES * max_bytes),
            f"{workers} workers × ({format_bytes(capacity.WORKER_BYTES, binary=True)} + "
            f"{BUFFER_COPIES} × {format_bytes(max_bytes, binary=True)} largest message)",
            room,
            "a smaller --max-bytes",
        )
