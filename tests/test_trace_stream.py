"""The trace reader reads a file a window at a time: its events, their order, the header and
every analysis are those of the whole document parsed at once, wherever the windows end."""

from __future__ import annotations

import gzip
import json
from dataclasses import fields
from pathlib import Path

import pytest

import ceiling
from ceiling import files
from ceiling.errors import MalformedFile
from ceiling.trace import reader
from ceiling.trace.events import CATEGORY
from ceiling.trace.reader import parse_trace, read_trace

REAL = Path(__file__).parent / "data" / "traces-real"
TRACES = sorted(p for p in REAL.rglob("*.json.gz") if p.name != "op_calls.json.gz")


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _text(path: Path) -> str:
    return gzip.decompress(path.read_bytes()).decode()


def _whole(path: Path) -> tuple[dict, list]:
    """The header and kept events of the document parsed at once by json.loads, each event
    reduced by the reader's own rule, in the file's order."""
    doc = json.loads(_text(path))
    header, raw = ({}, doc) if isinstance(doc, list) else (doc, doc["traceEvents"])
    reduce = reader._Parser([], str(path))
    kept = [e for e in raw if e.get("cat") in CATEGORY and e.get("ph") == "X"]
    return header, [reduce.event(e) for e in kept]


def _same(a, b) -> None:
    for f in fields(a):
        assert getattr(a, f.name) == getattr(b, f.name), f.name


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.name)
def test_streamed_events_are_the_whole_documents(path):
    header, events = _whole(path)
    streamed = read_trace(path)
    assert streamed.events == events and len(events) > 0
    rank = (header.get("distributedInfo") or {}).get("rank")
    assert streamed.rank == rank
    assert streamed.host_name == header.get("host_name")
    # windows of a few KiB, ending anywhere in an event, give the same trace
    _same(parse_trace(_pieces(_text(path), 4093), path), streamed)


def test_windows_of_a_few_characters_give_the_same_trace():
    path = REAL / "mi250_minitoy_rocm6.json.gz"
    whole = read_trace(path)
    for size in (1, 2, 7, 64, 65, 200):
        _same(parse_trace(_pieces(_text(path), size), path), whole)


def test_values_cut_by_a_window_are_read_whole(tmp_path):
    """A number, a literal, an escape and a non-ASCII name split between windows (and a
    multi-byte character between the file's chunks) read as in one piece."""
    event = {"ph": "X", "cat": "kernel", "name": "gemm_\u00e9\u4e2d", "ts": 123456789.5,
             "dur": 1e3, "pid": 0, "tid": 7, "args": {"flag": True, "none": None,
             "esc": "a\\u00e9"}}  # fmt: skip
    doc = {"schemaVersion": 123456789, "traceEvents": [event] * 3,
           "distributedInfo": {"rank": 12345, "world_size": 23456}, "last": False}  # fmt: skip
    text = json.dumps(doc)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    whole = parse_trace([text], path)
    assert whole.rank == 12345 and whole.world_size == 23456 and len(whole.events) == 3
    for size in range(1, 40):
        _same(parse_trace(_pieces(text, size), path), whole)
    files._CHUNK, chunk = 3, files._CHUNK  # bytes split inside the two-byte and three-byte
    try:
        _same(read_trace(path), whole)
    finally:
        files._CHUNK = chunk


@pytest.mark.parametrize(
    "text",
    [
        '{"traceEvents": [',
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 2}, {"ph"',
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}, {"ph": tru}]}',
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}, 3]}',
        '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": "soon"}]}',
        '{"schemaVersion": 1, "traceEvents": [], "x": [1, 2,',
        '{"traceEvents": [], "x": nul}',
        "not json",
        "   \n ",
    ],
)
def test_a_fault_is_said_at_the_same_byte_whatever_the_windows(text):
    path = Path("bad.json")
    with pytest.raises(MalformedFile) as whole:
        parse_trace([text], path)
    for size in (1, 3, 17):
        with pytest.raises(MalformedFile) as windows:
            parse_trace(_pieces(text, size), path)
        assert str(windows.value) == str(whole.value)


def test_the_analysis_is_the_same_read_in_small_windows(monkeypatch):
    folder = REAL / "sampled_2rank"
    usual = ceiling.trace(folder, workers=1).to_json()

    def small(path, what, limit):
        for chunk in files.text_chunks(path, what, limit):
            yield from _pieces(chunk, 997)

    monkeypatch.setattr(reader, "text_chunks", small)
    assert ceiling.trace(folder, workers=1).to_json() == usual


def test_faults_of_the_file_past_the_json_are_still_said(tmp_path):
    """The rest of the file is read after the document: bytes after it that are no text,
    or a gzip stream cut after the JSON's end, are refused as when the file was read whole."""
    doc = json.dumps({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1}]})
    binary = tmp_path / "b.json"
    binary.write_bytes(doc.encode() + b"\n\x00")
    with pytest.raises(MalformedFile, match="a binary file"):
        read_trace(binary)
    cut = tmp_path / "c.json.gz"
    cut.write_bytes(gzip.compress(doc.encode())[:-6])
    with pytest.raises(MalformedFile, match="truncated"):
        read_trace(cut)
