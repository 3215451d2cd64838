"""Collective communication: algorithm and bus bandwidth, and the latency–bandwidth model.

Conventions follow nccl-tests (doc/PERFORMANCE.md there). `bytes` is the size of the
largest per-rank buffer: the reduced buffer for all-reduce, the gathered output for
all-gather, the input for reduce-scatter, the whole send buffer for all-to-all.
algbw = bytes / time. busbw rescales algbw so that it is comparable with a link's speed
whatever the number of ranks n: a ring all-reduce moves 2(n-1)/n of the buffer over each
link, all-gather / reduce-scatter / all-to-all (n-1)/n, broadcast and reduce 1.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ceiling.errors import InvalidInput

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")


def bus_factor(op: str, ranks: int) -> float:
    """busbw / algbw for a collective over `ranks` ranks."""
    if ranks < 1:
        raise InvalidInput(f"a collective needs at least 1 rank, got {ranks}")
    return float(_link_share(op, ranks))


def _link_share(op: str, n):
    """Share of the buffer each link carries (n may be an array): the ring's 2(n-1)/n for an
    all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for the rest."""
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    if op in ("broadcast", "reduce", "send_recv"):
        return 1.0
    raise InvalidInput(f"unknown collective {op!r}; known: {', '.join(OPS)}")


def algbw_bytes_per_s(nbytes: float, time_s: float) -> float:
    if time_s <= 0:
        raise InvalidInput(f"time must be positive, got {time_s}")
    return nbytes / time_s


def busbw_bytes_per_s(op: str, nbytes: float, time_s: float, ranks: int) -> float:
    return algbw_bytes_per_s(nbytes, time_s) * bus_factor(op, ranks)


@dataclass(frozen=True)
class LatencyBandwidthFit:
    """time(bytes) = latency_s + bytes / bandwidth_bytes_per_s (the α–β model)."""

    latency_s: float
    bandwidth_bytes_per_s: float | None  # None when time does not grow with size
    r2: float


def fit_latency_bandwidth(
    sizes_bytes: Sequence[float], times_s: Sequence[float]
) -> LatencyBandwidthFit:
    """Least-squares line through (bytes, time), weighted by 1/time so that small messages
    (whose times are tiny) shape the latency as much as large ones shape the bandwidth."""
    import numpy as np

    if len(sizes_bytes) != len(times_s) or len(sizes_bytes) < 2:
        raise InvalidInput("need at least two (size, time) pairs to fit latency and bandwidth")
    b = np.asarray(sizes_bytes, dtype=float)
    t = np.asarray(times_s, dtype=float)
    if np.any(t <= 0):
        raise InvalidInput("times must be positive")
    w = 1.0 / t
    a = np.stack([np.ones_like(b), b], axis=1) * w[:, None]
    (alpha, beta), *_ = np.linalg.lstsq(a, t * w, rcond=None)
    pred = alpha + beta * b
    ss_res = float(np.sum((t - pred) ** 2))
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    r2 = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    bw = 1.0 / beta if beta > 0 and math.isfinite(beta) else None
    return LatencyBandwidthFit(latency_s=max(float(alpha), 0.0), bandwidth_bytes_per_s=bw, r2=r2)


# ---- time of one collective: the α–β model ------------------------------------------------
# A step that moves b bytes over a link costs α + b/β (Hockney 1994). The ring algorithms
# (Thakur, Rabenseifner & Gropp 2005, "Optimization of Collective Communication Operations
# in MPICH", section 4; NCCL's ring) take n-1 steps per pass and move (n-1)/n of the buffer
# over each link per pass; an all-reduce is two passes (reduce-scatter, then all-gather).
# `bw` is the achieved bus bandwidth (link × collective efficiency), `lat` the α of one step.
# Arguments may be numpy arrays (the planner evaluates many plans at once).


def ring_allreduce_s(nbytes, n, bw, lat):
    """Ring all-reduce of an `nbytes` buffer over n ranks: 2(n-1)/n·b/β + 2(n-1)·α."""
    import numpy as np

    n = np.asarray(n, dtype=float)
    return np.where(n > 1, _link_share("all_reduce", n) * nbytes / bw + 2 * (n - 1) * lat, 0.0)


def tree_allreduce_s(nbytes, n, bw, lat):
    """Tree all-reduce (reduce up a binary tree, broadcast down; pipelined, as NCCL's double
    binary tree, Sanders, Speck & Träff 2009): 2·⌈log2 n⌉·α + 2·b/β. Fewer latency steps
    than the ring, more bytes per link: it wins for small buffers."""
    import numpy as np

    n = np.asarray(n, dtype=float)
    steps = np.ceil(np.log2(np.maximum(n, 1.0)))
    return np.where(n > 1, 2 * steps * lat + 2 * nbytes / bw, 0.0)


def allreduce_s(nbytes, n, bw, lat):
    """All-reduce by the faster of ring and tree for this size, as NCCL's tuner chooses."""
    import numpy as np

    return np.minimum(ring_allreduce_s(nbytes, n, bw, lat), tree_allreduce_s(nbytes, n, bw, lat))


def ring_gather_s(nbytes, n, bw, lat):
    """Ring all-gather or reduce-scatter (`nbytes`: the whole buffer): (n-1)/n·b/β + (n-1)·α."""
    import numpy as np

    n = np.asarray(n, dtype=float)
    return np.where(n > 1, _link_share("all_gather", n) * nbytes / bw + (n - 1) * lat, 0.0)


def all_to_all_s(nbytes, n, bw, lat):
    """Pairwise all-to-all of an `nbytes` send buffer: each rank keeps 1/n and exchanges the
    rest with the n-1 others in n-1 steps — the cost of a ring all-gather (same sources)."""
    return ring_gather_s(nbytes, n, bw, lat)


def p2p_s(nbytes, bw, lat):
    """One point-to-point send: α + b/β."""
    return lat + nbytes / bw
