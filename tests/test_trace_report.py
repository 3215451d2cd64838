"""`ceiling report --trace PATH`: the user's trace as a section of the page."""

from __future__ import annotations

import json

import pytest

from ceiling.hardware.catalog import get_spec
from test_trace_cuda import N, cuda_trace


@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "run.json"
    path.write_text(json.dumps(cuda_trace()))
    return path


def _report(cli, tmp_path, trace_file):
    page = tmp_path / "r.html"
    code, out, err = cli("report", "--only", "trace", "--trace", trace_file, "-o", page, "--json")
    assert code == 0, err
    return page, {s["key"]: s for s in json.loads(out)["sections"]}


def test_trace_section_explains_the_run(cli, tmp_path, trace_file):
    page, sections = _report(cli, tmp_path, trace_file)
    sec = sections["trace"]
    assert sec["status"] == "ok"
    mfu = 2.0 * N**3 / 1.0e-3 / get_spec("h100-sxm").peak("bf16")  # the lone step: 1000 µs
    assert sec["key_figures"]["mfu"] == pytest.approx(mfu)
    assert [t["title"] for t in sec["tables"]][:3] == [
        "Rank 0: the mean step",
        "Rank 0: top kernels by device time",
        "Rank 0: ops losing most time against their roof",
    ]
    assert len(sec["figures"]) == 1
    html = page.read_text()
    assert 'id="trace"' in html and "http://" not in html and "https://" not in html


def test_trace_section_only_with_a_trace(cli, tmp_path):
    code, _, err = cli("report", "--only", "trace", "-o", tmp_path / "r.html")
    assert code == 2 and "unknown section 'trace'" in err
    code, _, err = cli("report", "--trace", tmp_path / "none.json", "-o", tmp_path / "r.html")
    assert code == 2 and "does not exist" in err


@pytest.mark.slow
def test_trace_section_renders_in_a_browser(cli, tmp_path, trace_file):
    from test_browser import _browser, _dom_check

    browser = _browser()
    page, sections = _report(cli, tmp_path, trace_file)
    check = _dom_check(browser, page, tmp_path)
    assert check["errors"] == [] and check["violations"] == [] and check["resources"] == []
    (shown,) = [s for s in check["sections"] if s["key"] == "trace"]
    assert len(shown["images"]) == len(sections["trace"]["figures"]) == 1
    img = shown["images"][0]
    assert img["loaded"] and img["width"] > 200 and img["height"] > 100
