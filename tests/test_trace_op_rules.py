"""The plain-Python op costs (`trace.op_rules`) equal the replay on torch's meta device
(`trace.op_replay`) for every distinct op call in the committed real traces, FLOPs and bytes
exact; and a first read of a real trace with shapes (no memo) no longer loads torch."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from dataclasses import astuple
from pathlib import Path

import pytest

from ceiling.trace import op_cost, op_replay, op_rules
from ceiling.trace.analyze import analyze

DATA = Path(__file__).parent / "data" / "traces-real"
SHAPED = ["mi250_minitoy_rocm6.json.gz", "sampled_2rank", "v100_resnet50_kineto_pt18.json.gz"]


def _recorded() -> dict:
    """Each distinct aten call of every committed real trace, [name, Input Dims, Input type,
    Concrete Inputs, Input Strides] as recorded, by trace (op_calls.json.gz: collected from
    the traces by `calls_of`; reading them all takes longer than this test should)."""
    with gzip.open(DATA / "op_calls.json.gz", "rt") as f:
        return json.load(f)


def calls_of(path: Path) -> list:
    """A trace's distinct aten calls, as op_calls.json.gz keeps them."""
    with gzip.open(path, "rt") as f:
        events = json.load(f)["traceEvents"]
    seen = {}
    for e in events:
        name = e.get("name")
        if isinstance(name, str) and name.startswith("aten::") and e.get("ph") == "X":
            a = e.get("args", {})
            call = [name, *(a.get(k) for k in ("Input Dims", "Input type"))]
            call += [a.get("Concrete Inputs"), a.get("Input Strides")]
            seen.setdefault(json.dumps(call), call)
    return list(seen.values())


def test_the_rule_table_is_what_torch_and_the_counting_rules_say():
    table = op_rules._table()
    assert json.loads(json.dumps(op_replay.rule_table(table))) == table, (
        "regenerate with op_replay.write_rule_table('src/ceiling/trace/op_rules.json', names)"
    )


def test_the_kept_calls_are_the_calls_of_the_smallest_trace():
    # the list stays what the traces hold (the larger ones take seconds to read)
    path = DATA / "mi250_minitoy_rocm6.json.gz"
    assert calls_of(path) == _recorded()[path.name]


def _expected(name, dims, types, concrete, strides):
    if _shaped(dims, types):
        replayed = op_replay.replayed(name, dims, types, concrete, strides)
    else:
        replayed = op_replay.kind_only(name)
    return None if replayed is None else astuple(replayed)


def _shaped(dims, types) -> bool:
    return isinstance(dims, list) and isinstance(types, list) and len(dims) == len(types)


@pytest.mark.parametrize("trace", sorted(_recorded()))
def test_every_call_costs_what_the_replay_gives(trace):
    calls = _recorded()[trace]
    assert calls
    for name, dims, types, concrete, strides in calls:
        shaped = _shaped(dims, types)
        ruled = op_rules.rule_cost(name, dims if shaped else None, types, concrete, strides)
        assert ruled is not op_rules.UNSURE, (name, dims, types)
        assert ruled == _expected(name, dims, types, concrete, strides), (name, dims, types)


def test_a_call_without_a_rule_is_left_to_the_replay():
    assert op_rules.rule_cost("aten::my_op", [[2]], ["float"], None, None) is op_rules.UNSURE
    # an argument these rules do not model (a rounding mode) is left to the replay too
    call = ("aten::div", [[2, 3], [2, 3], []], ["float", "float", ""], ["", "", "'floor'"], None)
    assert op_rules.rule_cost(*call) is op_rules.UNSURE


def test_a_call_the_meta_kernel_refuses_gets_the_op_kind_alone():
    # shapes that do not broadcast: FLOPs and bytes unknown, as the replay answers
    call = ("aten::add", [[2, 3], [4, 3], []], ["float", "float", "Scalar"], None, None)
    refused = op_rules.rule_cost(*call)
    assert refused == astuple(op_replay.replayed(*call))
    assert refused[0] is None and refused[2] == "elementwise"


RUN = """
import io, json, sys, contextlib
from ceiling.cli.app import main
with contextlib.redirect_stdout(io.StringIO()) as out:
    try:
        main(["trace", sys.argv[1], "--json"])
    except SystemExit as exc:
        assert not exc.code, exc.code
print(json.dumps({"torch": "torch" in sys.modules, "answer": json.loads(out.getvalue())}))
"""


@pytest.mark.parametrize("trace", SHAPED)
def test_a_first_read_of_a_shaped_real_trace_does_not_load_torch(trace, tmp_path, monkeypatch):
    cache = tmp_path / "cache"  # an empty memo
    src = str(Path(op_cost.__file__).resolve().parents[2])
    env = {"XDG_CACHE_HOME": str(cache), "PATH": "/usr/bin:/bin", "PYTHONPATH": src}
    ran = subprocess.run(
        [sys.executable, "-c", RUN, str(DATA / trace)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    got = json.loads(ran.stdout.strip().splitlines()[-1])
    assert got["torch"] is False
    # the same answer as costing every call by the replay, as before
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "replayed"))
    for name, empty in (("_MEMO", {}), ("_RULED", {}), ("_NEW", set()), ("_LOADED", set())):
        monkeypatch.setattr(op_cost, name, empty)
    monkeypatch.setattr(op_rules, "rule_cost", lambda *a: op_rules.UNSURE)
    assert got["answer"] == json.loads(json.dumps(analyze(DATA / trace).to_dict()))
