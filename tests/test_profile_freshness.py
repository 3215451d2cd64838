"""A saved machine profile is checked against the process that uses it: another device, torch
or thread count, or a measurement under load, is said in one warning line; a busy measurement
never becomes the default profile."""

from __future__ import annotations

import json
import warnings

import pytest

from ceiling.errors import CeilingWarning
from ceiling.hardware import profile as prof
from ceiling.hardware.profile import MachineProfile, MeasuredDevice, save_profile

IDLE = {"device_name": "AMD EPYC 9B14", "torch": "2.13.0", "threads": 2, "cpu_count": 2,
        "load_average_1min": 0.2}  # fmt: skip


def _device(**env) -> MeasuredDevice:
    return MeasuredDevice("AMD EPYC 9B14", "cpu", {"fp32": 1e11}, 1e10,
                          extra={"environment": {**IDLE, **env}})  # fmt: skip


def test_a_matching_idle_profile_has_no_reason():
    assert prof.stale_reasons(_device(), {"device_name": "AMD EPYC 9B14", "torch": "2.13.0",
                                          "threads": 2}) == []  # fmt: skip


@pytest.mark.parametrize(
    ("env", "here", "said"),
    [
        ({}, {"device_name": "Intel Xeon 8480"}, "it measured AMD EPYC 9B14, not this Intel"),
        ({"torch": "2.4.0"}, {"torch": "2.13.0"}, "torch 2.4.0 then, 2.13.0 now"),
        ({"threads": 16}, {"threads": 2}, "threads 16 then, 2 now"),
        ({"load_average_1min": 7.0}, {}, "busy machine (the load average was 7.0 on 2 logical"),
    ],
)
def test_each_mismatch_is_named(env, here, said):
    (reason,) = prof.stale_reasons(_device(**env), here)
    assert said in reason


def test_a_fact_missing_on_either_side_is_not_compared():
    bare = MeasuredDevice("Test CPU", "cpu", {"fp32": 1e11}, 1e10)
    assert prof.stale_reasons(bare, {"device_name": "AMD EPYC", "torch": "2.13.0"}) == []
    assert prof.stale_reasons(_device(torch="2.4.0"), {}) == []


def test_busy_is_load_above_three_quarters_of_the_cpus():
    assert prof.measured_busy({"load_average_1min": 1.6, "cpu_count": 2})
    assert not prof.measured_busy({"load_average_1min": 1.4, "cpu_count": 2})
    assert not prof.measured_busy({"cpu_count": 2})


def _saved(tmp_path, monkeypatch, **env):
    path = tmp_path / "profile.json"
    save_profile(MachineProfile(2, "2026-01-01T00:00:00+00:00", "h", {}, [_device(**env)]), path)
    monkeypatch.setenv(prof.PROFILE_ENV, str(path))
    monkeypatch.setattr(prof, "_WARNED", set())
    monkeypatch.setattr(prof, "this_process", lambda kind: {"torch": "2.13.0"})
    return path


def test_the_default_profile_warns_once_and_an_explicit_one_never(tmp_path, monkeypatch):
    path = _saved(tmp_path, monkeypatch, torch="2.4.0")
    with pytest.warns(CeilingWarning, match="torch 2.4.0 then, 2.13.0 now"):
        prof.load_profile()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CeilingWarning)
        prof.load_profile()  # said once per process
        other = tmp_path / "other.json"
        other.write_text(path.read_text())
        prof.load_profile(other)  # named on purpose: perhaps another machine's


def test_the_command_line_says_it_in_one_line(cli, tmp_path, monkeypatch):
    _saved(tmp_path, monkeypatch, load_average_1min=7.0)
    code, _out, err = cli("roofline", "--op", "add:1000")
    assert code == 0, err
    lines = [ln for ln in err.splitlines() if ln]
    assert len(lines) == 1 and lines[0].startswith("warning: the saved profile")
    assert "busy machine (the load average was 7.0 on 2 logical CPUs)" in lines[0]


def test_a_busy_measurement_does_not_replace_an_idle_profile(tmp_path, monkeypatch):
    from ceiling.api import bench

    path = _saved(tmp_path, monkeypatch)
    before = path.read_text()
    previous = prof.load_profile(path)
    busy = ["the load average was 5.0 on 2 logical CPUs"]
    kept = bench._busy_keeps(busy, previous, path)
    assert kept and "keeps the profile of 2026-01-01" in kept and "--force" in kept
    assert "load average was 5.0" in kept
    assert bench._busy_keeps([], previous, path) is None
    assert bench._busy_keeps(busy, None, path) is None  # nothing better to keep
    was_busy = prof.MachineProfile(2, "x", "h", {"load_average_1min": 9.0, "cpu_count": 2}, [])
    assert bench._busy_keeps(busy, was_busy, path) is None  # a busy one is no better
    assert json.loads(path.read_text()) == json.loads(before)


def test_a_measurement_records_the_load_it_ran_under():
    import os

    from ceiling.measure.machine import environment

    env = environment("cpu")
    assert env["torch"] and env["threads"] >= 1 and env["device_name"]
    if hasattr(os, "getloadavg"):
        assert env["load_average_1min"] >= 0
