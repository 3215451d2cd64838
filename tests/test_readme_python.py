"""Every Python example in the README's "Use it from Python" section runs as written."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_examples() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Use it from Python", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```python\n(.*?)```", section, re.S)


def test_the_section_has_examples():
    assert len(python_examples()) >= 4


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(python_examples())))
def test_example_runs(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything an example writes stays out of the tree
    code = python_examples()[index]
    exec(compile(code, f"README.md (Python example {index + 1})", "exec"), {"__name__": "readme"})
