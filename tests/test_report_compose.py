"""The report framework: sections run, skip with a reason or fail visibly; the page stands alone."""

from __future__ import annotations

import json
import re

import pytest

from ceiling import records
from ceiling.errors import UnsupportedOnDevice
from ceiling.report import compose, html
from ceiling.report.compose import ReportContext, SectionSpec, Skip


def _ok(ctx, out):
    from ceiling.render import plots

    fig, ax = plots.subplots()
    ax.plot([1, 2, 3], [1, 4, 9])
    out.text("a paragraph with <markup> & ampersands")
    out.key("answer_flops_per_s", 4.2e12, "answer", "4.2 TFLOP/s")
    out.table("numbers", ["n", "value"], [[1, 2.5], [2, "5 ×"]])
    out.figure(fig, "a line")


def _skip(ctx, out):
    raise Skip("needs a CUDA GPU; none is visible here")


def _unsupported(ctx, out):
    raise UnsupportedOnDevice("bf16 is not native on this CPU")


def _broken(ctx, out):
    out.key("half_done", 1.0)
    raise ValueError("boom")


SPECS = [
    SectionSpec("ok", "Works", _ok),
    SectionSpec("skip", "Needs a GPU", _skip),
    SectionSpec("unsupported", "Wrong dtype", _unsupported),
    SectionSpec("broken", "Broken", _broken),
]


@pytest.fixture(scope="module")
def report():
    return compose.compose(SPECS, ReportContext(quick=True))


def test_every_section_is_kept_with_its_status(report):
    got = {s.key: (s.status, s.reason) for s in report.sections}
    assert [s.key for s in report.sections] == [s.key for s in SPECS]
    assert got["ok"] == ("ok", None)
    assert got["skip"] == ("skipped", "needs a CUDA GPU; none is visible here")
    assert got["unsupported"] == ("skipped", "bf16 is not native on this CPU")
    assert got["broken"][0] == "failed"
    assert got["broken"][1].startswith("ValueError: boom (at test_report_compose.py:")


def test_a_failed_section_shows_no_half_finished_numbers(report):
    broken = next(s for s in report.sections if s.key == "broken")
    assert broken.output.key_figures == {}


def test_json_record_lists_sections_with_key_figures(report):
    record = json.loads(json.dumps(records.jsonable(report.to_json())))
    sections = record["sections"]
    assert [s["status"] for s in sections] == ["ok", "skipped", "skipped", "failed"]
    ok = sections[0]
    assert ok["title"] == "Works"
    assert ok["key_figures"] == {"answer_flops_per_s": 4.2e12}
    [fig] = ok["figures"]
    assert (fig["caption"], fig["format"]) == ("a line", "image/svg+xml")
    assert fig["legibility"]["min_text_px"] >= 10 and fig["legibility"]["legend_overlaps"] == 0
    assert ok["tables"][0]["rows"] == [["1", "2.5"], ["2", "5 ×"]]
    assert all(s["reason"] for s in sections[1:])


def test_page_is_self_contained_and_escaped(report):
    page = html.render(report, json_name="r.json")
    # no fetch of any kind: every src is a data URI, no external stylesheet, no script
    srcs = re.findall(r'\bsrc="([^"]*)"', page)
    assert len(srcs) == 1 and srcs[0].startswith("data:image/svg+xml;base64,")
    assert "<script" not in page.lower()
    assert "<link" not in page.lower()
    assert "url(" not in page
    assert "@import" not in page
    assert "default-src 'none'" in page
    assert "a paragraph with &lt;markup&gt; &amp; ampersands" in page
    # every section is on the page, skipped ones with their reason
    for s in report.sections:
        assert f'id="{s.key}"' in page
    assert "needs a CUDA GPU; none is visible here" in page
    assert 'data-status="failed"' in page and "ValueError: boom" in page
    assert "@media print" in page


def test_numeric_cells_are_right_aligned(report):
    page = html.render(report)
    assert '<td class="num">2.5</td>' in page
    assert '<td class="num">5 ×</td>' in page


def test_atomic_write_leaves_no_temp_files(tmp_path):
    target = tmp_path / "r.json"
    records.write_json_atomic({"x": float("inf"), "y": [1.5]}, target)
    assert json.loads(target.read_text()) == {"x": None, "y": [1.5]}
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


def test_ctrl_c_keeps_what_finished():
    def interrupt(ctx, out):
        raise KeyboardInterrupt

    specs = [SPECS[0], SectionSpec("stop", "Stops", interrupt), SPECS[1]]
    rep = compose.compose(specs, ReportContext())
    assert rep.interrupted
    assert [s.status for s in rep.sections] == ["ok", "skipped", "skipped"]
    assert "interrupted" in rep.sections[1].reason
    assert "not run" in rep.sections[2].reason


def test_profile_is_measured_once_and_its_absence_is_a_skip(monkeypatch):
    calls = []

    def fake_load(self):
        calls.append(1)
        raise Skip("no benchmarks in this build")

    monkeypatch.setattr(ReportContext, "_load_or_measure", fake_load)
    ctx = ReportContext()
    for _ in range(2):
        with pytest.raises(Skip, match="no benchmarks"):
            ctx.profile()
    assert calls == [1]


def test_a_figure_keeps_its_drawn_size_on_a_narrow_screen():
    """At 390 px the page would shrink a 700 px figure's 10 px text to 5 px: below 40rem
    (600 px) a figure keeps its own size inside a box that scrolls sideways."""
    import re
    from importlib import resources

    from ceiling.report.compose import Figure
    from ceiling.report.html import _figure

    html = _figure(Figure("a caption", "image/svg+xml", b"<svg/>", "alt"))
    assert html.startswith('<figure><div class="plot"><img ')
    css = resources.files("ceiling.report").joinpath("report.css").read_text()
    assert re.search(r"\.plot \{ overflow-x: auto; \}", css)
    narrow = re.search(r"@media \(max-width: 40rem\) \{\s*\.plot img \{ max-width: none; \}", css)
    assert narrow and 40 * 15 < 700  # 15 px per rem (html font-size): a phone is inside it
