"""The public functions keep their signatures for type checkers (the argument checker is typed
with ParamSpec): mypy finds each wrong keyword and each wrong type in a user's script before it
runs, and nothing in the same calls made right."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy")

TYPED = Path(__file__).parent / "data" / "typed"
ERROR = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): error: (?P<message>.*)  \[(?P<code>[\w-]+)\]$")


@pytest.fixture(scope="module")
def errors(tmp_path_factory) -> dict[str, dict[int, tuple[str, str]]]:
    """mypy's errors by script name and line: (message, error code)."""
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(TYPED / "mypy.ini"),
         "--cache-dir", str(tmp_path_factory.mktemp("mypy")), "--no-error-summary",
         "--hide-error-context", "--no-pretty", "mistakes.py", "clean.py"],
        cwd=TYPED, capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert run.returncode in (0, 1), run.stderr + run.stdout  # 1: errors found, 2: mypy failed
    found: dict[str, dict[int, tuple[str, str]]] = {"mistakes.py": {}, "clean.py": {}}
    for line in run.stdout.splitlines():
        if m := ERROR.match(line):
            found[m["file"]][int(m["line"])] = (m["message"], m["code"])
    return found


def marked_lines() -> dict[int, str]:
    """The planted mistakes by line: "keyword" or "type"."""
    lines = (TYPED / "mistakes.py").read_text().splitlines()
    marks = {i: text.partition("# mistake: ")[2] for i, text in enumerate(lines, start=1)}
    return {i: mark.split(",")[0] for i, mark in marks.items() if mark}


def test_the_planted_script_has_five_mistakes():
    assert sorted(marked_lines().values()) == ["keyword"] * 2 + ["type"] * 3


def test_mypy_finds_every_wrong_keyword_and_wrong_type_and_nothing_else(errors):
    found = errors["mistakes.py"]
    assert set(found) == set(marked_lines())
    for line, kind in marked_lines().items():
        message, code = found[line]
        assert code == {"keyword": "call-arg", "type": "arg-type"}[kind], message
    assert 'Unexpected keyword argument "spce" for "plan"' in found[6][0]
    assert 'did you mean "gpus"' in found[9][0]
    assert '"batch" to "decode" has incompatible type "str"' in found[8][0]


def test_the_same_calls_made_right_pass(errors):
    assert errors["clean.py"] == {}
