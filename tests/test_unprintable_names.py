"""A kernel or op name holding a lone surrogate (a JSON "\\ud800" decodes to one; no UTF-8
terminal, file or page can hold it) or a control character is shown as its escape in every
view: the terminal table, the JSON, the HTML page and its JSON record."""

from __future__ import annotations

import json

import pytest

from ceiling.text import encodable, printable
from test_trace_cuda import cuda_trace

KERNEL = "sm90_xmma_gemm_bf16bf16_bf16f32"
HOSTILE = "gemm\ud800\x1b[31m"


@pytest.fixture
def hostile_trace(tmp_path):
    trace = cuda_trace()
    for event in trace["traceEvents"]:
        if event.get("name") == KERNEL:
            event["name"] = HOSTILE
        elif event.get("name") == "aten::add":
            event["name"] = "aten::\udfffadd"
    path = tmp_path / "run.json"
    path.write_text(json.dumps(trace))  # ensure_ascii: the file holds the text "\ud800"
    assert "\\ud800" in path.read_text()
    return path


def test_printable_and_encodable_escape_lone_surrogates():
    assert printable("a\ud800b\udfff\x1b") == "a\\ud800b\\udfff\\x1b"
    assert encodable("a\ud800b\x1b") == "a\\ud800b\x1b"  # control characters are valid JSON
    assert encodable("ok ≥ µ") == "ok ≥ µ"


def test_the_terminal_table_shows_the_escape(cli, hostile_trace, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    code, out, err = cli("trace", hostile_trace)
    assert code == 0, err
    assert "gemm\\ud800\\x1b[31m ×1" in out and "\\udfffadd ×1" in out
    assert "\ud800" not in out and "\x1b" not in out
    out.encode("utf-8")  # every character can be written


def test_the_json_is_valid_unicode_with_the_escape(cli, hostile_trace):
    code, out, _ = cli("trace", hostile_trace, "--json")
    assert code == 0
    out.encode("utf-8")
    record = json.loads(out)
    names = json.dumps(record, ensure_ascii=False)
    assert "gemm\\\\ud800" in names and "\ud800" not in names


def test_report_writes_its_page_with_the_escape(cli, hostile_trace, tmp_path):
    page = tmp_path / "r.html"
    code, _, err = cli("report", "--only", "trace", "--trace", hostile_trace, "-o", page)
    assert code == 0, err
    html = page.read_bytes().decode("utf-8")  # strict: a surrogate could not be in it
    record = page.with_suffix(".json").read_bytes().decode("utf-8")
    assert "\\ud800" in html + record


def test_a_stream_that_refuses_surrogates_shows_their_escape():
    import io

    from ceiling.cli.streams import tolerant_terminal

    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
    import sys

    saved = sys.stdout
    sys.stdout = stream
    try:
        with tolerant_terminal():
            print("name: a\ud800b", file=stream)
            stream.flush()
    finally:
        sys.stdout = saved
    assert raw.getvalue().decode("utf-8") == "name: a\\ud800b\n"
    assert stream.errors == "strict"  # restored
