"""The local pool's memory budget: which ranks go to workers and which this process reads, so
that the process tree holds at most twice what reading the ranks one after another holds."""

from __future__ import annotations

import itertools
import os

import pytest

from ceiling.errors import WorkerFailed
from ceiling.trace.pool_budget import (
    EXPANSION,
    LEARN_FROM_BYTES,
    TRACKER_BYTES,
    TREE_OVER_SERIAL,
    WORKER_BYTES,
    MemoryBudget,
    admits,
)
from ceiling.trace.rank_pool import Workers, budgeted_map, json_bytes, worker_context

MiB = 2**20


def test_a_rank_costs_a_worker_and_its_read_and_the_budget_is_the_serial_read_less_the_tracker():
    b = MemoryBudget(own_bytes=60 * MiB, largest_json_bytes=30 * MiB)
    assert b.cost(30 * MiB) == WORKER_BYTES + 1.5 * 30 * MiB == 71 * MiB
    assert b.limit() == (TREE_OVER_SERIAL - 1) * (60 + 45) * MiB - TRACKER_BYTES == 93 * MiB
    assert admits([], 71 * MiB, b.limit(), slots=3)
    assert not admits([71 * MiB], 71 * MiB, b.limit(), slots=3)  # two would pass 93 MiB
    assert admits([71 * MiB], 22 * MiB, b.limit(), slots=3)  # a small one fits beside
    assert not admits([], 1 * MiB, b.limit(), slots=0)  # no worker slot: read here


def test_the_workers_reports_replace_the_defaults_then_only_raise_them():
    b = MemoryBudget(own_bytes=60 * MiB, largest_json_bytes=30 * MiB)
    b.learn(10 * MiB, start_bytes=20 * MiB, growth_bytes=15 * MiB)
    assert (b.expansion, b.worker_bytes) == (1.5, 20 * MiB)  # below the defaults: taken
    b.learn(10 * MiB, start_bytes=19 * MiB, growth_bytes=12 * MiB)
    assert (b.expansion, b.worker_bytes) == (1.5, 20 * MiB)  # the largest seen kept
    b.learn(10 * MiB, start_bytes=22 * MiB, growth_bytes=30 * MiB)
    assert (b.expansion, b.worker_bytes) == (3.0, 22 * MiB)
    assert b.cost(10 * MiB) == 52 * MiB and b.limit() == 60 * MiB + 90 * MiB - TRACKER_BYTES


class _FakePool:
    """Workers that answer in the order a fixed script says (no processes): each call to
    `finished` ends the oldest running worker when it blocks, or every other call when not."""

    def __init__(self, budget: MemoryBudget, sizes: list[int]) -> None:
        self.budget, self.sizes = budget, sizes
        self.running: dict = {}
        self.calls = itertools.count()
        self.started: list = []
        self.most_costs = 0.0
        self.most_workers = 0

    def start(self, work, item):
        handle = _FakeWorker(work, item)
        self.running[handle] = self.budget.cost(self.sizes[item])
        self.started.append(item)
        self.most_costs = max(self.most_costs, sum(self.running.values()))
        self.most_workers = max(self.most_workers, len(self.running))
        return handle

    def finished(self, handles, block):
        if handles and (block or next(self.calls) % 2):
            del self.running[handles[0]]
            return [handles[0]]
        return []


class _FakeWorker:
    def __init__(self, work, item) -> None:
        self.work, self.item = work, item

    def result(self):
        return self.work(self.item), None


