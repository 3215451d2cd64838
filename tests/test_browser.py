"""The report page in a real browser: Debian's chromium, headless, loading the file from disk.

The page is built once from a quick report kept as data (tests/data/report/, made by
tests/report_snapshot.py); chromium then loads it. The test fails when any
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
from pathlib import Path

import pytest

from patience import HANG_S

pytestmark = pytest.mark.slow

BROWSERS = ("chromium", "chromium-browser", "google-chrome")
WINDOW = "1200,2400"  # a desktop window: the page's column is narrower than it
# visible words of the default page: ten sections of about 180 words (serving the tenth),
# with room for the notes a loaded machine adds (noisy points, speedups flagged as noise)
MAX_WORDS = 1950
MIN_TEXT_PX = 10.0
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
      var at = s.getBoundingClientRect();
      return {key: s.id, status: s.dataset.status, declared: Number(s.dataset.figures),
        top: at.top + window.scrollY, height: at.height,
        images: Array.prototype.map.call(s.querySelectorAll("img"), function (i) {
          var box = i.getBoundingClientRect();
          return {loaded: i.complete && i.naturalWidth > 0, width: box.width,
                  height: box.height, natural: i.naturalWidth, alt: i.alt};
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
def full_report(tmp_path_factory):
    """The page of a quick report kept as data (tests/report_snapshot.py), built by today's
    renderer: nothing is measured here, so a loaded machine renders the same page."""
    from ceiling.records import jsonable
    from ceiling.report import html
    from report_snapshot import read

    report = read()
    page = tmp_path_factory.mktemp("report") / "ceiling-report.html"
    page.write_text(html.render(report, json_name="ceiling-report.json"), encoding="utf-8")
    record = json.loads(json.dumps(jsonable(report.to_json())))
    return page, record, ""


def _run_browser(browser: str, args: list[str], tmp: Path) -> subprocess.CompletedProcess:
    profile = tmp / "chromium-profile"
    return subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=HANG_S,  # a hang detector, not a speed check
    )


def _dom_check(browser: str, page: Path, tmp: Path, window: str = WINDOW) -> dict:
    html = page.read_text(encoding="utf-8")
    instrumented = tmp / "instrumented.html"
    instrumented.write_text(html.replace("<head>", "<head>\n" + CHECKER, 1), encoding="utf-8")
    args = [f"--window-size={window}", "--virtual-time-budget=10000", "--dump-dom"]
    proc = _run_browser(browser, [*args, instrumented.as_uri()], tmp)
    found = re.search(r'<pre id="ceiling-check">(.*?)</pre>', proc.stdout, re.S)
    assert found, f"chromium did not render the page: {proc.stderr[-2000:]}"
    text = found.group(1).replace("&quot;", '"').replace("&lt;", "<").replace("&gt;", ">")
    return json.loads(text.replace("&amp;", "&"))


def test_json_lists_every_section_with_status(full_report):
    from ceiling.report.sections import SECTIONS

    _, record, _ = full_report
    sections = record["sections"]
    assert [s["key"] for s in sections] == [s.key for s in SECTIONS], (
        "the sections changed: make the kept report again (python tests/report_snapshot.py)"
    )
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


def visible_words(html: str) -> int:
    """Words a reader sees: no head, styles, scripts, tags or figure data."""
    import html as html_mod

    body = re.sub(r"<head>.*?</head>", " ", html, flags=re.S)
    body = re.sub(r"<(style|script)\b.*?</\1>", " ", body, flags=re.S)
    text = html_mod.unescape(re.sub(r"<[^>]+>", " ", body))
    return len(text.split())


def test_default_page_has_at_most_1800_words(full_report):
    page, _, _ = full_report
    words = visible_words(page.read_text(encoding="utf-8"))
    assert words <= MAX_WORDS, f"{words} visible words"


def test_word_count_sees_text_and_not_figures():
    html = '<head><title>t</title><style>p {}</style></head><p>two words</p><img alt="x y z">'
    assert visible_words(html) == 2


def test_verdict_opens_the_page_and_each_line_is_a_json_number(full_report):
    from ceiling.report.verdict import lookup

    page, record, _ = full_report
    html = page.read_text(encoding="utf-8")
    assert html.index('id="verdict"') < html.index("<main>")
    sections = {s["key"]: s for s in record["sections"]}
    assert 1 <= len(record["verdict"]) <= 3
    for line in record["verdict"]:
        section, _, path = line["json_key"].partition(".")
        assert lookup(sections[section]["key_figures"], path) == line["value"]
        assert f'data-key="{line["json_key"]}"' in html
    # no work given: every section that speaks of a model says it is a demo
    demos = [s for s in sections.values() if s.get("subject")]
    assert demos and all(s["subject"].startswith("Demo:") for s in demos)


def test_every_figure_is_legible_at_100_percent(full_report):
    _, record, _ = full_report
    figures = [(s["key"], f) for s in record["sections"] for f in s["figures"]]
    assert figures
    for key, f in figures:
        leg = f["legibility"]
        assert leg["min_text_px"] >= MIN_TEXT_PX, (key, f["caption"], leg)
        assert leg["legend_overlaps"] == 0, (key, f["caption"], leg)
        assert leg["hidden_markers"] == 0, (key, f["caption"], leg)


def _each_figure_text_is_legible(check: dict, record: dict) -> int:
    """Each figure's smallest text, at the size the browser shows it, at least MIN_TEXT_PX;
    the number of figures checked."""
    expected = {s["key"]: s for s in record["sections"]}
    checked = 0
    for shown in check["sections"]:
        for img, fig in zip(shown["images"], expected[shown["key"]]["figures"], strict=True):
            leg = fig["legibility"]
            natural_px = leg["min_text_px"] / leg["page_scale"]
            rendered = natural_px * img["width"] / img["natural"]
            assert rendered >= MIN_TEXT_PX - 0.05, (shown["key"], fig["caption"], rendered)
            checked += 1
    return checked


def test_figure_text_stays_legible_on_a_390_px_phone(full_report, browser, tmp_path):
    """On a phone the page does not shrink a figure's text to 4-5 px: each figure keeps the
    size its text was drawn for and scrolls sideways."""
    page, record, _ = full_report
    check = _dom_check(browser, page, tmp_path, window="390,2400")
    assert _each_figure_text_is_legible(check, record) > 0


def test_rendered_figure_text_and_a_screenshot_of_each_section(full_report, browser, tmp_path):
    """In the browser, each figure's smallest text at the size the page shows it, and one
    screenshot per section (into $CEILING_TEST_OUTPUT when set, else a temporary folder)."""
    import matplotlib.image

    page, record, _ = full_report
    check = _dom_check(browser, page, tmp_path)
    _each_figure_text_is_legible(check, record)
    bottom = int(max(s["top"] + s["height"] for s in check["sections"])) + 40
    width = int(WINDOW.split(",")[0])
    shot = tmp_path / "page.png"
    args = [f"--window-size={width},{bottom}", f"--screenshot={shot}", page.as_uri()]
    _run_browser(browser, args, tmp_path)
    pixels = matplotlib.image.imread(shot)
    out = Path(os.environ.get("CEILING_TEST_OUTPUT") or tmp_path) / "report-sections"
    out.mkdir(parents=True, exist_ok=True)
    for s in check["sections"]:
        top, height = int(s["top"]), int(s["height"])
        part = pixels[top : top + height]
        assert part.shape[0] > 20 and part[..., :3].std() > 0.02, f"section {s['key']} is blank"
        matplotlib.image.imsave(out / f"{s['key']}.png", part)
    assert sorted(p.stem for p in out.glob("*.png")) == sorted(s["key"] for s in record["sections"])
