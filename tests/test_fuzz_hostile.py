"""Hostile files and careless calls, generated: trace files, device TOML and `hf:` configs
(at least 300) and Python API calls (at least 200), each clean -- a result, or one line of
CeilingError (exit 2 on the command line) -- or the test fails. In-process, with a fixed
seed; `benchmarks/hostile_inputs.py` explores a larger set."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

from hostile_cases import (
    Tally,
    api_calls,
    careless_calls,
    hf_configs,
    nothing_measured,
    run_call,
    run_file,
    spec_files,
    trace_files,
)
from patience import HANG_S

FILES = {"trace": (trace_files, 120), "spec": (spec_files, 100), "hf": (hf_configs, 100)}
CALLS = 220
TALLY = Tally()


def _settings(examples: int):
    return settings(
        max_examples=examples,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


@pytest.fixture(scope="module")
def small_files(tmp_path_factory):
    import json

    from hostile_cases import EVENT

    d = tmp_path_factory.mktemp("sound")
    trace = d / "t.json"
    trace.write_text(json.dumps({"traceEvents": [EVENT]}))
    csv = d / "m.csv"
    csv.write_text("N,time\n1,10\n2,5.6\n4,3.4\n")
    return str(trace), str(csv)


@pytest.mark.parametrize("kind", list(FILES))
def test_every_hostile_file_is_read_or_refused_in_one_line(kind, tmp_path_factory):
    strategy, examples = FILES[kind]
    root = tmp_path_factory.mktemp(kind)
    seen = []

    @_settings(examples)
    @given(case=strategy())
    def run(case):
        name, data = case
        outcome = run_file(kind, name, data, root / str(len(seen)))
        seen.append(outcome)
        TALLY.add(kind, outcome, f"{name} {data[:120]!r}")
        assert not outcome.startswith("FAIL"), (name, data[:300], outcome)

    run()
    assert len(seen) >= examples * 0.9  # hypothesis ran (nearly) all it was asked for
    print(f"\nhostile {kind} files: {len(seen)} ({seen.count('ok')} read)")


def test_every_careless_api_call_names_its_argument_or_gives_a_result(small_files):
    calls = api_calls(*small_files)
    seen = []

    @_settings(CALLS)
    @given(case=careless_calls(calls))
    def run(case):
        name, args, kwargs = case
        outcome = run_call(name, args, kwargs)
        seen.append(outcome)
        TALLY.add("api", outcome, f"{name}{args!r} {kwargs!r}")
        assert not outcome.startswith("FAIL"), (name, args, kwargs, outcome)

    with nothing_measured():
        run()
    assert len(seen) >= CALLS * 0.9
    print(f"\ncareless API calls: {len(seen)} ({seen.count('ok')} gave a result)\n{TALLY.table()}")


@pytest.mark.parametrize(
    "content",
    [b"[" * 200_000, b'{"traceEvents": [], "distributedInfo": 5}', b"\x1f\x8b\x08broken"],
)
def test_the_command_line_says_one_line_for_a_hostile_trace(tmp_path, content):
    path = tmp_path / "t.json"
    path.write_bytes(content)
    src = str(Path(__file__).resolve().parents[1] / "src")
    run = subprocess.run(
        [sys.executable, "-m", "ceiling", "trace", str(path), "--spec", "h100-sxm"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": src},
        timeout=HANG_S,
    )
    assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("error: ") and "Traceback" not in run.stderr
