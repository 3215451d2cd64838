"""The documentation site: it builds offline with no warning (mkdocs --strict, the API page
from the docstrings), and every page's `ceiling ...` commands and Python examples run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from doc_commands import KEY_FIGURES, check, forms, python_blocks, workdir
from patience import HANG_S

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
# a command the README shows too runs once, in tests/test_readme_commands.py
IN_README = {f.text for f in forms((ROOT / "README.md").read_text(encoding="utf-8"))}
FORMS = [
    (page, f)
    for page in PAGES
    for f in forms(page.read_text(encoding="utf-8"))
    if f.text not in IN_README
]
EXAMPLES = [(page, code) for page in PAGES for code in python_blocks(page.read_text("utf-8"))]


def _name(page: Path) -> str:
    return str(page.relative_to(ROOT / "docs"))


def test_every_job_has_a_page_in_the_site():
    config = (ROOT / "mkdocs.yml").read_text()
    for page in ("gpu-box", "training-run", "serving", "teaching"):
        assert f"jobs/{page}.md" in config and (ROOT / "docs" / "jobs" / f"{page}.md").exists()
    assert "api.md" in config and "mkdocstrings" in config
    assert len(FORMS) >= 6 and len(EXAMPLES) >= 6


@pytest.mark.slow
def test_the_site_builds_offline_without_a_warning(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs comes with the dev extra: pip install -e '.[dev]'")
    pytest.importorskip("mkdocstrings", reason="mkdocstrings[python] comes with the dev extra")
    # no network: a proxy that does not exist makes any fetch fail the build
    env = {**os.environ, "HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9"}
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    api = (site / "api" / "index.html").read_text()
    # the reference is built from the docstrings: each function under its own name
    for name in ("laws.amdahl", "decode.decode", "plan.plan", "profile.profile",
                 "report.report", "meter.MfuMeter"):  # fmt: skip
        assert f'id="ceiling.api.{name}"' in api
    assert 'id="ceiling.trace.analyze.analyze"' in api and "Decode ceilings of" in api
    for page in ("jobs/gpu-box", "jobs/training-run", "jobs/serving", "jobs/teaching"):
        assert (site / page / "index.html").exists()


@pytest.mark.parametrize(
    ("page", "form"), FORMS, ids=[f"{_name(p)}: {f.text[:50]}" for p, f in FORMS]
)
def test_docs_command(page, form, tmp_path, monkeypatch):
    workdir(tmp_path, monkeypatch)
    check(form, KEY_FIGURES)


@pytest.mark.parametrize(
    ("page", "code"), EXAMPLES, ids=[f"{_name(p)}: {i}" for i, (p, _) in enumerate(EXAMPLES)]
)
def test_docs_python_example(page, code, tmp_path, monkeypatch):
    workdir(tmp_path, monkeypatch)
    exec(compile(code, f"{_name(page)} (Python example)", "exec"), {"__name__": "docs"})
