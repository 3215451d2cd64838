"""`ceiling report` on the command line: sections chosen, files written, bad input refused."""

from __future__ import annotations

import json

import pytest


def test_report_writes_page_and_json_record(cli, tmp_path):
    out = tmp_path / "r.html"
    code, stdout, stderr = cli("report", "--only", "amdahl", "--output", out, "--json")
    assert code == 0, stderr
    record = json.loads(stdout)
    assert record["mode"] == "quick"
    [section] = record["sections"]
    assert section["title"].startswith("Amdahl")
    assert section["status"] == "ok"
    assert section["key_figures"]["ceiling_p0.95"] == 20.0
    assert section["key_figures"]["ceiling_p0.5"] == 2.0
    # the record on disk is the one printed, and the page points to it
    assert json.loads((tmp_path / "r.json").read_text())["sections"] == record["sections"]
    page = out.read_text()
    assert 'id="amdahl"' in page and "data:image/svg+xml;base64," in page
    assert f"report: {out.resolve()}" in stderr


def test_amdahl_section_shows_the_classic_table(cli, tmp_path):
    out = tmp_path / "r.html"
    code, stdout, _ = cli("report", "--only", "amdahl", "-o", out, "--json")
    assert code == 0
    table = json.loads(stdout)["sections"][0]["tables"][0]
    rows = {r[0]: r for r in table["rows"]}
    cols = table["columns"]
    col = {c.split(" (")[0]: i for i, c in enumerate(cols)}
    # the classic table: 0.5 -> 1.3 1.8 2.0; 0.9 -> 1.8 4.7 9.9; 0.99 -> 2.0 7.5 91.0
    for p, expected in {"0.5": "1.3 1.8 2.0", "0.9": "1.8 4.7 9.9", "0.99": "2.0 7.5 91.0"}.items():
        got = [rows[p][col[f"N = {n}"]].rstrip("×") for n in (2, 8, 1000)]
        assert got == expected.split()


def test_terminal_summary_ends_with_the_page_path(cli, tmp_path):
    out = tmp_path / "page.html"
    code, stdout, _ = cli("report", "--only", "amdahl", "-o", out)
    assert code == 0
    lines = stdout.strip().splitlines()
    assert lines[-2] == f"report: {out.resolve()}"
    assert lines[-1] == f"json:   {(tmp_path / 'page.json').resolve()}"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--output", "report.txt"], "--output must end in .html"),
        (["--output", "/no/such/folder/r.html"], "does not exist"),
        (["--only", "nosuch"], "unknown section 'nosuch'"),
        (["--profile", "/no/such/profile.json"], "does not exist"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, args, message):
    code, stdout, stderr = cli("report", *args)
    assert code == 2
    assert stdout == ""
    assert stderr.count("\n") == 1 and stderr.startswith("error: ")
    assert message in stderr


def test_terminal_summary_repeats_a_caveat_on_every_number(cli, tmp_path):
    from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

    dev = MeasuredDevice(
        "Fast CPU", "cpu", {"fp32": 250e9}, 10e9, datasheet_peak_flops_per_s={"fp32": 200e9}
    )
    path = save_profile(MachineProfile(1, "x", "h", {}, [dev]), tmp_path / "fast.json")
    code, stdout, _ = cli(
        "report", "--only", "machine", "--profile", path, "-o", tmp_path / "p.html"
    )
    assert code == 0
    assert "note: measured above the theoretical peak (Fast CPU fp32)" in " ".join(stdout.split())


def test_malformed_profile_is_refused_before_running(cli, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"devices": "x"}')
    code, _, err = cli(
        "report", "--profile", bad, "--only", "machine", "--output", tmp_path / "r.html"
    )
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1
    assert not (tmp_path / "r.html").exists()


def test_ctrl_c_never_replaces_a_complete_page(cli, tmp_path, monkeypatch):
    """An existing complete page survives an interrupted run; the partial page, with every
    section that finished, is written beside it and the output says where."""
    from ceiling.report import sections
    from ceiling.report.compose import SectionSpec

    amdahl = next(s for s in sections.SECTIONS if s.key == "amdahl")
    state = {"interrupt": False}

    def last(ctx, out):
        if state["interrupt"]:
            raise KeyboardInterrupt
        out.text("finished")

    monkeypatch.setattr(sections, "SECTIONS", [amdahl, SectionSpec("last", "Last", last)])
    page = tmp_path / "r.html"
    code, _, err = cli("report", "-o", page)
    assert code == 0, err
    complete = page.read_bytes()

    state["interrupt"] = True
    code, out, _ = cli("report", "-o", page)
    assert code == 130
    assert page.read_bytes() == complete  # the complete page is untouched
    partial = tmp_path / "r-interrupted.html"
    record = json.loads((tmp_path / "r-interrupted.json").read_text())
    assert record["interrupted"] is True
    assert [s["status"] for s in record["sections"]] == ["ok", "skipped"]
    assert 'id="amdahl"' in partial.read_text()
    said = " ".join(out.split())
    assert f"interrupted: {page.resolve()} (a more complete page) was kept" in said
    assert f"report: {partial.resolve()}" in said

    # with no page there, or only a less complete one, the partial page takes its place
    page.unlink()
    code, _, _ = cli("report", "-o", page)
    assert code == 130 and page.exists()
    assert json.loads((tmp_path / "r.json").read_text())["interrupted"] is True
