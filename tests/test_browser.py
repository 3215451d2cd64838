"""The report page in a real browser: Debian's chromium, headless, loading the file from disk.

The whole quick report is generated once; chromium then loads it. The test fails when any
section that ran shows no figure or a broken one, when the page asks for anything over the
network, or when the screenshot comes out blank. Outside CI, a machine without chromium
skips these tests with the reason; CI installs chromium and sets CEILING_REQUIRE_BROWSER=1.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]

# Runs before the page's own Content-Security-Policy takes effect, so it may run; everything
# after it is still under that policy, and any blocked fetch is reported here.
CHECKER = """<script>
window.__errors = []; window.__violations = [];
addEventListener("error", function (e) {
  var t = e.target;
  __errors.push(t && t.tagName ? t.tagName + " failed to load" : String(e.message));
}, true);
document.addEventListener("securitypolicyviolation", function (e) {
  __violations.push(e.violatedDirective + " " + e.blockedURI);
});
addEventListener("load", function () {
  var sections = Array.prototype.map.call(document.querySelectorAll("main > section"),
    function (s) {
      return {key: s.id, status: s.dataset.status, declared: Number(s.dataset.figures),
        images: Array.prototype.map.call(s.querySelectorAll("img"), function (i) {
          var box = i.getBoundingClientRect();
          return {loaded: i.complete && i.naturalWidth > 0, width: box.width,
                  height: box.height, alt: i.alt};
        })};
    });
  var pre = document.createElement("pre");
  pre.id = "ceiling-check";
  pre.textContent = JSON.stringify({sections: sections, errors: __errors,
    violations: __violations,
    resources: performance.getEntriesByType("resource").map(function (r) { return r.name; })});
  document.body.appendChild(pre);
});
</script>"""


def _browser() -> str:
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    reason = "chromium is not installed (apt-get install -y chromium) — browser test not run"
    if os.environ.get("CEILING_REQUIRE_BROWSER"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def browser() -> str:
    return _browser()


@pytest.fixture(scope="module")
def full_report(tmp_path_factory, browser):
    """The default quick report, made by the real command, as a new user gets it."""
    folder = tmp_path_factory.mktemp("report")
    page = folder / "ceiling-report.html"
    # the run saves a machine profile as the default one when none exists: keep it here
    env = {**os.environ, "CEILING_PROFILE": str(folder / "default-profile.json")}
    proc = subprocess.run(
        [sys.executable, "-m", "ceiling", "report", "--quick", "--output", str(page), "--json"],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=folder,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return page, json.loads(proc.stdout), proc.stderr


def _run_browser(browser: str, args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    profile = tmp / "chromium-profile"
    return subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=90,
    )


def _dom_check(browser: str, page: Path, tmp: Path) -> dict:
    html = page.read_text(encoding="utf-8")
    instrumented = tmp / "instrumented.html"
    instrumented.write_text(html.replace("<head>", "<head>\n" + CHECKER, 1), encoding="utf-8")
    proc = _run_browser(
        browser, ["--virtual-time-budget=10000", "--dump-dom", instrumented.as_uri()], tmp
    )
    found = re.search(r'<pre id="ceiling-check">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"chromium did not render the page: {proc.stderr[-2000:]}"
    text = found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
    return json.loads(text.replace("&amp;", "&"))


def test_json_lists_every_section_with_status(full_report):
    from ceiling.report.sections import SECTIONS

    _, record, _ = full_report
    sections = record["sections"]
    assert [s["key"] for s in sections] == [s.key for s in SECTIONS]
    for s in sections:
        assert s["title"]
        assert s["status"] in ("ok", "skipped"), f"{s['title']}: {s['status']} — {s['reason']}"
        if s["status"] == "skipped":
            assert s["reason"] and "\n" not in s["reason"]
        else:
            assert s["key_figures"], f"{s['title']} ran but reports no key figures"
    # the sections that need nothing but this machine always run
    status = {s["key"]: s["status"] for s in sections}
    assert status["machine"] == "ok" and status["amdahl"] == "ok"


def test_page_renders_every_figure_offline(full_report, browser, tmp_path):
    page, record, _ = full_report
    check = _dom_check(browser, page, tmp_path)
    assert check["errors"] == []
    assert check["violations"] == [], "the page tried to fetch something"
    assert check["resources"] == [], "the page loaded resources from outside itself"
    expected = {s["key"]: s for s in record["sections"]}
    rendered = {s["key"]: s for s in check["sections"]}
    assert rendered.keys() == expected.keys()
    for key, sec in expected.items():
        shown = rendered[key]
        assert shown["status"] == sec["status"]
        assert len(shown["images"]) == len(sec["figures"]) == shown["declared"]
        if sec["status"] == "ok":
            assert shown["images"], f"section {key!r} ran but shows no figure"
        for img in shown["images"]:
            assert img["loaded"], f"broken figure in {key!r}: {img['alt']}"
            assert img["width"] > 200 and img["height"] > 100, f"figure too small in {key!r}"


def test_screenshot_is_not_blank(full_report, browser, tmp_path):
    import matplotlib.image

    page, _, _ = full_report
    shot = tmp_path / "page.png"
    _run_browser(
        browser, ["--window-size=1200,2400", f"--screenshot={shot}", page.as_uri()], tmp_path
    )
    assert shot.is_file(), "chromium wrote no screenshot"
    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[0] == 2400 and pixels.shape[1] == 1200
    # a rendered page has ink on it: dark text and coloured figures on white
    assert pixels[..., :3].std() > 0.05
    assert (pixels[..., :3].mean(axis=2) < 0.3).mean() > 0.002


def test_page_needs_no_javascript(full_report):
    page, _, _ = full_report
    html = page.read_text(encoding="utf-8")
    assert "<script" not in html.lower()
    for src in re.findall(r'\bsrc="([^"]*)"', html):
        assert src.startswith("data:image/")
