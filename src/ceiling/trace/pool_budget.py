"""How many of a job's rank files the local pool reads at once: as many as fit a memory
budget, so that the whole process tree holds at most `TREE_OVER_SERIAL` (2) times what
reading the ranks one after another in this process holds.

Read one after another, the ranks cost this process's own memory, P, and one rank's read at a
time, G (its events and analysis; the largest rank's counts). In the pool this process still
reads ranks itself: each one that no worker can take within the budget, so work never waits
on memory. A worker holds a fresh interpreter with the trace reader, W, and its rank's read,
G_i; running workers add multiprocessing's resource tracker, T. The tree then holds at most
P + G + T + Σ (W + G_i) over the workers' ranks, which is within 2 (P + G) while the workers'
sum Σ (W + G_i) stays within P + G − T: the budget.

G is estimated from the rank's JSON bytes times the reader's expansion, and W is a measured
default, until the first workers report what they really took; then their figures (the
largest seen) are used for every rank after.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

MiB = 2**20
TREE_OVER_SERIAL = 2.0
# A rank's read and analysis at their peak, over its uncompressed JSON (measured: 39 MiB of
# resident memory for the 29 MiB ResNet-50 trace recorded with shapes, 1.33, on CPython 3.11).
EXPANSION = 1.5
# A worker's resident memory before it reads: a fresh interpreter with the trace reader
# (measured: 26 MiB).
WORKER_BYTES = 26 * MiB
# multiprocessing's resource tracker, started with the first worker.
TRACKER_BYTES = 12 * MiB
# A rank's growth says nothing of the reader's expansion below this much JSON: a small
# rank's peak is mostly the reader's fixed working memory, which would read as a large
# expansion and starve the large ranks of workers.
LEARN_FROM_BYTES = 4 * MiB


@dataclass
class MemoryBudget:
    """The figures the budget is made of: P (`own_bytes`), the largest rank's JSON bytes,
    and the estimates of W and of G per JSON byte that the workers' reports refine."""

    own_bytes: int
    largest_json_bytes: int
    expansion: float = EXPANSION
    worker_bytes: int = WORKER_BYTES
    learnt: bool = False  # a worker has reported its starting memory
    learnt_expansion: bool = False  # and a rank of LEARN_FROM_BYTES or more its growth

    def cost(self, json_bytes: int) -> float:
        """A worker reading a rank of `json_bytes`: W + G_i."""
        return self.worker_bytes + self.expansion * json_bytes

    def limit(self) -> float:
        """What the workers may hold together: (2 − 1)(P + G) − T."""
        serial = self.own_bytes + self.expansion * self.largest_json_bytes
        return (TREE_OVER_SERIAL - 1.0) * serial - TRACKER_BYTES

    def learn(self, json_bytes: int, start_bytes: int, growth_bytes: int) -> None:
        """A worker's report: its memory before reading a rank of `json_bytes`, and how much
        its peak grew reading it. The largest figures seen replace the defaults (the
        expansion only from ranks of LEARN_FROM_BYTES or more)."""
        self.worker_bytes = start_bytes if not self.learnt else max(self.worker_bytes,
                                                                    start_bytes)  # fmt: skip
        self.learnt = True
        if json_bytes < LEARN_FROM_BYTES:
            return
        expansion = growth_bytes / json_bytes
        self.expansion = expansion if not self.learnt_expansion else max(self.expansion,
                                                                         expansion)  # fmt: skip
        self.learnt_expansion = True


def admits(in_flight: Sequence[float], cost: float, limit: float, slots: int) -> bool:
    """Whether a worker may start on a rank costing `cost` beside those costing `in_flight`:
    while a worker slot is free and their sum stays within `limit`. A rank refused is read
    by this process itself, so none waits for memory and none is refused for good, however
    large."""
    return len(in_flight) < slots and sum(in_flight) + cost <= limit