@pytest.mark.parametrize("slots", [0, 1, 3])
@pytest.mark.parametrize(
    "sizes_mib",
    [[30] * 8, [1, 50, 2, 2, 40, 3, 1, 1], [500], [0, 0, 0, 0, 0, 0]],
)
def test_every_rank_is_read_once_in_order_and_the_workers_stay_within_the_budget(slots, sizes_mib):
    sizes = [s * MiB for s in sizes_mib]
    budget = MemoryBudget(own_bytes=60 * MiB, largest_json_bytes=max(sizes))
    pool, here, progress = _FakePool(budget, sizes), [], []

    def work(i):
        if i not in pool.started:
            here.append(i)
        return i * i

    items = list(range(len(sizes)))
    out = budgeted_map(work, items, sizes, budget, slots, pool, lambda d, t: progress.append(d))
    assert out == [i * i for i in items]
    assert sorted(here + pool.started) == items  # each rank read once, here or in a worker
    assert progress == list(range(1, len(items) + 1))
    assert pool.most_workers <= slots and pool.most_costs <= budget.limit()
    # the tree: this process reading its largest rank, the tracker, the workers
    serial = budget.own_bytes + budget.expansion * max(sizes)
    assert serial + TRACKER_BYTES * bool(pool.started) + pool.most_costs <= 2 * serial


def test_a_rank_larger_than_the_budget_is_read_here_and_the_rest_still_go_to_workers():
    sizes = [2000 * MiB, 1 * MiB, 1 * MiB]
    budget = MemoryBudget(own_bytes=60 * MiB, largest_json_bytes=max(sizes))
    budget.own_bytes = 0  # a budget of nothing but the largest read: it alone cannot fit
    pool = _FakePool(budget, sizes)
    assert not admits([], budget.cost(sizes[0]), budget.limit(), 2)
    out = budgeted_map(lambda i: -i, [0, 1, 2], sizes, budget, 2, pool, None)
    assert out == [0, -1, -2] and 0 not in pool.started and pool.started


def _real(sizes: list[int]) -> MemoryBudget:
    return MemoryBudget(own_bytes=4000 * MiB, largest_json_bytes=max(sizes))


def test_a_workers_error_is_raised_here_and_its_memory_is_learnt():
    sizes = [1000, 1000, 1000]
    budget = _real(sizes)
    with Workers(worker_context()) as pool:
        assert budgeted_map(int, ["7", "8", "9"], sizes, budget, 2, pool, None) == [7, 8, 9]
    assert budget.learnt and 5 * MiB < budget.worker_bytes < 200 * MiB
    with Workers(worker_context()) as pool, pytest.raises(ValueError, match="invalid literal"):
        budgeted_map(int, ["x", "8", "9"], sizes, _real(sizes), 2, pool, None)


def test_a_worker_that_dies_is_named():
    sizes = [1000]
    died = r"^3: the worker process reading it ended without an answer \(exit code 3\)"
    with Workers(worker_context()) as pool, pytest.raises(WorkerFailed, match=died):
        budgeted_map(os._exit, [3], sizes, _real(sizes), 1, pool, None)


def test_a_rank_files_json_bytes_are_read_from_its_size_or_gzip_trailer(tmp_path):
    import gzip

    plain = tmp_path / "a.json"
    plain.write_text("x" * 5000)
    packed = tmp_path / "a.json.gz"
    packed.write_bytes(gzip.compress(b"y" * 300_000))
    assert json_bytes(str(plain)) == 5000
    assert json_bytes(str(packed)) == 300_000
    assert json_bytes(str(tmp_path / "missing.json")) == 0
    assert json_bytes(str(tmp_path)) == 0  # a folder: its reader says what is wrong


def test_a_small_rank_teaches_the_workers_memory_but_not_the_expansion():
    # a 1 MiB rank whose read grew 5 MiB is the reader's fixed working memory, not 5x its
    # JSON: the default expansion stays until a rank of LEARN_FROM_BYTES or more reports
    b = MemoryBudget(own_bytes=100 * MiB, largest_json_bytes=30 * MiB)
    b.learn(1 * MiB, start_bytes=24 * MiB, growth_bytes=5 * MiB)
    assert b.learnt and b.worker_bytes == 24 * MiB
    assert b.expansion == EXPANSION and not b.learnt_expansion
    b.learn(LEARN_FROM_BYTES, start_bytes=25 * MiB, growth_bytes=LEARN_FROM_BYTES * 13 // 10)
    assert b.expansion == pytest.approx(1.3) and b.worker_bytes == 25 * MiB
