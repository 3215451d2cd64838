"""Where the per-rank work runs: here one rank after another, in a pool of local worker
processes, or on a Dask cluster (`pip install 'ceiling-perf[cluster]'`) when a job's folder of
rank traces outgrows one machine. Each rank is read and reduced to its summary where it runs
(`rank_summary`), so only summaries come back. Results keep the order of the files."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from itertools import repeat

from ceiling.errors import InvalidInput
from ceiling.trace.rank_summary import rank_summary

Progress = Callable[[int, int], None]


def default_workers(files: int) -> int:
    return max(1, min(files, os.cpu_count() or 1))


def run_ranks(
    paths: Sequence[str],
    machine,
    peak_key: str | None,
    workers: int = 1,
    dask: str | None = None,
    progress: Progress | None = None,
    questions=None,
) -> list:
    """rank_summary(path, machine, peak_key, questions) for every path."""
    if not paths:
        return []
    if dask is not None:
        return _on_dask(paths, machine, peak_key, dask, progress, questions)
    if workers <= 1 or len(paths) == 1:
        out = []
        for i, p in enumerate(paths):
            out.append(rank_summary(p, machine, peak_key, questions))
            if progress:
                progress(i + 1, len(paths))
        return out
    # fork where the platform has it: the workers start at once with the modules loaded
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    context = multiprocessing.get_context(method)
    out = []
    with ProcessPoolExecutor(min(workers, len(paths)), mp_context=context) as pool:
        jobs = pool.map(rank_summary, paths, repeat(machine), repeat(peak_key), repeat(questions))
        for i, r in enumerate(jobs):
            out.append(r)
            if progress:
                progress(i + 1, len(paths))
    return out


def _on_dask(paths, machine, peak_key, address: str, progress: Progress | None, questions) -> list:
    try:
        from dask.distributed import Client, as_completed
    except ImportError:
        raise InvalidInput(
            "reading ranks on a Dask cluster needs dask.distributed: "
            "pip install 'ceiling-perf[cluster]'"
        ) from None
    # "local": a cluster of threads in this process; else the scheduler's address
    try:
        client = Client(processes=False) if address == "local" else Client(address, timeout=10)
    except (OSError, ValueError, TypeError) as exc:
        raise InvalidInput(
            f"dask: no Dask scheduler answers at {address!r} ({exc}); start one "
            "(dask scheduler) or pass 'local'"
        ) from None
    try:
        futures = client.map(
            rank_summary,
            list(paths),
            machine=machine,
            peak_key=peak_key,
            questions=questions,
            pure=False,
        )
        for done, _ in enumerate(as_completed(futures), start=1):
            if progress:
                progress(done, len(paths))
        return client.gather(futures)
    finally:
        client.close()
