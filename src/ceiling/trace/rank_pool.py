"""A job's rank files read several at once, this process and local worker processes together,
within a memory budget: the whole process tree holds at most twice what reading the ranks
one after another holds (`pool_budget`).

- A rank goes to a worker only while the workers' estimated memory, with it, fits the budget
  (and a worker slot is free: `workers` ranks at once at most, this process's one
  included); a rank that does not fit is read by this process, so nothing waits on memory
  and a rank larger than the budget is still read, as it would be one after another.
- A worker is a fresh interpreter (spawned) that loads the trace reader and nothing else of
  this process (neither its heap nor torch if it was loaded), reads one rank, sends back its
  small result with the memory it took, and ends: it is started when its rank is admitted,
  so no idle worker is held, and the heap one rank's events fragmented goes back to the
  system. The memory reports refine the estimates for the ranks after.
- Results keep the files' order; `progress(done, total)` after each.

Measured (benchmarks/trace_pool_memory.py: 32 ranks of a 30 MB ResNet-50 trace, 2 cores):
one rank after another peaks at 130 MiB summed over the processes; 4 workers at 207 MiB,
1.6 times, with this process and one worker reading at once (the budget admits no second).

`bounded_map` is the count-bounded form for any executor: at most `in_flight` items
submitted and not yet collected.
"""

from __future__ import annotations

import multiprocessing
import os
import stat
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from multiprocessing.connection import wait

from ceiling.errors import WorkerFailed
from ceiling.trace.pool_budget import MemoryBudget, admits

Progress = Callable[[int, int], None]


def in_pool(
    work: Callable, paths: Sequence[str], workers: int, progress: Progress | None = None
) -> list:
    """[work(path) for path in paths], up to `workers` at once within the memory budget;
    `work` a module-level function (or a partial of one) whose result is small."""
    paths = list(paths)
    sizes = [json_bytes(p) for p in paths]
    budget = MemoryBudget(own_memory(), max(sizes, default=0))
    slots = max(0, min(workers, len(paths)) - 1)  # the workers beside this process
    with Workers(worker_context()) as pool:
        return budgeted_map(work, paths, sizes, budget, slots, pool, progress)


def budgeted_map(work, items, sizes, budget: MemoryBudget, slots: int, pool, progress) -> list:
    """[work(item) for item in items]: each to a worker of `pool` (`start`, `finished`) while
    `admits` it, else done here; `sizes`: each item's JSON bytes."""
    out: list = [None] * len(items)
    running: dict = {}  # a worker's handle -> its item's index
    done = nxt = 0

    def record(i: int, value) -> None:
        nonlocal done
        out[i], done = value, done + 1
        if progress:
            progress(done, len(items))

    while done < len(items):
        while nxt < len(items) and admits(
            [budget.cost(sizes[i]) for i in running.values()],
            budget.cost(sizes[nxt]),
            budget.limit(),
            slots,
        ):
            running[pool.start(work, items[nxt])] = nxt
            nxt += 1
        finished = pool.finished(list(running), block=nxt == len(items))
        for handle in finished:
            i = running.pop(handle)
            value, report = handle.result()
            if report is not None:
                budget.learn(sizes[i], *report)
            record(i, value)
        if not finished and nxt < len(items):
            record(nxt, work(items[nxt]))
            nxt += 1
    return out


def worker_context():
    """Spawn: a fresh interpreter for each worker; a fork would copy this process's whole
    heap (and torch, if loaded) into every worker."""
    return multiprocessing.get_context("spawn")


class Workers:
    """Worker processes started one a rank, each with a pipe for its answer; those still
    running when the pool is left (an error elsewhere) are stopped."""

    def __init__(self, context) -> None:
        self.context = context
        self.started: list = []

    def start(self, work: Callable, item) -> _Worker:
        receive, send = self.context.Pipe(duplex=False)
        process = self.context.Process(target=_in_worker, args=(work, item, send), daemon=True)
        process.start()
        send.close()
        self.started.append(process)
        return _Worker(process, receive, item)

    def finished(self, handles: list, block: bool) -> list:
        """The workers among `handles` that have answered or ended (waiting for one if
        `block`)."""
        if not handles:
            return []
        ready = wait([h.conn for h in handles], None if block else 0)
        return [h for h in handles if h.conn in ready]

    def __enter__(self) -> Workers:
        return self

    def __exit__(self, *exc) -> None:
        for process in self.started:
            if process.is_alive():
                process.terminate()
            process.join()


class _Worker:
    def __init__(self, process, conn, item) -> None:
        self.process, self.conn, self.item = process, conn, item

    def result(self):
        """(the work's value, (memory at start, growth) or None); the work's error raised."""
        try:
            kind, value, report = self.conn.recv()
        except EOFError:
            self.process.join()
            raise WorkerFailed(
                f"{self.item}: the worker process reading it ended without an answer "
                f"(exit code {self.process.exitcode})"
            ) from None
        finally:
            self.conn.close()
        self.process.join()
        if kind == "error":
            raise value
        return value, report


def _in_worker(work: Callable, item, conn) -> None:
    start = own_memory()
    try:
        value = work(item)
    except BaseException as exc:  # sent back, raised there
        message = ("error", exc, None)
    else:
        peak = peak_memory()
        message = ("ok", value, (start, max(peak - start, 0)) if peak else None)
    try:
        conn.send(message)
    except Exception as exc:  # an answer or error that cannot be pickled
        error = WorkerFailed(f"{item}: the worker's answer cannot be sent back: {exc}")
        conn.send(("error", error, None))
    conn.close()


def peak_memory() -> int:
    """This process's peak resident memory since it started its program, in bytes: Linux's
    VmHWM (getrusage's peak would count the memory of the process it was forked from); 0
    where the system does not say."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def own_memory() -> int:
    """This process's resident memory now, in bytes."""
    import psutil

    return psutil.Process().memory_info().rss


def json_bytes(path: str) -> int:
    """A rank file's bytes of JSON: its size, or for a .gz the size its trailer records
    when larger (0 for a file that cannot be read: its reader says why)."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            return 0
        if not str(path).lower().endswith(".gz") or st.st_size < 18:
            return st.st_size
        with open(path, "rb") as f:
            f.seek(-4, os.SEEK_END)
            return max(st.st_size, int.from_bytes(f.read(4), "little"))
    except (OSError, ValueError):
        return 0


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
