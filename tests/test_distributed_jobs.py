"""Jobs for the distributed tests; the spawned workers import this module by name."""

import time


def allreduce_ranks(ctx, scale=1.0):
    import torch
    import torch.distributed as dist

    t = torch.full((4,), float(ctx.rank + 1))
    dist.all_reduce(t)
    ctx.progress(f"summed {t[0].item():g}")
    return {"sum": t[0].item() * scale, "world": ctx.world_size, "backend": ctx.backend}


def fail_on_rank_1(ctx):
    allreduce_ranks(ctx)  # a working collective and a progress line first
    if ctx.rank == 1:
        raise RuntimeError("deliberate failure in the test job")
    time.sleep(60)


def hang_on_rank_1(ctx):
    if ctx.rank == 1:
        time.sleep(3600)
    return "rank 0 done"


def user_step(ctx):
    """A user's step for `ceiling scale MODULE:CALLABLE`: 20 ms of work split n ways."""
    time.sleep(ctx.share(0.02))


def bad_input_on_rank_0(ctx):
    from ceiling.errors import InvalidInput

    if ctx.rank == 0:
        raise InvalidInput("this setting needs a larger batch")
    import torch.distributed as dist

    dist.barrier()  # fails on the broken link once rank 0 has gone


def hang_step_on_rank_1(ctx):
    """A user's step for `ceiling scale`: rank 1 never returns once two workers run."""
    if ctx.n > 1 and ctx.rank == 1:
        time.sleep(3600)
    time.sleep(0.01)
