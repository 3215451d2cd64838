"""A user's own MODULE:CALLABLE that fails is shown as the user's error: their message and the
last frame of their code, one line, exit 2, in every command that runs user code."""

import textwrap

import pytest

USER_CODE = {
    "raises": """
        def helper():
            raise RuntimeError("boom from the user")

        def make(**_):
            return helper()

        def step(ctx):
            helper()
    """,
    "wrongargs": """
        def make(a, b):
            return a

        def step():
            return 1
    """,
    "syntaxerr": """
        def make(:
            return 1
    """,
    "exits": """
        import sys

        def make(**_):
            sys.exit(3)

        def step(ctx):
            sys.exit(4)
    """,
}

# (module, what the one line must say)
CASES = [
    ("raises", r"raised RuntimeError: boom from the user \(raises\.py:3, in helper\)"),
    ("wrongargs", r"takes \((a, b)?\) but is called as (make\(\)|step\(StepContext\))"),
    ("syntaxerr", r"has a syntax error: .* \(syntaxerr\.py:2\)"),
    ("exits", r"called sys\.exit\([34]\) \(exits\.py:\d, in (make|step)\)"),
]


@pytest.fixture
def user_dir(tmp_path, monkeypatch):
    for name, code in USER_CODE.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(code))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    import sys

    for name in USER_CODE:
        sys.modules.pop(name, None)


def _check(code, out, err, pattern):
    import re

    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert "Traceback" not in err and out == ""
    assert re.search(pattern, err), err


@pytest.mark.parametrize("module,pattern", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("form", ["module", "file"])
def test_repeat_profile_and_step_show_the_users_error(cli, user_dir, module, pattern, form):
    target = f"{module}:make" if form == "module" else f"{module}.py:make"
    _check(*cli("repeat", target, "--runs", "2", "--threads", "1"), pattern)
    _check(*cli("profile", target, "--steps", "1"), pattern)
    _check(*cli("step", target, "--workers", "0", "--steps", "1"), pattern)


@pytest.mark.parametrize("module,pattern", CASES, ids=[c[0] for c in CASES])
def test_scale_threads_shows_the_users_error(cli, user_dir, module, pattern):
    target = "syntaxerr:make" if module == "syntaxerr" else f"{module}:step"
    args = ("--workers", "2", "--backend", "threads", "--steps", "1", "--warmup", "0")
    _check(*cli("scale", target, *args), pattern)


@pytest.mark.slow
def test_scale_worker_processes_pass_the_users_error_to_the_launcher(cli, user_dir):
    code, out, err = cli("scale", "raises:step", "--workers", "2", "--steps", "1", "--warmup", "0")
    _check(code, out, err, r"worker rank \d of 2: your raises:step raised RuntimeError: boom")
    assert "raises.py:3, in helper" in err


def test_a_module_that_is_not_there_is_a_name_error_not_the_users(cli, user_dir):
    code, _, err = cli("repeat", "no_such_module_here:make", "--runs", "2")
    assert code == 2 and "no such module" in err
    code, _, err = cli("repeat", "raises:not_there", "--runs", "2")
    assert code == 2 and "has no callable 'not_there'" in err


MODEL_CODE = """
import sys

import torch
from torch import nn


class Wrong(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) @ torch.ones(3, 3)


class Exits(Wrong):
    def forward(self, x):
        sys.exit(5)


def wrong():
    return {"model": Wrong(), "batch": torch.randn(2, 4)}


def exits():
    return {"model": Exits(), "batch": torch.randn(2, 4)}
"""


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_profile_names_the_line_of_the_users_forward_that_failed(cli, tmp_path, device):
    (tmp_path / "models_fwd.py").write_text(MODEL_CODE)
    target = f"{tmp_path / 'models_fwd.py'}:wrong"
    _check(*cli("profile", target, "--device", device), r"models_fwd\.py:14, in forward\)")
    target = f"{tmp_path / 'models_fwd.py'}:exits"
    _check(*cli("profile", target, "--device", device), r"called sys\.exit\(5\)")
