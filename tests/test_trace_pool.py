"""The local pool that reads a job's rank files: a bounded number of ranks in flight, workers
that load only the trace reader, and only each rank's summary sent back. (The memory budget
that bounds them: tests/test_trace_pool_budget.py.)"""

from __future__ import annotations

import gzip
import io
import json
import pickle
from pathlib import Path

import pytest

from ceiling.trace.analyze import analyze
from ceiling.trace.rank_pool import Workers, bounded_map, worker_context
from ceiling.trace.rank_summary import rank_summary
from ceiling.trace.reader import read_trace

DATA = Path(__file__).parent / "data" / "traces-real" / "sampled_2rank"


class _LazyPool:
    """An executor whose work runs when its result is asked for; it counts the submissions
    not yet collected."""

    def __init__(self) -> None:
        self.outstanding = 0
        self.most = 0
        self.ran: list = []

    def submit(self, work, item):
        self.outstanding += 1
        self.most = max(self.most, self.outstanding)
        return _Lazy(self, work, item)


class _Lazy:
    def __init__(self, pool: _LazyPool, work, item) -> None:
        self.pool, self.work, self.item = pool, work, item

    def result(self):
        self.pool.outstanding -= 1
        self.pool.ran.append(self.item)
        return self.work(self.item)


@pytest.mark.parametrize("in_flight", [1, 2, 3, 8])
def test_no_more_ranks_are_in_flight_than_the_bound(in_flight):
    pool, seen = _LazyPool(), []
    out = bounded_map(
        pool.submit, lambda x: x * x, range(7), in_flight, lambda d, t: seen.append((d, t))
    )
    assert out == [x * x for x in range(7)]  # in the items' order
    assert pool.most == min(in_flight, 7)
    assert pool.ran == list(range(7)) and pool.outstanding == 0
    assert seen == [(d, 7) for d in range(1, 8)]


def test_an_empty_bound_is_refused():
    with pytest.raises(ValueError, match="in_flight"):
        bounded_map(_LazyPool().submit, abs, [1], 0, None)


class _Classes(pickle.Pickler):
    """A pickler that notes the class of everything it writes."""

    def __init__(self, file) -> None:
        super().__init__(file)
        self.seen: set[str] = set()

    def reducer_override(self, obj):
        self.seen.add(type(obj).__name__)
        return NotImplemented


def test_a_worker_sends_back_the_rank_summary_not_its_events():
    path = DATA / "rank-0.json.gz"
    rank, summary = rank_summary(str(path), None, None)
    assert rank == 0 and type(summary).__name__ == "RankResult"
    pickler = _Classes(buf := io.BytesIO())
    pickler.dump((rank, summary))
    assert not pickler.seen & {"Event", "RankTrace", "Prepared", "Links"}
    flat = pickle.Pickler(events := io.BytesIO())
    flat.fast = True  # each event whole (the names and keys they share written each time)
    flat.dump(read_trace(path).events)
    assert len(buf.getvalue()) * 5 < len(events.getvalue())  # a fifth of the events at most


def test_workers_load_neither_torch_nor_matplotlib_and_report_their_memory():
    import torch  # noqa: F401  (loaded here: the workers must not inherit it)

    with Workers(worker_context()) as pool:
        worker = pool.start(eval, "sorted(__import__('sys').modules)")
        assert pool.finished([worker], block=True) == [worker]
        loaded, (start, growth) = worker.result()
    assert "torch" not in loaded and "matplotlib" not in loaded
    assert "ceiling.trace.rank_pool" in loaded  # what the worker runs, and little else
    assert 5 * 2**20 < start < 200 * 2**20 and growth >= 0


def _ranks(folder: Path, count: int) -> Path:
    """`count` rank files made from the two real ranks, each with its own rank number."""
    sources = []
    for name in ("rank-0.json.gz", "rank-1.json.gz"):
        with gzip.open(DATA / name, "rt") as f:
            sources.append(json.load(f))
    for r in range(count):
        doc = dict(sources[r % 2])
        doc["distributedInfo"] = {**doc.get("distributedInfo", {}), "rank": r, "world_size": count}
        with gzip.open(folder / f"rank-{r}.json.gz", "wt") as f:
            json.dump(doc, f)
    return folder


def test_more_ranks_than_workers_give_the_serial_answer(tmp_path):
    folder = _ranks(tmp_path, 5)
    (folder / "0-settings.json").write_text('{"lr": 0.1}')  # first, and no trace
    done: list[int] = []
    pooled = analyze(folder, workers=2, progress=lambda d, t: done.append(d))
    serial = analyze(folder, workers=1)
    assert pooled.to_json() == serial.to_json()
    assert [r.rank for r in pooled.ranks] == [0, 1, 2, 3, 4]
    assert any("1 JSON file(s) in the folder are not traces" in n for n in pooled.notes)
    assert done == [1, 2, 3, 4]  # the first rank read here, once, the others in the pool


def test_a_rank_keeps_each_distinct_shape_list_once_and_no_call_stacks(tmp_path):
    """Ops with equal input shapes share one list (equal values of other types kept apart),
    and what no analysis reads (the call stack) is not kept."""
    import json

    from ceiling.trace.reader import read_trace

    def op(ts, dims, types):
        args = {"Input Dims": dims, "Input type": types, "Call stack": "a.py(1): f" * 50}
        return {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": ts, "dur": 1,
                "pid": 1, "tid": 1, "args": args}  # fmt: skip

    events = [op(0, [[2, 3], [3, 4]], ["float", "float"]),
              op(5, [[2, 3], [3, 4]], ["float", "float"]),
              op(10, [[2.0, 3], [3, 4]], ["float", "float"]),
              op(15, [[True, 3], [3, 4]], ["float", "float"])]  # fmt: skip
    path = tmp_path / "rank0.json"
    path.write_text(json.dumps({"traceEvents": events}))
    ops = sorted(read_trace(path).cpu_ops, key=lambda e: e.start_s)
    dims = [e.args["Input Dims"] for e in ops]
    assert dims[0] is dims[1] and dims[0] == [[2, 3], [3, 4]]
    assert dims[2] is not dims[0] and dims[3] is not dims[0]
    assert type(dims[2][0][0]) is float and dims[3][0][0] is True
    assert ops[0].args["Input type"] is ops[3].args["Input type"]
    assert all("Call stack" not in e.args for e in ops)


def test_copies_of_one_rank_are_numbered_by_file_and_said(tmp_path):
    """Two files that both say rank 0 (copies of one rank's trace) are read as ranks 0 and 1
    of one job, and the note says so and names the files."""
    import shutil

    import ceiling

    src = DATA.parent / "a100_ddp_nccl_rank0.json.gz"
    for name in ("a.json.gz", "b.json.gz"):
        shutil.copy(src, tmp_path / name)
    result = ceiling.trace(tmp_path, workers=1)
    assert [r.rank for r in result.ranks] == [0, 1]
    (note,) = [n for n in result.notes if "files say they are rank 0" in n]
    assert note.startswith("2 files say they are rank 0") and "a.json.gz" in note
    single = ceiling.trace(src)
    assert not any("say they are rank" in n for n in single.notes)
