"""Careless calls of the Python API raise CeilingError naming the argument (its Python name),
before any work; the same checks on the command line name the flag."""

from __future__ import annotations

import pytest

import ceiling
from ceiling.api.arguments import fits, said_type
from ceiling.errors import CeilingError

SPEC = {"spec": "h100-sxm"}

CARELESS = [
    ("plan", ("llama-3-8b", 8), {**SPEC, "seq": "x"}, "seq must be an integer"),
    ("plan", (None, 8), SPEC, "model must be a string"),
    ("plan", ("llama-3-8b", "x"), SPEC, "gpus must be between 1"),
    ("plan", ("llama-3-8b", 8), {"spec": 5}, "spec must be a string or None"),
    ("plan", ("llama-3-8b", 8), {**SPEC, "top": 0}, "top must be ≥ 1"),
    ("plan", ("llama-3-8b", 8), {**SPEC, "intra_bw": 1e-300}, "intra_bw must be between"),
    ("plan", ("llama-3-8b", 8), {**SPEC, "fixed": "d=2,d=4"}, "fixed: d is given twice"),
    ("plan", (), {}, "plan(): missing a required argument: 'model'"),
    ("amdahl", (), {"ns": -1}, "ns must be a list of numbers"),
    ("amdahl", (0.9,), {"ns": ["a"]}, "ns must be a list of numbers"),
    ("amdahl", ("x",), {}, "parallel must be a number"),
    ("gustafson", (0.1,), {"ns": [True]}, "ns must be a list of numbers"),
    ("roofline", (5,), {}, "ops must be a list of strings or a string"),
    ("roofline", (None,), {}, "ops must be"),
    ("trace", (None,), {}, "path must be a trace file or folder"),
    ("trace", (5,), {}, "path must be a trace file or folder"),
    ("report", (), {"gpus": "x"}, "gpus must be an integer or None"),
    ("report", (), {"gpus": 0}, "gpus must be ≥ 1"),
    ("decode", (None,), SPEC, "model must be a string"),
    ("decode", ("gpt:tiny",), {**SPEC, "measure": True}, "measure compares"),
    ("decode", ("gpt:tiny",), {"measure": True, "tp": 2}, "measure runs on one device: drop tp"),
    ("fit", ([1, 2, 4], [1, 0.6, 0.4]), {"predict": "x"}, "predict must be a list of numbers"),
    ("bench.memory", (), {"elements": -1}, "elements must be ≥ 1"),
    ("bench.comm", (), {"workers": "x"}, "workers must be an integer"),
    ("bench.comm", (), {"timeout_s": -1}, "timeout_s must be a positive number"),
    ("bench.matmul", (), {"dtypes": 5}, "dtypes must be a list of strings"),
    ("profile", (None,), {}, "profile(): missing a required argument: 'batch'"),
]


def _function(name: str):
    f = ceiling
    for part in name.split("."):
        f = getattr(f, part)
    return f


@pytest.mark.parametrize(
    "name, args, kwargs, words", CARELESS, ids=[f"{c[0]}-{i}" for i, c in enumerate(CARELESS)]
)
def test_a_careless_call_names_the_argument(name, args, kwargs, words):
    with pytest.raises(CeilingError) as raised:
        _function(name)(*args, **kwargs)
    message = str(raised.value)
    assert words in message and "--" not in message and "\n" not in message, message


def test_a_wrong_type_is_also_a_type_error_to_code_that_catches_one():
    with pytest.raises(TypeError):
        ceiling.plan("llama-3-8b", 8, spec="h100-sxm", seq="x")


@pytest.mark.parametrize(
    "argv, said",
    [
        (["plan", "llama-3-8b", "--gpus", "8", "--spec", "h100-sxm", "--top", "0"], "--top must"),
        (
            ["plan", "llama-3-8b", "-n", "8", "--spec", "h100-sxm", "--fixed", "d=2,d=4"],
            "--fixed: d is given twice",
        ),
        (
            ["plan", "llama-3-8b", "-n", "8", "--spec", "h100-sxm", "--intra-bw", "1e-300"],
            "--intra-bw must be between",
        ),
        (
            ["decode", "gpt:tiny", "--measure", "--tp", "2"],
            "--measure runs on one device: drop --tp",
        ),
        (
            ["decode", "gpt:tiny", "--measure", "--spec", "h100-sxm"],
            "drop --spec (or pass --profile)",
        ),
    ],
)
def test_the_same_checks_name_flags_on_the_command_line(cli, argv, said):
    code, out, err = cli(*argv)
    assert code == 2 and out == "" and err.count("\n") == 1, err
    assert said in err, err


@pytest.mark.parametrize(
    "value, hint, ok",
    [
        (3, int, True),
        (True, int, False),
        (3.0, int, False),
        (3, float, True),
        ("a", str | None, True),
        (None, str | None, True),
        ([1, 2], list[int], True),
        ((1, "x"), list[int], False),
        ("x", list[str], False),
        ("x", str | list[str], True),
        ((1, 2, 3), tuple[int, int, int], True),
        (print, "callable", True),
    ],
)
def test_an_annotation_is_read_as_a_python_user_means_it(value, hint, ok):
    from collections.abc import Callable

    hint = Callable if hint == "callable" else hint
    assert fits(value, hint) is ok


def test_an_annotation_in_words():
    from collections.abc import Iterable

    assert said_type(int | None) == "an integer or None"
    assert said_type(Iterable[int] | int | None) == "a list of integers or an integer or None"
