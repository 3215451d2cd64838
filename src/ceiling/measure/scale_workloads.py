"""The workloads `ceiling scale` runs on 1..N workers, one step at a time.

Each workload is built for one worker (`StepContext`: rank r of n, the synchronisation
primitives of its backend) and its `step()` returns the seconds spent in named phases:

    serial_s     the serial part, which every worker does in full (the Amdahl share)
    compute_s    this worker's share of the parallel work
    wait_s       waiting at the synchronisation for slower workers (load imbalance)
    comm_s       the collective that combines the workers' results
    optimizer_s  (ddp) the optimizer update after the gradient all-reduce

Strong scaling splits a fixed problem over n workers; weak scaling gives each worker the
N = 1 problem. `imbalance` makes the last worker's share (1 + imbalance) times larger.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ceiling.errors import InvalidInput

BUILTIN = ("synthetic", "matmul", "python", "ddp")
# Workloads whose fitted time is the work alone (its content is known: the truth), with the
# machine's synchronisation measured and fitted apart.
FITS_WORK_TIME = ("synthetic",)


@dataclass
class StepContext:
    """One worker's view: rank of n, and its backend's synchronisation."""

    rank: int
    n: int
    mode: str  # "strong" | "weak"
    device: str
    backend: str  # "processes" | "threads"
    imbalance: float = 0.0
    barrier: Callable[[], None] = lambda: None
    # all_reduce(tensor) sums in place over the n workers; None with threads (shared memory)
    all_reduce: Callable[[Any], None] | None = None
    sync: Callable[[], None] = lambda: None  # waits for queued device work
    group: Any = None  # the torch.distributed group of the n workers (processes only)
    options: dict[str, Any] = field(default_factory=dict)

    def share(self, total: float) -> float:
        """This worker's part of `total` parallel work, imbalance included."""
        part = total / self.n if self.mode == "strong" else total
        if self.imbalance and self.n > 1 and self.rank == self.n - 1:
            part *= 1.0 + self.imbalance
        return part

    def timed_barrier(self) -> float:
        t = time.perf_counter()
        self.barrier()
        return time.perf_counter() - t


def _float_opt(opts: dict, key: str, default: float, lo: float, hi: float) -> float:
    v = float(opts.get(key, default))
    if not lo <= v <= hi:
        raise InvalidInput(f"{key.replace('_', '-')} must be in [{lo:g}, {hi:g}], got {v:g}")
    return v


def _sleep_until(deadline: float) -> None:
    while (left := deadline - time.perf_counter()) > 0:
        time.sleep(left)


