"""Where the per-rank work runs: here one rank after another, in a pool of local worker
processes, or on a Dask cluster (`pip install 'ceiling-perf[cluster]'`) when a job's folder of
rank traces outgrows one machine. Each rank is read and reduced to its summary where it runs
(`rank_summary`), so only summaries come back; the local pool's memory is bounded
(`rank_pool`). Results keep the order of the files."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from functools import partial

from ceiling.errors import InvalidInput
from ceiling.text import printable
from ceiling.trace.rank_pool import Progress, in_pool
from ceiling.trace.rank_summary import rank_summary

# How long a Dask scheduler has to answer, and to have a worker, before it is refused.
DASK_TIMEOUT_S = 10.0


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
    work = partial(rank_summary, machine=machine, peak_key=peak_key, questions=questions)
    return in_pool(work, paths, workers, progress)


def _on_dask(paths, machine, peak_key, address: str, progress: Progress | None, questions) -> list:
    from dask.distributed import as_completed

    client, cluster = _dask_client(address, DASK_TIMEOUT_S)
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
        if cluster is not None:
            cluster.close()


def check_dask(address: str, timeout_s: float = DASK_TIMEOUT_S) -> None:
    """Refuse, before any trace is read, a Dask address that cannot serve: dask missing, or a
    peer that is not a scheduler (`dask_peer`)."""
    try:
        import dask.distributed  # noqa: F401
    except ImportError:
        raise InvalidInput(
            "reading ranks on a Dask cluster needs dask.distributed: "
            "pip install 'ceiling-perf[cluster]'"
        ) from None
    if address != "local":
        from ceiling.trace.dask_peer import check_scheduler

        check_scheduler(address, timeout_s)


def _dask_client(address: str, timeout_s: float):
    """A client of the scheduler at `address` with a worker, or of a cluster of threads in
    this process ("local") whose scheduler and workers listen on 127.0.0.1 only, with no
    dashboard."""
    from dask.distributed import Client, LocalCluster

    if address == "local":
        cluster = LocalCluster(
            processes=False,
            host="127.0.0.1",
            protocol="tcp://",
            scheduler_port=0,
            dashboard_address=None,
            worker_dashboard_address=None,
        )
        return Client(cluster), cluster
    try:
        client = _within(2 * timeout_s, lambda: Client(address, timeout=timeout_s), address)
    except (OSError, ValueError, TypeError) as exc:
        raise InvalidInput(
            f"dask: no Dask scheduler answers at {printable(address)!r} ({exc}); start one "
            "(dask scheduler) or pass 'local'"
        ) from None
    try:
        client.wait_for_workers(1, timeout=timeout_s)
    except TimeoutError:
        client.close()
        raise InvalidInput(
            f"dask: the scheduler at {printable(address)!r} has no worker after {timeout_s:g} s; "
            "start one (dask worker ADDRESS)"
        ) from None
    return client, None


def _within(limit_s: float, connect: Callable, address: str):
    """`connect()` given `limit_s` in all: dask reads the peer's handshake with no deadline
    of its own (a TLS or websocket peer that accepts and stays silent would hold it)."""
    import threading

    done: dict = {}

    def run() -> None:
        try:
            done["client"] = connect()
        except BaseException as exc:  # handed to the caller below
            done["error"] = exc

    thread = threading.Thread(target=run, name="dask connect", daemon=True)
    thread.start()
    thread.join(limit_s)
    if thread.is_alive():
        raise InvalidInput(
            f"dask: the peer at {printable(address)!r} did not finish Dask's handshake within "
            f"{limit_s:g} s: it is not a Dask scheduler, or not one that answers"
        )
    if "error" in done:
        raise done["error"]
    return done["client"]
