import json

import numpy as np
import pytest

from ceiling.errors import InvalidInput
from ceiling.measure import repeat

_calls = {"n": 0}


def drifting():
    """Differs in the last bits on every call, like a reduction whose order changes."""
    _calls["n"] += 1
    return np.array([1.0, 1.0 + _calls["n"] * 2**-20], dtype=np.float32)


def steady():
    return np.arange(6, dtype=np.float64).reshape(2, 3)


def test_identical_results_are_reported_identical():
    raw = repeat.run_repeat("test_repeat:steady", 3, [1, 2])
    assert [(g["deterministic_algorithms"], g["threads"]) for g in raw["groups"]] == [
        (False, 1),
        (False, 2),
        (True, 1),
        (True, 2),
    ]
    assert all(g["identical_across_runs"] and g["max_abs_deviation"] == 0 for g in raw["groups"])
    assert raw["shape"] == [2, 3]
    assert raw["dtype"] == "float64"
    assert repeat.verdict(raw)[0].startswith("bitwise identical")


def test_drifting_results_give_the_exact_deviation():
    _calls["n"] = 0
    raw = repeat.run_repeat("test_repeat:drifting", 4, [1], check_deterministic=False)
    (g,) = raw["groups"]
    assert g["distinct_results"] == 4
    assert not g["identical_across_runs"]
    # first output 1 + 2**-20, last 1 + 4 * 2**-20: three steps apart
    assert g["max_abs_deviation"] == 3 * 2**-20
    assert g["max_rel_deviation"] == pytest.approx(3 * 2**-20 / (1 + 2**-20))
    assert any("not reproducible run to run" in line for line in repeat.verdict(raw))


def test_bad_arguments():
    with pytest.raises(InvalidInput, match="at least 2 runs"):
        repeat.run_repeat("matmul", 1, [1])
    with pytest.raises(InvalidInput, match="unknown target"):
        repeat.run_repeat("sorting", 3, [1])


def test_cli_repeat_matmul_json(cli):
    code, out, err = cli("repeat", "matmul", "--runs", "3", "--threads", "1", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["shape"] == [384, 384]
    # one thread, one blocking: the same bits every time
    assert all(g["identical_across_runs"] for g in doc["groups"])
    assert doc["verdict"]


def test_cli_repeat_non_numeric_target_is_one_line(cli):
    code, _, err = cli("repeat", "os:getcwd", "--runs", "2")
    assert code == 2
    assert "must return numbers" in err
