"""Files a hostile user hands ceiling -- traces, device TOML, `hf:` configs, profiles, CSV --
are refused in one line naming the file (and the field, where there is one): never a
traceback, a hang on a FIFO, or memory eaten by a stream or a gzip bomb."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from ceiling import files
from ceiling.errors import MalformedFile
from test_bad_files import _one_line
from test_schema_checks import DEVICE

EVENT = {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "pid": 1, "tid": 1}
TRACE = {"traceEvents": [EVENT]}


def _trace(tmp_path, text: str, name="t.json"):
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    "header, words",
    [
        ({"distributedInfo": 5}, ("distributedInfo", "object")),
        ({"distributedInfo": "x"}, ("distributedInfo", "object")),
        ({"distributedInfo": [1]}, ("distributedInfo", "object")),
        ({"deviceProperties": 5}, ("deviceProperties", "list")),
        ({"distributedInfo": {"rank": -1}}, ("distributedInfo.rank",)),
        ({"distributedInfo": {"rank": "one"}}, ("distributedInfo.rank",)),
        ({"distributedInfo": {"world_size": [2]}}, ("distributedInfo.world_size",)),
    ],
)
def test_trace_header_of_the_wrong_json_type_is_named(cli, tmp_path, header, words):
    path = _trace(tmp_path, json.dumps({**TRACE, **header}))
    _one_line(*cli("trace", path, "--spec", "h100-sxm")[::2], *words)


def test_trace_rank_past_any_float_is_named(cli, tmp_path):
    text = json.dumps(TRACE)[:-1] + ', "distributedInfo": {"rank": 1e400}}'
    _one_line(*cli("trace", _trace(tmp_path, text), "--spec", "h100-sxm")[::2], "rank", "inf")


def test_a_readable_rank_is_still_read(tmp_path):
    from ceiling.trace.reader import read_trace

    path = _trace(tmp_path, json.dumps({**TRACE, "distributedInfo": {"rank": 3.0}}))
    assert read_trace(path).rank == 3


@pytest.mark.parametrize(
    "text",
    [
        "[" * 200_000,
        '{"traceEvents": ' + "[" * 200_000,
        '{"x": ' + "[" * 200_000,
        json.dumps(TRACE).replace('"ts": 1', '"ts": ' + "9" * 5000),
        json.dumps(TRACE).replace('"dur": 2', '"dur": ' + "9" * 400),
        json.dumps({**TRACE, "rank": int("9" * 4000)}).replace("9" * 4000, "9" * 5000),
    ],
    ids=["bare-array", "events", "header", "5000-digit-ts", "400-digit-dur", "header-int"],
)
def test_deep_or_huge_trace_content_is_one_line(cli, tmp_path, text):
    _one_line(*cli("trace", _trace(tmp_path, text), "--spec", "h100-sxm")[::2], "t.json")


@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_a_trace_linked_to_dev_zero_is_refused_before_reading(cli, tmp_path):
    link = tmp_path / "z.json"
    link.symlink_to("/dev/zero")
    _one_line(*cli("trace", link, "--spec", "h100-sxm")[::2], "device or special file")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_is_refused_without_blocking(cli, tmp_path):
    fifo = tmp_path / "f.json"
    os.mkfifo(fifo)
    _one_line(*cli("trace", fifo, "--spec", "h100-sxm")[::2], "FIFO")
    spec = tmp_path / "f.toml"
    os.mkfifo(spec)
    _one_line(*cli("specs", spec)[::2], "FIFO")
    folder = tmp_path / "hf"
    folder.mkdir()
    os.mkfifo(folder / "config.json")
    _one_line(*cli("models", f"hf:{folder}")[::2], "FIFO")


def test_a_gzip_bomb_stops_at_the_stated_cap(cli, tmp_path, monkeypatch):
    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wb") as f:
        f.write(b" " * (3 * 2**20))
    monkeypatch.setenv(files.MAX_BYTES_ENV, "1")
    _one_line(*cli("trace", path, "--spec", "h100-sxm")[::2], "1 MiB", files.MAX_BYTES_ENV)


def test_a_gzip_of_impossible_ratio_is_refused_early(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "_RATIO_JUDGED_FROM", 2**20)
    path = tmp_path / "bomb.json.gz"
    with gzip.open(path, "wb") as f:
        f.write(b" " * (8 * 2**20))
    with pytest.raises(MalformedFile, match=files.GZIP_RATIO_ENV):
        files.read_bytes(path, "trace", files.TRACE_BYTES)


def test_gzip_of_several_members_is_read_whole(tmp_path):
    path = tmp_path / "two.json.gz"
    path.write_bytes(gzip.compress(b'{"a": ') + gzip.compress(b"1}"))
    assert files.read_json(path, "trace") == {"a": 1}


def test_a_truncated_gzip_is_one_line(cli, tmp_path):
    path = tmp_path / "cut.json.gz"
    path.write_bytes(gzip.compress(json.dumps(TRACE).encode())[:-12])
    _one_line(*cli("trace", path, "--spec", "h100-sxm")[::2], "cut.json.gz")


def test_hf_config_too_deep_or_too_large_names_the_field(cli, tmp_path):
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "config.json").write_text('{"a": ' + "[" * 200_000)
    _one_line(*cli("models", f"hf:{folder}")[::2], "nested")
    (folder / "config.json").write_text('{"num_hidden_layers": ' + "9" * 5000 + "}")
    _one_line(*cli("models", f"hf:{folder}")[::2], "num_hidden_layers", "5,000")
    (folder / "config.json").write_text('{"rope": {"theta": 1' + "0" * 400 + ".5}}")
    _one_line(*cli("models", f"hf:{folder}")[::2], "rope.theta")


def test_an_hf_name_too_long_for_the_system_is_one_line(cli):
    _one_line(*cli("models", "hf:" + "a/" * 3000)[::2], "too long")


def test_a_spec_name_too_long_for_the_system_is_one_line(cli):
    _one_line(*cli("specs", "a/" * 3000 + "x.toml")[::2], "too long")


def test_toml_spec_too_deep_or_too_large_is_one_line(cli, tmp_path):
    path = tmp_path / "d.toml"
    path.write_text("x = " + "[" * 200_000)
    _one_line(*cli("specs", path)[::2], "nested")
    path.write_text(DEVICE.replace("memory_gib = 80", "memory_gib = " + "9" * 5000))
    _one_line(*cli("specs", path)[::2], "memory_gib (line 5)")
    path.write_text(DEVICE.replace("memory_gib = 80", "memory_gib = " + "9" * 400))
    _one_line(*cli("specs", path)[::2], "d.memory_gib", "400-digit")


def test_profile_with_huge_or_deep_content_is_one_line(cli, tmp_path):
    path = tmp_path / "p.json"
    path.write_text('{"devices": ' + "[" * 200_000)
    _one_line(*cli("roofline", "--op", "add:1000", "--profile", path)[::2], "nested")
    path.write_text('{"method_version": ' + "9" * 5000 + "}")
    _one_line(*cli("roofline", "--op", "add:1000", "--profile", path)[::2], "method_version")


def test_csv_through_the_same_layer(cli, tmp_path):
    path = tmp_path / "m.json"
    path.write_text('[{"N": 1, "time": ' + "9" * 5000 + "}]")
    _one_line(*cli("fit", path)[::2], "[0].time")


def test_small_files_have_a_stated_cap_that_can_be_raised(tmp_path, monkeypatch):
    path = tmp_path / "big.json"
    path.write_text("[" + "0," * 2**20 + "0]")
    with pytest.raises(MalformedFile, match=r"2 MiB.*CEILING_MAX_INPUT_MB"):
        files.read_json(path, "machine profile", limit_bytes=2 * 2**20)
    monkeypatch.setenv(files.MAX_BYTES_ENV, "4")
    assert len(files.read_json(path, "machine profile", limit_bytes=2 * 2**20)) == 2**20 + 1
