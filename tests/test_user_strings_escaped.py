"""User strings (file names, model names, `custom:` values, target names) reach the HTML
page escaped and the terminal without markup or control characters."""

import json

import pytest

from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
ESC = "\x1b]0;owned\x07\x1b[2J"  # retitle the terminal, clear the screen


def _hostile_path(root, name):
    """A file path whose text is `name` (a "/" in it makes a folder on the way)."""
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture
def hostile_profile(tmp_path):
    cpu = {"name": "Test CPU", "kind": "cpu", "peak_flops_per_s": {"fp32": 100e9}}
    dev = MeasuredDevice(**cpu, bandwidth_bytes_per_s=10e9, memory_bytes=16 * 2**30)
    prof = MachineProfile(1, "2026-01-01T00:00:00+00:00", "testhost", {}, [dev])
    return save_profile(prof, _hostile_path(tmp_path, f"{SCRIPT}{IMG}.json"))


def _assert_escaped(text):
    for raw in (SCRIPT, IMG, "<script", "<img src=x"):
        assert raw not in text
    # the page's own images are its embedded figures, nothing else
    assert text.count("<img ") == text.count('<img src="data:image/')
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "&lt;img src=x onerror=alert(1)&gt;" in text


def _assert_terminal_safe(text):
    assert "\x1b" not in text and "\x07" not in text
    assert all(c in "\n\t" or ord(c) >= 0x20 for c in text)


def test_file_names_reach_the_page_escaped(cli, tmp_path, hostile_profile):
    page = _hostile_path(tmp_path, f"out/{IMG}{ESC}.html")
    trace = _hostile_path(tmp_path, f"{SCRIPT}{IMG}{ESC}.trace.json")
    trace.write_text("not a trace")
    code, out, err = cli(
        "report", "--only", "amdahl,roofline,trace", "--profile", hostile_profile, "--trace", trace,
        "-o", page,
    )  # fmt: skip
    assert code == 0, err
    html = page.read_text()
    _assert_escaped(html)  # the profile's file name: in the footer and the sections
    assert "<script" not in html.lower()  # and the page has no script of its own
    assert "\x1b" not in html and "\x07" not in html
    record = json.loads(page.with_suffix(".json").read_text())
    trace_section = next(s for s in record["sections"] if s["key"] == "trace")
    assert trace_section["status"] != "ok"
    assert "&lt;img src=x onerror=alert(1)&gt;" in html.split('id="trace"')[1]
    _assert_terminal_safe(out)
    _assert_terminal_safe(err)


@pytest.mark.parametrize(
    "args",
    [
        ["plan", f"{SCRIPT}{ESC}", "--spec", "h100-sxm", "--gpus", "8"],
        ["decode", f"custom:layers=2,hidden={IMG}{ESC},heads=2"],
        ["repeat", f"{IMG}{ESC}:run"],
        ["fit", f"{SCRIPT}{ESC}.csv"],
        ["roofline", "--spec", f"[red]{IMG}[/]{ESC}"],
    ],
)
def test_user_strings_reach_the_terminal_without_control_characters(cli, args):
    code, out, err = cli(*args)
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    _assert_terminal_safe(out + err)
    assert "\\x1b" in err  # shown, not obeyed


def test_tables_show_markup_and_escapes_as_text(capsys):
    from ceiling.cli.output import console, table

    console().print(table(f"[bold]{IMG}{ESC}", ["name"], [[f"[red]{SCRIPT}[/]\x1b[31m"]]))
    out = capsys.readouterr().out
    _assert_terminal_safe(out)
    assert f"[bold]{IMG}" in out and f"[red]{SCRIPT}[/]\\x1b[31m" in out
