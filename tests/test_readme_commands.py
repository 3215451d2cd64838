"""Every `ceiling ...` command the README shows runs as written (or, when it measures this
machine for long, parses), and prints its key figure. The machinery: `doc_commands.py`."""

from __future__ import annotations

from pathlib import Path

import pytest

from doc_commands import KEY_FIGURES, check, forms, workdir

README = Path(__file__).resolve().parents[1] / "README.md"
FORMS = forms(README.read_text(encoding="utf-8"))


def test_the_readme_shows_commands_of_every_kind():
    texts = [f.text for f in FORMS]
    assert any(t.startswith("decode llama-3-8b") and "256" in t for t in texts)
    assert sum(f.parse_only() is None for f in FORMS) >= 15
    assert any(f.parse_only() for f in FORMS)


@pytest.mark.parametrize("form", FORMS, ids=[f.text[:60] for f in FORMS])
def test_readme_command(form, tmp_path, monkeypatch):
    workdir(tmp_path, monkeypatch)
    check(form, KEY_FIGURES)
