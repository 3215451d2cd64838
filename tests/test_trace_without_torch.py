"""`ceiling trace` reads a trace without loading torch (seconds and ~200 MB, more than a small
trace costs to read) unless it has shapes no earlier read has costed: a trace without shapes
never needs it; a trace with shapes replays each distinct call once, and the memo of those
costs lets the next read of the same shapes go without."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ceiling.trace import op_cost
from ceiling.trace.analyze import analyze

DATA = Path(__file__).parent / "data" / "traces-real"
NO_SHAPES = DATA / "gp100_gpu_annotations.json.gz"
SHAPED = DATA / "mi250_minitoy_rocm6.json.gz"

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
    for name, empty in (("_MEMO", {}), ("_NEW", set()), ("_LOADED", set())):
        monkeypatch.setattr(op_cost, name, empty)
    return tmp_path / "cache"


def _run(cache: Path, *paths: Path) -> dict:
    env = {"XDG_CACHE_HOME": str(cache), "PATH": "/usr/bin:/bin"}
    src = str(Path(op_cost.__file__).resolve().parents[2])
    out = subprocess.run(
        [sys.executable, "-c", RUN, *map(str, paths)],
        capture_output=True,
        text=True,
        env={**env, "PYTHONPATH": src},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_trace_is_read_without_torch_once_its_shapes_were_costed(fresh_memo):
    first = analyze(SHAPED)  # this process has torch: the shapes are replayed here
    assert op_cost.memo_path().parent == fresh_memo / "ceiling"
    assert op_cost.memo_path().exists()
    shaped = [r for r in first.ranks[0].ops if r.flops]
    assert shaped, "the trace's shapes were costed"
    ran = _run(fresh_memo, NO_SHAPES, SHAPED)
    assert ran["torch"] is False
    assert ran["answer"] == json.loads(json.dumps(first.to_dict()))


def test_a_memo_that_cannot_be_read_is_counted_again(fresh_memo):
    path = op_cost.memo_path()
    path.parent.mkdir(parents=True)
    path.write_text('{"aten::mm": [1, 2]}')  # not a cost: written by something else
    op = {"Input Dims": [[8, 16], [16, 4]], "Input type": ["float", "float"]}
    c = op_cost.cost("aten::mm", op)
    assert (c.flops, c.category, c.dtype) == (2 * 8 * 16 * 4, "matmul", "fp32")
    # a call recorded with more text than a memo entry may hold is costed, not kept
    wide = {"Input Dims": [[8, 16]] * 400, "Input type": ["float"] * 400}
    assert op_cost.cost("aten::cat", wide).category == "memory"
    op_cost.save_memo()
    stored = json.loads(path.read_text())
    assert list(stored) == [next(k for k in stored if k.startswith("aten::mm\0"))]
