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


def _public_results() -> list[str]:
    """Every result class a public function returns: the subclasses of api.result.Result."""
    import importlib
    import pkgutil

    import ceiling.api
    from ceiling.api.result import Result

    for mod in pkgutil.iter_modules(ceiling.api.__path__):
        importlib.import_module(f"ceiling.api.{mod.name}")
    importlib.import_module("ceiling.report.call")

    def below(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from below(sub)

    found = {f"{c.__module__}.{c.__qualname__}" for c in below(Result)}
    return sorted(n for n in found if n.startswith(("ceiling.api.", "ceiling.report.")))


def _error_classes() -> list[str]:
    import ceiling.errors as errors

    return [
        n
        for n, v in vars(errors).items()
        if isinstance(v, type) and v.__module__ == errors.__name__
    ]


def test_serve_results_and_errors_are_in_the_reference_and_the_pages():
    api = (ROOT / "docs" / "api.md").read_text()
    for name in [*_public_results(), *(f"ceiling.errors.{e}" for e in _error_classes())]:
        assert f"::: {name}\n" in api, name
    assert "::: ceiling.api.serve.serve" in api
    assert "\nceiling serve llama-3-8b" in (ROOT / "docs" / "jobs" / "serving.md").read_text()


def test_the_gpu_box_page_counts_the_catalog():
    from ceiling.hardware.catalog import all_specs

    page = (ROOT / "docs" / "jobs" / "gpu-box.md").read_text()
    assert f"The catalog holds {len(all_specs())} devices" in page


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
                 "meter.MfuMeter"):  # fmt: skip
        assert f'id="ceiling.api.{name}"' in api
    assert (
        'id="ceiling.api.trace.trace"' in api
        and 'id="ceiling.report.call.report"' in api
        and "Decode ceilings of" in api
    )
    # serving, every result type and every error class have their entry
    assert 'id="ceiling.api.serve.serve"' in api and 'id="ceiling.api.serve.ServeResult"' in api
    for result in _public_results():
        assert f'id="{result}"' in api, result
    for error in _error_classes():
        assert f'id="ceiling.errors.{error}"' in api, error
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
