"""A job's rank files read in a pool of local worker processes, with its memory bounded.

What a pool holds at most: this process, which reads no trace (the first, which decides the
device, is read in a worker too) and keeps only the summaries, and for each worker one rank's
trace at a time with its analysis (a few times the rank's uncompressed JSON), whatever the
number of ranks.

- Workers start from a fork server that has imported the trace reader and nothing else: they
  inherit neither this process's heap nor its modules (the command line's, torch if it was
  loaded).
- A worker is replaced after `RANKS_PER_WORKER` ranks: the heap one rank's events fragmented
  goes back to the system instead of growing from rank to rank.
- Ranks go to the pool a few at a time (`in_flight` at most, two a worker so that none waits
  on a slow rank) and each comes back as its `RankResult`, the compact summary, never its
  events; the summaries are kept in the files' order as they arrive.
"""

from __future__ import annotations

import multiprocessing
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor

Progress = Callable[[int, int], None]
# Ranks a worker reads before it is replaced by a fresh one (forked from the server: cheap).
RANKS_PER_WORKER = 1
# Ranks submitted and not yet collected, per worker.
IN_FLIGHT_PER_WORKER = 2
# What the fork server imports once, so that each worker starts with the reader loaded.
WORKER_MODULES = ["ceiling.trace.rank_summary"]


def in_pool(
    work: Callable, paths: Sequence[str], workers: int, progress: Progress | None = None
) -> list:
    """[work(path) for path in paths] in `workers` local processes; `work` a module-level
    function (or a partial of one) whose result is small."""
    n = max(1, min(workers, len(paths)))
    with ProcessPoolExecutor(
        n, mp_context=worker_context(), max_tasks_per_child=RANKS_PER_WORKER
    ) as pool:
        return bounded_map(pool.submit, work, paths, n * IN_FLIGHT_PER_WORKER, progress)


def worker_context():
    """A fork server preloaded with the reader where the platform has one, else spawn: a
    plain fork would copy this process's whole heap into every worker."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(WORKER_MODULES)
    return context


def bounded_map(
    submit: Callable, work: Callable, items: Iterable, in_flight: int, progress: Progress | None
) -> list:
    """[work(item) for item in items] through `submit(work, item)` (an executor's), with at
    most `in_flight` items submitted and not yet collected; collected in the items' order,
    `progress(done, total)` after each."""
    if in_flight < 1:
        raise ValueError(f"in_flight must be at least 1, got {in_flight}")
    items = list(items)
    pending: deque = deque()
    out: list = []
    for item in items:
        if len(pending) == in_flight:
            _collect(pending, out, progress, len(items))
        pending.append(submit(work, item))
    while pending:
        _collect(pending, out, progress, len(items))
    return out


def _collect(pending: deque, out: list, progress: Progress | None, total: int) -> None:
    out.append(pending.popleft().result())
    if progress:
        progress(len(out), total)
