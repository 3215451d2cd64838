"""What a new buffer costs beyond the bytes written into it: first touch of fresh memory.

An op that returns a new tensor (out-of-place: `y = gelu(x)`, not `x.add_(1)` or a view)
gets it from the allocator. A CPU allocator returns large blocks to the operating system
when they are freed (glibc: blocks from 32 MiB by default), so the next one comes back as
unmapped pages and each page is zeroed by the kernel on its first write: a cost per byte
that a reused buffer does not pay, and that no bandwidth figure shows. A GPU's caching
allocator keeps its blocks, so there the two times below are alike.

`time_first_touch` fills, at each size, a newly allocated buffer and an existing one, and
returns both raw best times and the page faults one fresh fill took (`faults_now`, where
the operating system counts them per thread); `ceiling.model.first_touch` turns them into
a cost per byte, the size it starts at, and a cost per page fault.
"""

from __future__ import annotations

from dataclasses import dataclass

from ceiling.measure.timer import benchmark

SIZES_BYTES = tuple(m * 2**20 for m in (4, 8, 16, 24, 32, 48, 64))
# Each size above a few MiB takes its minimum calls whatever the budget; fewer sizes would
# move where the fit sees the cost start (benchmarks/local_roofs_budget.py).
QUICK_BUDGET_MS = 5.0


@dataclass(frozen=True)
class FirstTouchSamples:
    sizes_bytes: list[int]
    fresh_s: list[float]  # best time to allocate a new buffer and fill it
    reused_s: list[float]  # best time to fill an existing buffer of the same size
    fresh_faults: list[int] | None = None  # page faults of one fresh fill (None: not counted)


def faults_now() -> int | None:
    """Page faults this thread has taken so far (None where they are not counted)."""
    try:
        import resource

        usage = resource.getrusage(resource.RUSAGE_THREAD)
    except (ImportError, AttributeError, OSError):
        return None
    return usage.ru_minflt + usage.ru_majflt


def time_first_touch(
    device: str = "cpu", sizes=SIZES_BYTES, budget_ms: float = 40.0, warmup_ms: float = 5.0
) -> FirstTouchSamples:
    """Best seconds to fill a fresh and a reused buffer of each size (fp32 ones)."""
    import torch

    fresh, reused, faults = [], [], []
    for size in sizes:
        n = max(int(size) // 4, 1)
        kept = torch.empty(n, device=device)

        def new(n=n) -> None:
            torch.empty(n, device=device).fill_(1.0)

        def old(kept=kept) -> None:
            kept.fill_(1.0)

        for fn, out in ((new, fresh), (old, reused)):
            times = benchmark(fn, device=device, warmup_ms=warmup_ms, budget_ms=budget_ms,
                              min_samples=3, flush=None)  # fmt: skip
            out.append(min(times))
        before = faults_now()
        new()
        after = faults_now()
        faults.append(None if before is None or after is None else after - before)
        del kept
    counted = None if None in faults else faults
    return FirstTouchSamples([int(s) for s in sizes], fresh, reused, counted)


def quick_first_touch(device: str = "cpu") -> FirstTouchSamples:
    """time_first_touch at the quick budget, measured once per process, device and threads."""
    from ceiling.measure.once import measured_once

    return measured_once(
        "first_touch",
        device,
        lambda: time_first_touch(device, SIZES_BYTES, QUICK_BUDGET_MS, warmup_ms=1.0),
    )