class Synthetic:
    """Known serial fraction and communication volume: sleeps, so it does not need cores.

    One step of the N = 1 problem lasts `work_s`. Every worker does the `serial` part in
    full (as every rank of a data-parallel job loads its batch and runs its Python overhead:
    it does not shrink with N); the rest is split (strong) or repeated (weak) across
    workers; then `comm_bytes` are all-reduced. Sleeping makes the truth independent of
    free cores, so it holds with more workers than cores.

    The truth covers the sleeps only: the barrier and the all-reduce that end each step cost
    what this machine makes them cost (a few ms with 8 processes on 2 busy cores), unknown in
    advance. So the step reports them as their own phases and the run fits the work (serial
    + compute, slowest worker) against the truth, and the whole step apart.
    """

    def __init__(self, ctx: StepContext):
        self.ctx = ctx
        o = ctx.options
        self.serial = _float_opt(o, "serial", 0.1, 0.0, 1.0)
        self.work_s = _float_opt(o, "work_s", 0.5, 1e-4, 60.0)
        self.comm_bytes = int(_float_opt(o, "comm_bytes", 0, 0, 2**34))
        self.buf = None
        if self.comm_bytes and ctx.all_reduce is not None:
            import torch

            self.buf = torch.zeros(max(self.comm_bytes // 4, 1), device=ctx.device)

    def truth(self) -> dict[str, float]:
        return {
            "serial_fraction": self.serial,
            "parallel_fraction": 1.0 - self.serial,
            "work_s": self.work_s,
            "comm_bytes_per_step": float(self.comm_bytes if self.buf is not None else 0),
        }

    def step(self) -> dict[str, float]:
        ctx = self.ctx
        t0 = time.perf_counter()
        # Deadlines from one start, so a late wake-up from the first sleep does not add up
        # with the second's: only the last wake-up's delay is left in the work time.
        _sleep_until(t0 + self.serial * self.work_s)
        t1 = time.perf_counter()
        _sleep_until(t0 + self.serial * self.work_s + ctx.share((1.0 - self.serial) * self.work_s))
        t2 = time.perf_counter()
        wait = ctx.timed_barrier()
        comm = 0.0
        if self.buf is not None:
            t3 = time.perf_counter()
            ctx.all_reduce(self.buf)
            ctx.sync()
            comm = time.perf_counter() - t3
        return {"serial_s": t1 - t0, "compute_s": t2 - t1, "wait_s": wait, "comm_s": comm}


class PythonLoop:
    """Pure-Python arithmetic: holds the GIL, so threads take turns and processes do not."""

    def __init__(self, ctx: StepContext):
        self.ctx = ctx
        self.iterations = int(_float_opt(ctx.options, "iterations", 2e6, 1, 1e10))
        self.count = max(int(ctx.share(self.iterations)), 1)

    def truth(self) -> dict[str, float]:
        return {"iterations": float(self.iterations)}

    def step(self) -> dict[str, float]:
        t0 = time.perf_counter()
        acc = 0
        for i in range(self.count):
            acc += i * i % 7
        t1 = time.perf_counter()
        wait = self.ctx.timed_barrier()
        comm = 0.0
        if self.ctx.all_reduce is not None:
            import torch

            t2 = time.perf_counter()
            self.ctx.all_reduce(torch.tensor([float(acc)]))
            comm = time.perf_counter() - t2
        return {"compute_s": t1 - t0, "wait_s": wait, "comm_s": comm}


class Matmul:
    """A fixed (strong) or per-worker (weak) matmul: rows of A split across workers.

    torch releases the GIL inside the kernel, so threads run these in parallel too.
    """

    def __init__(self, ctx: StepContext):
        import torch

        self.ctx = ctx
        self.size = int(_float_opt(ctx.options, "size", 1024, 16, 65536))
        dtype = getattr(torch, str(ctx.options.get("dtype", "float32")))
        rows = max(round(ctx.share(self.size)), 1)
        gen = torch.Generator().manual_seed(ctx.rank)
        self.a = torch.randn(rows, self.size, generator=gen).to(ctx.device, dtype)
        self.b = torch.randn(self.size, self.size, generator=gen).to(ctx.device, dtype)
        self.out = torch.empty(rows, self.size, device=ctx.device, dtype=dtype)
        self.flops = 2.0 * rows * self.size * self.size

    def truth(self) -> dict[str, float]:
        return {"flops_per_step_n1": 2.0 * self.size**3, "shape": float(self.size)}

    def step(self) -> dict[str, float]:
        import torch

        t0 = time.perf_counter()
        torch.mm(self.a, self.b, out=self.out)
        self.ctx.sync()
        t1 = time.perf_counter()
        wait = self.ctx.timed_barrier()
        comm = 0.0
        if self.ctx.all_reduce is not None:
            t2 = time.perf_counter()
            self.ctx.all_reduce(self.out[:1, :1].contiguous())
            self.ctx.sync()
            comm = time.perf_counter() - t2
        return {"compute_s": t1 - t0, "wait_s": wait, "comm_s": comm}


class DataParallelStep:
    """One data-parallel training step of the built-in GPT ("tiny" unless `model` is set).

    Gradients are all-reduced after the backward pass as one flat buffer, so compute and
    communication are timed apart (DDP overlaps them; this shows what there is to hide).
    """

    def __init__(self, ctx: StepContext):
        import torch

        if ctx.all_reduce is None:
            raise InvalidInput("the ddp workload needs --backend processes (one model per process)")
        from ceiling.workloads.gpt import build_gpt

        self.ctx = ctx
        o = ctx.options
        self.model_name = str(o.get("model", "tiny"))
        self.batch = int(_float_opt(o, "batch", 8, 1, 1e6))
        self.seq = int(_float_opt(o, "seq", 64, 2, 1e6))
        if ctx.mode == "strong":
            if self.batch % ctx.n:
                raise InvalidInput(
                    f"strong scaling splits the global batch: batch {self.batch} is not a "
                    f"multiple of {ctx.n} workers"
                )
            local = self.batch // ctx.n
        else:
            local = self.batch
        if ctx.imbalance and ctx.n > 1 and ctx.rank == ctx.n - 1:
            local = max(round(local * (1.0 + ctx.imbalance)), local + 1)
        self.model = build_gpt(self.model_name, device=ctx.device, dtype=torch.float32)
        cfg = self.model.transformer_config()
        if self.seq > cfg.max_seq:
            raise InvalidInput(f"seq {self.seq} exceeds the model's max_seq {cfg.max_seq}")
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.SGD(self.params, lr=1e-3)
        gen = torch.Generator().manual_seed(1234 + ctx.rank)
        self.idx = torch.randint(0, cfg.vocab, (local, self.seq + 1), generator=gen).to(ctx.device)
        self.local_batch = local
        self.grad_bytes = sum(p.numel() * p.element_size() for p in self.params)

    def truth(self) -> dict[str, float]:
        return {
            "grad_bytes_per_step": float(self.grad_bytes),
            "global_batch": float(self.batch),
            "seq": float(self.seq),
        }

    def step(self) -> dict[str, float]:
        import torch

        ctx = self.ctx
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=False)
        _, loss = self.model(self.idx[:, :-1], self.idx[:, 1:])
        loss.backward()
        ctx.sync()
        t1 = time.perf_counter()
        wait = ctx.timed_barrier()
        t2 = time.perf_counter()
        grads = [p.grad for p in self.params]
        flat = torch.cat([g.reshape(-1) for g in grads])
        ctx.all_reduce(flat)
        flat.div_(ctx.n)
        offset = 0
        for g in grads:
            g.copy_(flat[offset : offset + g.numel()].view_as(g))
            offset += g.numel()
        ctx.sync()
        t3 = time.perf_counter()
        self.opt.step()
        ctx.sync()
        t4 = time.perf_counter()
        return {"compute_s": t1 - t0, "wait_s": wait, "comm_s": t3 - t2, "optimizer_s": t4 - t3}


class UserCallable:
    """`module:callable`, called as callable(ctx) once per step with this worker's StepContext
    (ctx.rank, ctx.n, ctx.mode, ctx.device, ctx.group for collectives, ctx.share(total))."""

    def __init__(self, ctx: StepContext, target: str):
        from ceiling import usercode

        self.ctx = ctx
        self.fn = usercode.guarded(usercode.load_callable(target), target)

    def truth(self) -> dict[str, float]:
        return {}

    def step(self) -> dict[str, float]:
        t0 = time.perf_counter()
        self.fn(self.ctx)
        self.ctx.sync()
        t1 = time.perf_counter()
        wait = self.ctx.timed_barrier()
        return {"compute_s": t1 - t0, "wait_s": wait}


def check_workload(name: str) -> str:
    if name in BUILTIN or (":" in name and all(name.partition(":")[::2])):
        return name
    raise InvalidInput(
        f"unknown workload {name!r}; built in: {', '.join(BUILTIN)}, or your own "
        "MODULE:CALLABLE (called once per step with the worker's context)"
    )


def make_workload(name: str, ctx: StepContext):
    if name == "synthetic":
        return Synthetic(ctx)
    if name == "python":
        return PythonLoop(ctx)
    if name == "matmul":
        return Matmul(ctx)
    if name == "ddp":
        return DataParallelStep(ctx)
    return UserCallable(ctx, check_workload(name))


def uses_torch(name: str, backend: str) -> bool:
    """Whether the workload needs torch in the worker (threads run in this process)."""
    if backend == "processes":
        return True
    return name in ("matmul", "ddp") or ":" in name
