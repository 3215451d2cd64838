"""`ceiling trace` reads a trace without loading torch (seconds and ~200 MB, more than a small
trace costs to read) unless it has a call neither the plain-Python rules (`trace.op_rules`,
tests/test_trace_op_rules.py) nor an earlier read have costed: a trace without shapes never
needs it; a call left to the replay is replayed once, and the memo of those costs lets the
next read of the same call go without."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import astuple
from pathlib import Path

import pytest

from ceiling.trace import op_cost
from ceiling.trace.analyze import analyze
from patience import HANG_S

DATA = Path(__file__).parent / "data" / "traces-real"
NO_SHAPES = DATA / "gp100_gpu_annotations.json.gz"

# The command as a user runs it, then what it loaded and what it answered
RUN = """
import io, json, sys, contextlib
from ceiling.cli.app import main
answers = []
for path in sys.argv[1:]:
    with contextlib.redirect_stdout(io.StringIO()) as out:
        try:
            main(["trace", path, "--json"])
        except SystemExit as exc:
            assert not exc.code, exc.code
    answers.append(json.loads(out.getvalue()))
print(json.dumps({"torch": "torch" in sys.modules, "answer": answers[-1]}))
"""


@pytest.fixture
def fresh_memo(tmp_path, monkeypatch):
    """An empty memo, in a cache folder of the test's own."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    for name, empty in (("_MEMO", {}), ("_RULED", {}), ("_NEW", set()), ("_LOADED", set())):
        monkeypatch.setattr(op_cost, name, empty)
    return tmp_path / "cache"


def _run(cache: Path, script: str, *argv: str) -> dict:
    env = {"XDG_CACHE_HOME": str(cache), "PATH": "/usr/bin:/bin"}
    src = str(Path(op_cost.__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", script, *argv],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": src},
        timeout=HANG_S,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


# a call the plain-Python rules (`trace.op_rules`) leave to the replay
ADDCDIV = {
    "Input Dims": [[8, 16], [8, 16], [8, 16], []],
    "Input type": ["float", "float", "float", "Scalar"],
    "Concrete Inputs": ["", "", "", "1"],
}
COST_RUN = """
import json, sys
from dataclasses import astuple
from ceiling.trace import op_cost
c = op_cost.cost("aten::addcdiv", json.loads(sys.argv[1]))
print(json.dumps({"torch": "torch" in sys.modules, "cost": astuple(c)}))
"""


def test_a_call_replayed_once_is_read_from_the_memo_without_torch(fresh_memo):
    first = op_cost.cost("aten::addcdiv", ADDCDIV)  # this process has torch: replayed here
    assert (first.flops, first.category) == (2.0 * 8 * 16, "elementwise")
    op_cost.save_memo()
    assert op_cost.memo_path().parent == fresh_memo / "ceiling"
    assert op_cost.memo_path().exists()
    ran = _run(fresh_memo, COST_RUN, json.dumps(ADDCDIV))
    assert ran == {"torch": False, "cost": list(astuple(first))}


def test_a_trace_without_shapes_is_read_without_torch(fresh_memo):
    ran = _run(fresh_memo, RUN, str(NO_SHAPES))
    assert ran["torch"] is False
    assert ran["answer"] == json.loads(json.dumps(analyze(NO_SHAPES).to_dict()))


def test_a_memo_that_cannot_be_read_is_counted_again(fresh_memo):
    path = op_cost.memo_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"aten::addcdiv": [1, 2]}')  # not a cost: written by something else
    c = op_cost.cost("aten::addcdiv", ADDCDIV)
    assert (c.flops, c.category, c.dtype) == (2 * 8 * 16, "elementwise", "fp32")
    # a call recorded with more text than a memo entry may hold is costed, not kept
    wide = {"Input Dims": [[8, 16]] * 400, "Input type": ["float"] * 400}
    assert op_cost.cost("aten::cat", wide).category == "memory"
    op_cost.save_memo()
    stored = json.loads(path.read_text())
    assert list(stored) == [next(k for k in stored if k.startswith("aten::addcdiv\0"))]


# each committed real trace that recorded shapes, read cold (an empty memo), critical path too
COLD_RUN = """
import json, sys
from ceiling.trace.analyze import analyze
r = analyze(sys.argv[1], critical_path=True)
print(json.dumps({"torch": "torch" in sys.modules, "flops": r.ranks[0].ops[0].flops}))
"""


@pytest.mark.parametrize(
    "name",
    [
        "mi250_minitoy_rocm6.json.gz",
        "v100_resnet50_kineto_pt18.json.gz",
        "sampled_2rank/rank-0.json.gz",
        "v100_bmm_rank1.json.gz",
    ],
)
def test_a_cold_read_of_a_shaped_real_trace_never_loads_torch(fresh_memo, name):
    ran = _run(fresh_memo, COLD_RUN, str(DATA / name))
    assert ran["torch"] is False
    assert ran["flops"] == analyze(DATA / name).ranks[0].ops[0].flops
